// Fuzz target: a client's messages to a worker, from arbitrary bytes: the
// first parsed as the job open, the rest as work items, against a worker
// core serving a small generated dataset. Validation must refuse what is
// wrong with a Status naming the field; nothing may crash, read outside the
// data root, or wedge the pool.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "pipeline/data/dataset.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/pipeline.h"
#include "proto/worker.pb.h"
#include "server/worker_core.h"
#include "tests/fuzz/fuzz_seeds.h"

// Seeds: a job open of the generated dataset ("data": the target points it
// there) with the imagenet-train pipeline, followed by items at every cut,
// one asking for an index out of range.
void WriteSeeds(const std::string& dir) {
  auto frame = [](const prepflow::proto::ClientMessage& m) {
    const std::string s = m.SerializeAsString();
    if (s.size() > 255) std::abort();
    return std::string(1, static_cast<char>(s.size())) + s;
  };
  prepflow::proto::ClientMessage open;
  open.mutable_open()->set_job_id("j");
  open.mutable_open()->mutable_dataset()->set_path("data");
  *open.mutable_open()->mutable_pipeline() = *prepflow::LoadPipelineSpec("imagenet-train");
  open.mutable_open()->set_dataset_size(4);
  std::string all = frame(open);
  for (int cut = 0; cut <= 4; ++cut) {
    prepflow::proto::ClientMessage item;
    item.mutable_item()->set_item_id(cut + 1);
    item.mutable_item()->set_cut(cut);
    item.mutable_item()->add_indices(cut % 4);
    all += frame(item);
  }
  prepflow::fuzz::WriteSeed(dir, "open-and-items", all);
  prepflow::proto::ClientMessage bad;
  bad.mutable_item()->set_cut(1);
  bad.mutable_item()->add_indices(99);
  prepflow::fuzz::WriteSeed(dir, "open-and-bad-item", frame(open) + frame(bad));
}

namespace {

std::string& Root() {
  static std::string root;
  return root;
}

// The generated dataset's index, so that opens pointed at it are accepted.
int64_t dataset_size = 0;
uint64_t dataset_fingerprint = 0;

prepflow::WorkerCore* Core() {
  static prepflow::WorkerCore* core = [] {
    char tmpl[] = "/tmp/prepflow-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    prepflow::SyntheticFolderOptions o;
    o.classes = 2;
    o.images_per_class = 2;
    o.min_side = 64;
    o.max_side = 96;
    if (!prepflow::WriteSyntheticImageFolder(std::string(tmpl) + "/data", o).ok()) std::abort();
    prepflow::proto::DatasetSpec spec;
    spec.set_path(std::string(tmpl) + "/data");
    auto ds = prepflow::OpenDataset(spec);
    if (!ds.ok()) std::abort();
    dataset_size = (*ds)->size();
    dataset_fingerprint = (*ds)->fingerprint();
    prepflow::WorkerOptions options;
    options.data_root = tmpl;
    Root() = tmpl;
    std::atexit([] { std::filesystem::remove_all(Root()); });
    options.threads = 1;
    options.max_item_samples = 16;
    return new prepflow::WorkerCore(options, nullptr);
  }();
  return core;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Messages are length-prefixed by one byte each, so the fuzzer can grow a
  // job open followed by items.
  std::vector<prepflow::proto::ClientMessage> messages;
  size_t at = 0;
  while (at < size && messages.size() < 8) {
    const size_t n = std::min<size_t>(data[at], size - at - 1);
    prepflow::proto::ClientMessage m;
    if (m.ParseFromArray(data + at + 1, static_cast<int>(n))) messages.push_back(std::move(m));
    at += 1 + n;
  }
  if (messages.empty() || !messages[0].has_open()) return 0;
  prepflow::proto::JobOpen open = messages[0].open();
  // Point the dataset at the generated one half the time, so items get run.
  if (!open.dataset().path().empty() && open.dataset().path()[0] == 'd') {
    Core();
    open.mutable_dataset()->set_path(Root() + "/data");
    open.set_dataset_size(dataset_size);
    open.set_dataset_fingerprint(dataset_fingerprint);
  }
  prepflow::proto::JobOpened opened;
  auto job = Core()->OpenJob(open, "fuzz", &opened);
  if (!job.ok()) return 0;
  for (size_t i = 1; i < messages.size(); ++i) {
    if (!messages[i].has_item()) continue;
    std::promise<void> done;
    const absl::Status s = Core()->Submit(*job, messages[i].item(),
                                          [&done](prepflow::ItemOutput) { done.set_value(); });
    if (s.ok()) done.get_future().wait();
  }
  Core()->CloseJob(*job, "fuzz");
  return 0;
}
