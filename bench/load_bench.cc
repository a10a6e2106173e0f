// Load: N concurrent jobs (one stream each) against one prepflow-worker for
// a while. Reports whether every stream progressed, how evenly the worker
// shared itself (per-stream images/s: min, median, max, Jain's index), and
// the worker's peak memory against a limit. A program, not a test: prints
// one JSON line.
//
//   load_bench --data DIR [--streams 64] [--seconds 60] [--worker-threads 2]
//              [--memory-limit-mb 1024]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "client/loader.h"
#include "client/worker_process.h"
#include "spdlog/spdlog.h"

namespace {

// One remote job per stream, each with its own seed, against `address`;
// false (with the error printed) when one cannot open.
bool OpenLoaders(const std::string& data, const std::string& address, int streams,
                 std::vector<std::unique_ptr<prepflow::Loader>>* loaders) {
  for (int i = 0; i < streams; ++i) {
    prepflow::LoaderOptions o;
    o.dataset.set_path(data);
    o.pipeline = *prepflow::LoadPipelineSpec("imagenet-train");
    o.batch_size = 16;
    o.threads = 1;
    o.epochs = 1000;  // more than the run can reach
    o.seed = static_cast<uint64_t>(i);
    o.offload = *prepflow::ParseOffload("remote");
    o.workers = {address};
    o.item_samples = 4;
    auto loader = prepflow::Loader::Create(o);
    if (!loader.ok()) {
      std::fprintf(stderr, "load_bench: stream %d: %s\n", i,
                   std::string(loader.status().message()).c_str());
      return false;
    }
    loaders->push_back(*std::move(loader));
  }
  return true;
}

// The JSON line: total and per-stream rates, fairness, the worker's peak RSS.
void PrintReport(const std::vector<int64_t>& images, const std::vector<std::string>& errors,
                 double elapsed, int worker_threads, int64_t remote, long rss,
                 double memory_limit_mb) {
  const int streams = static_cast<int>(images.size());
  std::vector<double> rates;
  for (int64_t n : images) rates.push_back(n / elapsed);
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0, sum_sq = 0;
  for (double r : rates) sum += r, sum_sq += r * r;
  const double jain = sum_sq > 0 ? sum * sum / (rates.size() * sum_sq) : 0;
  int failed = 0;
  for (const std::string& e : errors) failed += e.empty() ? 0 : 1;
  std::printf(
      "{\"streams\": %d, \"seconds\": %.1f, \"worker_threads\": %d, \"images_per_s\": %.1f, "
      "\"remote_images\": %lld, \"per_stream_min\": %.2f, \"per_stream_median\": %.2f, "
      "\"per_stream_max\": %.2f, \"jain_fairness\": %.4f, \"every_stream_progressed\": %s, "
      "\"failed_streams\": %d, \"worker_peak_rss_mb\": %.1f, \"memory_limit_mb\": %.0f, "
      "\"rss_under_limit\": %s}\n",
      streams, elapsed, worker_threads, sum, static_cast<long long>(remote), sorted.front(),
      sorted[sorted.size() / 2], sorted.back(), jain, sorted.front() > 0 ? "true" : "false", failed,
      rss / 1048576.0, memory_limit_mb, rss / 1048576.0 < memory_limit_mb ? "true" : "false");
  for (int i = 0; i < streams; ++i) {
    if (!errors[i].empty()) std::fprintf(stderr, "stream %d: %s\n", i, errors[i].c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, bin_dir = PREPFLOW_BIN_DIR;
  int streams = 64, worker_threads = 2;
  double seconds = 60, memory_limit_mb = 1024;
  prepflow::cli::FlagSet flags("load_bench", "N concurrent job streams against one worker.");
  flags.String("data", &data, "an ImageFolder; the worker's data root is its parent");
  flags.Int("streams", &streams, "concurrent jobs, one stream each");
  flags.Double("seconds", &seconds, "how long to run them");
  flags.Int("worker-threads", &worker_threads, "the worker's preprocessing threads");
  flags.Double("memory-limit-mb", &memory_limit_mb, "the worker's peak RSS must stay under this");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (data.empty() || streams < 1) {
    std::fprintf(stderr, "load_bench: --data is required and --streams must be at least 1\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  char real[PATH_MAX];
  if (realpath(data.c_str(), real) == nullptr) {
    std::fprintf(stderr, "load_bench: --data %s: %s\n", data.c_str(), std::strerror(errno));
    return 2;
  }
  data = real;
  const std::string root = data.substr(0, data.rfind('/'));
  auto worker = prepflow::WorkerProcess::Start(
      bin_dir + "/prepflow-worker", root,
      {"--threads", absl::StrCat(worker_threads), "--max-streams", absl::StrCat(streams),
       "--max-streams-per-client", absl::StrCat(streams)});
  if (!worker.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", std::string(worker.status().message()).c_str());
    return 1;
  }

  std::vector<std::unique_ptr<prepflow::Loader>> loaders;
  if (!OpenLoaders(data, (*worker)->address(), streams, &loaders)) return 1;
  std::atomic<bool> stop{false};
  std::vector<int64_t> images(streams, 0);
  std::vector<std::string> errors(streams);
  std::vector<std::thread> consumers;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < streams; ++i) {
    consumers.emplace_back([&, i] {
      while (!stop.load()) {
        auto batch = loaders[i]->Next();
        if (!batch.ok()) {
          errors[i] = std::string(batch.status().message());
          return;
        }
        if (*batch == nullptr) return;
        images[i] += (*batch)->size();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& t : consumers) t.join();
  const long rss = (*worker)->PeakRssBytes();
  int64_t remote = 0;
  for (auto& l : loaders) remote += l->Stats().remote_images;
  loaders.clear();

  PrintReport(images, errors, elapsed, worker_threads, remote, rss, memory_limit_mb);
  return 0;
}
