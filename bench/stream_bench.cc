// How fast one client ingests from one worker: opens a job on --worker, keeps
// --credits work items of --item-samples samples outstanding at cut 0 (the
// worker only reads the files, so the prefix is nearly free and the wire is
// what is measured), and counts the sample bytes that arrive. Prints one JSON
// line with GB/s and the client's CPU seconds per GB.
//
//   stream_bench --worker HOST:PORT --data DIR [--seconds 10] [--item-samples 4] [--credits 4]
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/flags.h"
#include "client/remote/remote_worker.h"
#include "pipeline/core/executor.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"

namespace {

struct Args {
  std::string worker, data;
  double seconds = 10;
  int item_samples = 4, credits = 4;

  // The exit code when main should stop (bad flags, --help).
  std::optional<int> Parse(int argc, char** argv) {
    prepflow::cli::FlagSet flags("stream_bench", "One client ingesting from one worker at cut 0.");
    flags.String("worker", &worker, "prepflow-worker address");
    flags.String("data", &data, "dataset (absolute path below the worker's data root)");
    flags.Double("seconds", &seconds, "how long to measure");
    flags.Int("item-samples", &item_samples, "samples per work item");
    flags.Int("credits", &credits, "work items outstanding (the worker may allow fewer)");
    if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return exit;
    if (worker.empty() || data.empty()) {
      std::fprintf(stderr, "stream_bench: --worker and --data are required\n");
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

void PrintReport(double wall, double gb, double cpu, int item_samples, int credits,
                 double sample_bytes) {
  std::printf(
      "{\"program\":\"stream_bench\",\"seconds\":%.3f,\"gbytes\":%.3f,\"gbytes_per_s\":%.3f,"
      "\"client_cpu_seconds\":%.3f,\"client_cpu_s_per_gb\":%.4f,\"item_samples\":%d,"
      "\"credits\":%d,\"sample_bytes\":%.0f}\n",
      wall, gb, gb / wall, cpu, cpu / gb, item_samples, credits, sample_bytes);
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

  absl::Mutex mu;
  int granted = 0;
  int outstanding = 0;
  bool closed = false;
  absl::Status final_status;
  int64_t bytes = 0, samples = 0;
  prepflow::RemoteWorker::Handlers handlers;
  handlers.opened = [&](const prepflow::proto::JobOpened& o) {
    absl::MutexLock lock(&mu);
    granted = std::min(args.credits, o.max_items_in_flight());
  };
  handlers.result = [&](std::shared_ptr<const prepflow::ReceivedMessage> r) {
    int64_t b = 0;
    for (size_t i = 0; i < r->payloads.size(); ++i) b += static_cast<int64_t>(r->payload_size(i));
    absl::MutexLock lock(&mu);
    bytes += b;
    samples += r->message.result().samples_size();
    --outstanding;
  };
  handlers.closed = [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    closed = true;
    final_status = s;
  };
  prepflow::RemoteWorker stream(args.worker, handlers);
  stream.Start(BenchJob(spec, **ds, args.credits));

  uint64_t next_item = 1;
  int64_t next_index = 0, t0 = 0, c0 = 0, warm_bytes = 0;
  bool measuring = false;
  const int64_t warmup = static_cast<int64_t>(1e9);
  const int64_t begin = prepflow::WallNanos();
  absl::MutexLock lock(&mu);
  while (true) {
    auto ready = [&]() { return closed || (granted > 0 && outstanding < granted); };
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
    prepflow::proto::WorkItem item;
    item.set_item_id(next_item++);
    item.set_cut(0);
    for (int i = 0; i < args.item_samples; ++i) item.add_indices(next_index++ % n);
    ++outstanding;
    stream.Send(std::move(item));
  }
  const double wall = (prepflow::WallNanos() - t0) * 1e-9;
  const double cpu = (prepflow::ProcessCpuNanos() - c0) * 1e-9;
  const double gb = (bytes - warm_bytes) * 1e-9;
  const bool ok = !closed;
  mu.Unlock();
  stream.Cancel();
  mu.Lock();
  if (!ok) {
    std::fprintf(stderr, "stream_bench: the stream ended: %s\n", final_status.ToString().c_str());
    return 1;
  }
  PrintReport(wall, gb, cpu, args.item_samples, granted,
              samples > 0 ? static_cast<double>(bytes) / samples : 0.0);
  return 0;
}
