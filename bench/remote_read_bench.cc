// How fast a dataset's samples come off storage through prepflow's read path,
// and nothing else: what a worker's (or trainer's) reads reach before any
// CPU stage. Each of --threads threads takes batches of --batch samples in
// epoch order, hints them to the read-ahead (Dataset::Prefetch, as the Loader
// and the worker do), then reads each one.
//
//   remote_read_bench --data URL|PATH [--threads 2] [--batch 64]
//                     [--read-ahead-requests 64] [--read-ahead-bytes N]
//   prints one JSON line: samples, bytes, seconds, MB/s, requests, retries
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "client/datasets.h"
#include "pipeline/core/profiler.h"
#include "storage/options.h"

int main(int argc, char** argv) {
  std::string data;
  int threads = 2, batch = 64;
  prepflow::RemoteReadOptions remote;
  prepflow::cli::FlagSet flags("remote_read_bench",
                               "Reads every sample of a dataset through prepflow's read path "
                               "(read-ahead included) and reports the rate.");
  flags.String("data", &data, "a dataset: a URL (http, https, s3) or a path");
  flags.Int("threads", &threads, "reading threads (as decode threads would)");
  flags.Int("batch", &batch, "samples hinted to the read-ahead at a time, per thread");
  prepflow::RegisterOptionFlags(flags, prepflow::StorageOptionFields(), &remote);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (data.empty() || threads < 1 || batch < 1) {
    std::fprintf(stderr, "remote_read_bench: --data is required; --threads, --batch >= 1\n");
    return 2;
  }
  prepflow::proto::DatasetSpec spec;
  spec.set_path(data);
  const int64_t t_open = prepflow::WallNanos();
  auto ds = prepflow::OpenClientDataset(spec, remote);
  if (!ds.ok()) {
    std::fprintf(stderr, "remote_read_bench: %s\n", std::string(ds.status().message()).c_str());
    return 1;
  }
  const double open_seconds = (prepflow::WallNanos() - t_open) * 1e-9;
  const prepflow::StorageStats opened =
      (*ds)->store() != nullptr ? (*ds)->store()->stats() : prepflow::StorageStats();
  const int64_t n = (*ds)->size();
  std::atomic<int64_t> next{0}, bytes{0}, errors{0};
  const int64_t t0 = prepflow::WallNanos();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      prepflow::Buffer buf;
      std::vector<int64_t> indices;
      while (true) {
        const int64_t first = next.fetch_add(batch);
        if (first >= n) return;
        indices.clear();
        for (int64_t i = first; i < std::min<int64_t>(n, first + batch); ++i) indices.push_back(i);
        (*ds)->Prefetch(indices);
        for (const int64_t i : indices) {
          size_t size = 0;
          if ((*ds)->Read(i, &buf, &size).ok()) {
            bytes += static_cast<int64_t>(size);
          } else {
            ++errors;
          }
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double seconds = (prepflow::WallNanos() - t0) * 1e-9;
  prepflow::StorageStats s =
      (*ds)->store() != nullptr ? (*ds)->store()->stats() : prepflow::StorageStats();
  s = s.Minus(opened);
  std::printf(
      "{\"data\":\"%s\",\"samples\":%lld,\"errors\":%lld,\"bytes\":%lld,\"open_seconds\":%.3f,"
      "\"seconds\":%.3f,\"mb_per_s\":%.2f,\"samples_per_s\":%.1f,\"requests\":%lld,"
      "\"retries\":%lld,\"threads\":%d,\"read_ahead_requests\":%d}\n",
      data.c_str(), static_cast<long long>(n), static_cast<long long>(errors.load()),
      static_cast<long long>(bytes.load()), open_seconds, seconds, bytes.load() / seconds / 1e6,
      n / seconds, static_cast<long long>(s.requests), static_cast<long long>(s.retries), threads,
      remote.read_ahead.requests);
  return errors.load() == 0 ? 0 : 1;
}
