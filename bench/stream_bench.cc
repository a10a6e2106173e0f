// How fast one client ingests from workers: opens a job on each of --streams
// streams to --worker (comma-separated workers are taken in turn), keeps
// --credits work items of --item-samples samples outstanding on each at cut 0
// (the worker only reads the files, so the prefix is nearly free and the wire
// is what is measured), and counts the sample bytes that arrive. Prints one
// JSON line with GB/s, the client's CPU seconds per GB and its threads.
//
//   stream_bench --worker HOST:PORT[,HOST:PORT...] --data DIR [--streams 1] [--seconds 10]
//                [--item-samples 4] [--credits 4]

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/flags.h"
#include "base/process_stats.h"
#include "client/remote/remote_worker.h"
#include "pipeline/core/executor.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"

namespace {

struct Args {
  std::string worker, data;
  double seconds = 10;
  int item_samples = 4, credits = 4, streams = 1;

  // The exit code when main should stop (bad flags, --help).
  std::optional<int> Parse(int argc, char** argv) {
    prepflow::cli::FlagSet flags("stream_bench", "One client ingesting from one worker at cut 0.");
    flags.String("worker", &worker, "prepflow-worker address (a comma-separated list: in turn)");
    flags.Int("streams", &streams, "job streams this client opens");
    flags.String("data", &data, "dataset (absolute path below the worker's data root)");
    flags.Double("seconds", &seconds, "how long to measure");
    flags.Int("item-samples", &item_samples, "samples per work item");
    flags.Int("credits", &credits, "work items outstanding (the worker may allow fewer)");
    if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return exit;
    if (worker.empty() || data.empty() || streams < 1) {
      std::fprintf(stderr, "stream_bench: --worker, --data and --streams >= 1 are required\n");
      return 2;
    }
    return std::nullopt;
  }
};

// The job the benchmark opens: imagenet-train over `dataset`, at most
// `credits` items in flight.
prepflow::proto::JobOpen BenchJob(const prepflow::proto::DatasetSpec& spec,
                                  const prepflow::Dataset& dataset, int credits) {
  prepflow::proto::JobOpen open;
  open.set_job_id("stream-bench");
  *open.mutable_dataset() = spec;
  *open.mutable_pipeline() = *prepflow::LoadPipelineSpec("imagenet-train");
  open.set_dataset_size(dataset.size());
  open.set_dataset_fingerprint(dataset.fingerprint());
  open.set_max_items_in_flight(credits);
  return open;
}

void PrintReport(double wall, double gb, double cpu, const Args& args, int credits,
                 double sample_bytes, int threads) {
  std::printf(
      "{\"program\":\"stream_bench\",\"streams\":%d,\"seconds\":%.3f,\"gbytes\":%.3f,"
      "\"gbytes_per_s\":%.3f,\"client_cpu_seconds\":%.3f,\"client_cpu_s_per_gb\":%.4f,"
      "\"client_threads\":%d,\"item_samples\":%d,\"credits\":%d,\"sample_bytes\":%.0f}\n",
      args.streams, wall, gb, gb / wall, cpu, cpu / gb, threads, args.item_samples, credits,
      sample_bytes);
}

// One stream's state; `mu` is the benchmark's one lock.
struct Stream {
  std::unique_ptr<prepflow::RemoteWorker> worker;
  int granted = 0, outstanding = 0;
};

// What the streams' handlers share with the main loop, under `mu`.
struct Shared {
  absl::Mutex mu;
  bool closed = false;
  absl::Status final_status;
  int64_t bytes = 0, samples = 0;
};

// --streams streams over the --worker list, not started; their handlers
// count into `shared`.
std::vector<Stream> OpenStreams(const Args& args, Shared* shared) {
  std::vector<Stream> streams(static_cast<size_t>(args.streams));
  const std::vector<std::string> workers = absl::StrSplit(args.worker, ',');
  Stream* all = streams.data();  // the vector is not resized after this
  for (size_t k = 0; k < streams.size(); ++k) {
    prepflow::RemoteWorker::Handlers handlers;
    handlers.opened = [shared, all, k, &args](const prepflow::proto::JobOpened& o) {
      absl::MutexLock lock(&shared->mu);
      all[k].granted = std::min(args.credits, o.max_items_in_flight());
    };
    handlers.result = [shared, all, k](std::shared_ptr<const prepflow::ReceivedMessage> r) {
      int64_t b = 0;
      for (size_t i = 0; i < r->payloads.size(); ++i) b += static_cast<int64_t>(r->payload_size(i));
      absl::MutexLock lock(&shared->mu);
      shared->bytes += b;
      shared->samples += r->message.result().samples_size();
      --all[k].outstanding;
    };
    handlers.closed = [shared](const absl::Status& s) {
      absl::MutexLock lock(&shared->mu);
      if (!shared->closed) shared->final_status = s;
      shared->closed = true;
    };
    streams[k].worker =
        std::make_unique<prepflow::RemoteWorker>(workers[k % workers.size()], handlers);
  }
  return streams;
}

}  // namespace

int main(int argc, char** argv) {
  prepflow::TuneAllocatorForStreaming();  // as prepflow itself runs
  Args args;
  if (std::optional<int> exit = args.Parse(argc, argv)) return *exit;
  prepflow::proto::DatasetSpec spec;
  spec.set_path(args.data);
  auto ds = prepflow::OpenDataset(spec);
  if (!ds.ok()) {
    std::fprintf(stderr, "stream_bench: %s\n", std::string(ds.status().message()).c_str());
    return 1;
  }
  const int64_t n = (*ds)->size();

  Shared shared;
  absl::Mutex& mu = shared.mu;
  std::vector<Stream> streams = OpenStreams(args, &shared);
  for (Stream& st : streams) st.worker->Start(BenchJob(spec, **ds, args.credits));

  bool& closed = shared.closed;
  int64_t& bytes = shared.bytes;
  uint64_t next_item = 1;
  int64_t next_index = 0, t0 = 0, c0 = 0, warm_bytes = 0;
  bool measuring = false;
  const int64_t warmup = static_cast<int64_t>(1e9);
  const int64_t begin = prepflow::WallNanos();
  int threads = 0;
  mu.Lock();
  while (true) {
    auto ready = [&]() {
      if (closed) return true;
      for (const Stream& st : streams) {
        if (st.granted > 0 && st.outstanding < st.granted) return true;
      }
      return false;
    };
    mu.Await(absl::Condition(&ready));
    if (closed) break;
    const int64_t now = prepflow::WallNanos();
    if (!measuring && now - begin > warmup) {  // one second to warm up
      measuring = true;
      t0 = now;
      c0 = prepflow::ProcessCpuNanos();
      warm_bytes = bytes;
    }
    if (measuring && now - t0 > static_cast<int64_t>(args.seconds * 1e9)) break;
    for (Stream& st : streams) {
      while (st.granted > 0 && st.outstanding < st.granted) {
        prepflow::proto::WorkItem item;
        item.set_item_id(next_item++);
        item.set_cut(0);
        for (int i = 0; i < args.item_samples; ++i) item.add_indices(next_index++ % n);
        ++st.outstanding;
        st.worker->Send(std::move(item));
      }
    }
  }
  const double wall = (prepflow::WallNanos() - t0) * 1e-9;
  const double cpu = (prepflow::ProcessCpuNanos() - c0) * 1e-9;
  const double gb = (bytes - warm_bytes) * 1e-9;
  threads = prepflow::ProcessThreadCount();
  const bool ok = !closed;
  const int granted = streams[0].granted;
  mu.Unlock();
  for (Stream& st : streams) st.worker->Cancel();
  streams.clear();
  if (!ok) {
    std::fprintf(stderr, "stream_bench: a stream ended: %s\n",
                 shared.final_status.ToString().c_str());
    return 1;
  }
  PrintReport(wall, gb, cpu, args, granted,
              shared.samples > 0 ? static_cast<double>(bytes) / shared.samples : 0.0, threads);
  return 0;
}
