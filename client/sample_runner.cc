#include "client/sample_runner.h"

#include <algorithm>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/wire.h"
#include "pipeline/reuse/materialize.h"
#include "policy/measurements.h"

namespace prepflow {
namespace {

std::vector<std::string> RemoteStageNames(const Pipeline& pipeline) {
  std::vector<std::string> names = {"read"};
  for (const std::string& s : pipeline.stage_names()) names.push_back(s);
  return names;
}

policy::StageTotals Totals(const StageStats& s) {
  return {s.cpu_seconds, static_cast<double>(s.output_bytes), static_cast<double>(s.samples)};
}

std::vector<policy::StageTotals> Totals(const std::vector<StageStats>& stats) {
  std::vector<policy::StageTotals> out;
  for (const StageStats& s : stats) out.push_back(Totals(s));
  return out;
}

}  // namespace

SampleRunner::SampleRunner(const Dataset* dataset, const Pipeline* pipeline, Sources sources,
                           int threads, size_t queue_capacity, std::function<void()> batch_done)
    : dataset_(*dataset),
      pipeline_(*pipeline),
      cache_(sources.cache),
      materialized_(sources.materialized),
      echo_(sources.echo),
      echo_store_(sources.echo.bytes),
      batch_done_(std::move(batch_done)),
      read_profiler_({"read"}),
      stage_profiler_(pipeline->stage_names()),
      remote_profiler_(RemoteStageNames(*pipeline)),
      threads_(threads, queue_capacity) {
  const int64_t max_file_bytes =
      dataset_.max_file_bytes() > 0 ? dataset_.max_file_bytes() : kDefaultMaxFileBytes;
  for (int k = 0; k <= pipeline_.num_stages(); ++k) {
    max_sample_bytes_.push_back(pipeline_.MaxBytesAt(k, max_file_bytes));
  }
  // One per thread that started (the Loader refuses to run with fewer).
  for (int i = 0; i < threads_.size(); ++i) workspaces_.push_back(std::make_unique<Workspace>());
}

SampleRunner::~SampleRunner() { Stop(); }

void SampleRunner::Stop() { threads_.Stop(); }

void SampleRunner::RunLocal(Batch* batch, int64_t slot) {
  Submit([this, batch, slot](int thread) { RunSample(thread, batch, slot); });
}

bool SampleRunner::Finish(Batch* batch, int64_t slot, const absl::Status& status, const Sample& s,
                          bool remote) {
  return status.ok()
             ? batch->FinishOk(slot, s.label, RecordHash(s), remote)
             : batch->FinishError(slot, SampleError{s.index, dataset_.SamplePath(s.index), status});
}

absl::Status SampleRunner::Load(Sample& s, Workspace& ws, int* from) {
  *from = 0;
  if (cache_ != nullptr && cache_->Restore(s, ws)) {
    *from = cache_->boundary();
    return absl::OkStatus();
  }
  const int64_t t0 = ThreadCpuNanos(), wall0 = WallNanos();
  const StorageStats storage_before = ThreadStorageStats();
  size_t size = 0;
  absl::Status status;
  try {
    // Materialized data holds the whole record in its one member.
    status = materialized_ != nullptr ? ReadRecord(dataset_, MediaOnly(), ws, s, &size)
                                      : ReadRecord(dataset_, pipeline_.fields(), ws, s, &size);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory reading the sample");
  }
  read_profiler_.Record(0, ThreadCpuNanos() - t0, static_cast<int64_t>(size));
  read_wall_nanos_.fetch_add(WallNanos() - wall0, std::memory_order_relaxed);
  CountStorage(s.epoch, ThreadStorageStats().Minus(storage_before).bytes);
  if (!status.ok()) return status;
  if (materialized_ != nullptr) {
    // Materialized data: the stored value is the one after its stages.
    status = DecodeMaterialized(*materialized_, pipeline_.options().decode, ws, s);
    if (!status.ok()) return status;
    *from = materialized_->upto();
  }
  if (cache_ == nullptr) return absl::OkStatus();
  const int start = *from;
  *from = cache_->boundary();
  status = pipeline_.Run(start, *from, s, ws, &stage_profiler_);
  if (status.ok()) cache_->Keep(s);
  return status;
}

absl::Status SampleRunner::LoadTo(Sample& s, Workspace& ws, int target, int* from) {
  absl::Status status = Load(s, ws, from);
  if (status.ok() && *from < target) {
    status = pipeline_.Run(*from, target, s, ws, &stage_profiler_);
    *from = target;
  }
  return status;
}

std::vector<int64_t> SampleRunner::NotLoaded(uint64_t epoch,
                                             const std::vector<int64_t>& indices) const {
  return echo_store_.NotStarted(epoch, indices);
}

void SampleRunner::CountStorage(uint64_t epoch, int64_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock lock(&storage_mu_);
  storage_by_epoch_[epoch] += bytes;
}

absl::Status SampleRunner::RunToSlot(int from, Sample& s, Workspace& ws, Batch* batch,
                                     int64_t slot) {
  // A fixed batch's slot is the last op's sink; a ragged one copies.
  uint8_t* sink = batch->ragged() ? nullptr : batch->slot(slot);
  absl::Status status = pipeline_.Run(from, pipeline_.num_stages(), s, ws, &stage_profiler_, sink,
                                      batch->sample_bytes());
  return status.ok() ? batch->Keep(slot, s) : status;
}

void SampleRunner::RunSample(int thread, Batch* batch, int64_t slot) {
  Workspace& ws = *workspaces_[thread];
  Sample s;
  s.epoch = batch->epoch();
  dataset_.Describe(batch->index_at(slot), s);
  s.copy = batch->copy_at(slot);
  s.echo_at = echo_.at;
  int from = 0;
  absl::Status status;
  if (batch->echo() > 1) {
    // Copies share the value at the echo boundary (past the cache's, if
    // that is later: the stages between draw nothing), made once.
    const int at = std::max(echo_.at, cache_ != nullptr ? cache_->boundary() : 0);
    status = echo_store_.Get(s, ws, batch->echo(), [&] { return LoadTo(s, ws, at, &from); });
    from = at;
  } else {
    status = Load(s, ws, &from);
  }
  if (status.ok()) status = RunToSlot(from, s, ws, batch, slot);
  if (Finish(batch, slot, status, s, /*remote=*/false)) batch_done_();
}

void SampleRunner::TakeRemote(const RemoteItem& item,
                              const std::shared_ptr<const ReceivedMessage>& answer,
                              const std::string& address) {
  // A worker's word on its transport cost, when plausible.
  const double per_byte =
      policy::PlausibleCpuPerByte(answer->message.result().transport_cpu_per_byte());
  if (per_byte > 0) {
    const auto bytes = static_cast<int64_t>(answer->wire_bytes);
    worker_transport_cpu_nanos_.fetch_add(static_cast<int64_t>(per_byte * 1e9 * bytes),
                                          std::memory_order_relaxed);
    worker_transport_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  const proto::ItemResult& result = answer->message.result();
  if (result.has_storage()) {
    const proto::StorageCost& cost = result.storage();
    absl::MutexLock lock(&storage_mu_);
    remote_storage_.bytes += cost.bytes();
    remote_storage_.requests += cost.requests();
    remote_storage_.retries += cost.retries();
    remote_storage_.errors += cost.errors();
    remote_storage_.whole_objects += cost.whole_objects();
    if (cost.bytes() > 0) storage_by_epoch_[item.batch->epoch()] += cost.bytes();
  }
  // Its reads' waits and bytes, taken together when both are plausible: at
  // most a minute and the largest file the dataset admits per sample (a
  // worker's word on them feeds the planner's storage terms).
  const double wait = result.read_wait_seconds();
  const int64_t samples = std::max(1, result.samples_size());
  if (wait >= 0 && wait <= 60.0 * samples && result.read_bytes() >= 0 &&
      result.read_bytes() <= samples * max_sample_bytes_[0]) {
    remote_read_wait_nanos_.fetch_add(static_cast<int64_t>(wait * 1e9), std::memory_order_relaxed);
    remote_read_bytes_.fetch_add(result.read_bytes(), std::memory_order_relaxed);
  }
  if (result.has_cache()) {
    remote_cache_hits_.fetch_add(std::max<int64_t>(0, result.cache().hits()),
                                 std::memory_order_relaxed);
    remote_cache_misses_.fetch_add(std::max<int64_t>(0, result.cache().misses()),
                                   std::memory_order_relaxed);
  }
  // The item is ours alone now, and its batch cannot be handed out before
  // every slot is finished: copy and finish without a lock.
  bool done = false;
  for (size_t i = 0; i < item.slots.size(); ++i) {
    done |= TakeRemoteSample(item, i, answer, address);
  }
  if (done) batch_done_();
}

bool SampleRunner::TakeRemoteSample(const RemoteItem& item, size_t i,
                                    const std::shared_ptr<const ReceivedMessage>& answer,
                                    const std::string& address) {
  const proto::ItemResult& result = answer->message.result();
  const int64_t slot = item.slots[i];
  Batch* batch = item.batch;
  Sample s;
  s.index = batch->index_at(slot);
  auto fail = [&](absl::Status status) { return Finish(batch, slot, status, s, /*remote=*/true); };
  const proto::SampleResult* r =
      static_cast<int>(i) < result.samples_size() ? &result.samples(static_cast<int>(i)) : nullptr;
  if (r == nullptr || r->index() != s.index) {
    return fail(absl::InternalError(absl::StrCat("worker ", address, " answered item ",
                                                 result.item_id(), " with the wrong samples")));
  }
  if (r->code() == static_cast<int>(absl::StatusCode::kResourceExhausted)) {
    // The worker could not hold it (its working memory, its limits): the
    // sample runs here, and its outcome is the one a local run gives.
    RunLocal(batch, slot);
    return false;
  }
  if (r->code() != 0) {
    return fail(absl::Status(static_cast<absl::StatusCode>(r->code()),
                             absl::StrCat("on worker ", address, ": ", r->error())));
  }
  // Costs are taken only where they name stages the item ran (a worker's
  // word is not trusted to index the profiler).
  const int first = r->first_stage();
  if (first >= 0 && first <= item.cut && r->stages_size() <= item.cut - first) {
    if (!r->cache_hit() && !r->echoed()) {
      remote_profiler_.Record(0, static_cast<int64_t>(r->read_cpu_seconds() * 1e9), 0);
    }
    for (int k = 0; k < r->stages_size(); ++k) {
      remote_profiler_.Record(first + k + 1, static_cast<int64_t>(r->stages(k).cpu_seconds() * 1e9),
                              r->stages(k).output_bytes());
    }
  }
  const size_t size = answer->payload_size(i);
  if (item.cut == pipeline_.num_stages() && !batch->ragged() && !pipeline_.record()) {
    // The finished tensor: one copy, from the receive buffer into its slot.
    if (size != batch->sample_bytes()) {
      return fail(absl::InternalError(
          absl::StrCat("worker result has ", size, " bytes, expected ", batch->sample_bytes())));
    }
    answer->CopyPayload(i, batch->slot(slot));
    s.label = r->label();
    s.data = batch->slot(slot);
    s.size = size;
    return Finish(batch, slot, absl::OkStatus(), s, /*remote=*/true);
  }
  // A sample bigger than its type allows is a worker bug or a forgery:
  // refused before anything is decoded from it.
  const int64_t bound = max_sample_bytes_[item.cut];
  if (static_cast<int64_t>(size) > bound) {
    return fail(absl::DataLossError(absl::StrCat("worker ", address, " sent ", size,
                                                 " bytes for one sample at cut ", item.cut,
                                                 "; at most ", bound, " are possible")));
  }
  const int sample = static_cast<int>(i);
  const int cut = item.cut;
  Submit([this, batch, slot, cut, answer, sample](int thread) {
    RunSuffix(thread, batch, slot, cut, answer, sample);
  });
  return false;
}

void SampleRunner::RunSuffix(int thread, Batch* batch, int64_t slot, int cut,
                             const std::shared_ptr<const ReceivedMessage>& answer, int sample) {
  Workspace& ws = *workspaces_[thread];
  const proto::SampleResult& r = answer->message.result().samples(sample);
  Sample s;
  s.epoch = batch->epoch();
  s.index = r.index();  // checked against the item's
  s.label = r.label();
  s.window = dataset_.window(s.index);
  s.copy = batch->copy_at(slot);
  s.echo_at = echo_.at;
  const int64_t cpu = ThreadCpuNanos();
  absl::Status status = FromWire(r.value(), answer->payloads[sample], ws, s);
  wire_copy_cpu_nanos_.fetch_add(ThreadCpuNanos() - cpu, std::memory_order_relaxed);
  if (status.ok()) status = RunToSlot(cut, s, ws, batch, slot);
  if (Finish(batch, slot, status, s, /*remote=*/true)) batch_done_();
}

void SampleRunner::Measure(policy::Snapshot* snapshot) const {
  snapshot->read = Totals(read_profiler_.Snapshot()[0]);
  snapshot->local_stages = Totals(stage_profiler_.Snapshot());
  snapshot->remote_stages = Totals(remote_profiler_.Snapshot());
  snapshot->receive_cpu_seconds += wire_copy_cpu_nanos_.load(std::memory_order_relaxed) * 1e-9;
  snapshot->worker_transport = {
      worker_transport_cpu_nanos_.load(std::memory_order_relaxed) * 1e-9,
      static_cast<double>(worker_transport_bytes_.load(std::memory_order_relaxed))};
  snapshot->read_wait_seconds = read_wall_nanos_.load(std::memory_order_relaxed) * 1e-9;
  snapshot->read_threads = threads();
  snapshot->remote_read_wait_seconds =
      remote_read_wait_nanos_.load(std::memory_order_relaxed) * 1e-9;
  snapshot->remote_read_bytes =
      static_cast<double>(remote_read_bytes_.load(std::memory_order_relaxed));
}

std::map<uint64_t, int64_t> SampleRunner::StorageBytesByEpoch() const {
  absl::MutexLock lock(&storage_mu_);
  return storage_by_epoch_;
}

StorageStats SampleRunner::RemoteStorage() const {
  absl::MutexLock lock(&storage_mu_);
  return remote_storage_;
}

std::vector<StageStats> SampleRunner::LocalStages() const {
  std::vector<StageStats> stages = read_profiler_.Snapshot();
  for (StageStats& s : stage_profiler_.Snapshot()) stages.push_back(std::move(s));
  return stages;
}

}  // namespace prepflow
