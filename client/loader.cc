#include "client/loader.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeline/epoch_order.h"
#include "spdlog/spdlog.h"

namespace prepflow {

absl::StatusOr<OnError> ParseOnError(const std::string& name) {
  if (name == "skip") return OnError::kSkip;
  if (name == "fail") return OnError::kFail;
  return absl::InvalidArgumentError(absl::StrCat("--on-error: '", name, "' is not skip or fail"));
}

// Batches not in use. Delivered BatchPtrs hold a reference so that a batch
// kept past the Loader's life is still freed safely.
struct Loader::Pool {
  absl::Mutex mu;
  std::vector<std::unique_ptr<Batch>> free ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(const LoaderOptions& options) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (options.batch_size < 1)
    return invalid("--batch: must be at least 1, got ", options.batch_size);
  if (options.threads < 0) return invalid("--threads: must be >= 0, got ", options.threads);
  if (options.epochs < 1) return invalid("--epochs: must be at least 1, got ", options.epochs);
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid("--rank/--world-size: need 0 <= rank < world_size, got ", options.rank, "/",
                   options.world_size);
  }
  if (options.prefetch_batches < 1) {
    return invalid("--prefetch: must be at least 1, got ", options.prefetch_batches);
  }
  if (options.max_pixels < 1)
    return invalid("--max-pixels: must be positive, got ", options.max_pixels);

  std::unique_ptr<Loader> loader(new Loader);
  loader->options_ = options;
  PipelineOptions popts;
  popts.seed = options.seed;
  popts.decode.max_pixels = options.max_pixels;
  auto pipeline = Pipeline::Create(options.pipeline, popts);
  if (!pipeline.ok()) return pipeline.status();
  loader->pipeline_ = *std::move(pipeline);
  const ValueType& out = loader->pipeline_->output_type();
  if (!out.fixed()) {
    return invalid("pipeline ", loader->pipeline_->name(), ": its output (", out.DebugString(),
                   ") has no fixed shape, so samples cannot be batched; end it with a crop or a "
                   "fixed-size resize");
  }
  auto dataset = OpenDataset(options.dataset);
  if (!dataset.ok()) return dataset.status();
  loader->dataset_ = *std::move(dataset);

  const int threads = options.threads > 0 ? options.threads : AvailableCpus();
  loader->read_profiler_ = std::make_unique<StageProfiler>(std::vector<std::string>{"read"});
  loader->stage_profiler_ = std::make_unique<StageProfiler>(loader->pipeline_->stage_names());
  for (int i = 0; i < threads; ++i) loader->workspaces_.push_back(std::make_unique<Workspace>());
  loader->pool_of_batches_ = std::make_shared<Pool>();
  {
    // The batches that can be in flight plus the one the trainer holds, made
    // and touched now: memory is committed up front and the first batches do
    // not pay for page faults.
    absl::MutexLock lock(&loader->pool_of_batches_->mu);
    for (int i = 0; i <= options.prefetch_batches; ++i) {
      auto batch = std::make_unique<Batch>(out, options.batch_size);
      std::memset(batch->slot(0), 0, out.bytes() * options.batch_size);
      loader->pool_of_batches_->free.push_back(std::move(batch));
    }
  }
  const int64_t n = loader->dataset_->size();
  loader->samples_per_epoch_ =
      n / options.world_size + (options.rank < n % options.world_size ? 1 : 0);
  // Room for every task of every in-flight batch: Submit() never blocks.
  loader->pool_ = std::make_unique<ThreadPool>(
      threads, static_cast<size_t>(options.batch_size) * options.prefetch_batches);
  spdlog::debug("loader: {} samples ({}), pipeline {}, {} threads", n, loader->dataset_->format(),
                loader->pipeline_->DebugString(), threads);
  return loader;
}

Loader::~Loader() {
  // Workers may still be writing into in-flight batches: stop them first.
  if (pool_) pool_->Stop();
  absl::MutexLock lock(&mu_);
  for (Batch* b : in_flight_) delete b;
  in_flight_.clear();
}

int64_t Loader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples_per_epoch_ / b : (samples_per_epoch_ + b - 1) / b;
}

void Loader::TopUp() {
  while (static_cast<int>(in_flight_.size()) < options_.prefetch_batches &&
         next_epoch_ < options_.epochs) {
    if (!order_ready_) {
      order_ = EpochOrder(dataset_->size(), options_.seed, static_cast<uint64_t>(next_epoch_),
                          options_.shuffle, options_.rank, options_.world_size);
      order_ready_ = true;
      next_offset_ = 0;
      next_number_ = 0;
    }
    const int64_t left = static_cast<int64_t>(order_.size()) - next_offset_;
    const int64_t take = std::min<int64_t>(left, options_.batch_size);
    if (take == 0 || (options_.drop_last && take < options_.batch_size)) {
      ++next_epoch_;
      order_ready_ = false;
      continue;
    }
    std::unique_ptr<Batch> batch;
    {
      absl::MutexLock lock(&pool_of_batches_->mu);
      if (!pool_of_batches_->free.empty()) {
        batch = std::move(pool_of_batches_->free.back());
        pool_of_batches_->free.pop_back();
      }
    }
    // Only when the trainer keeps more batches than it hands back.
    if (!batch) batch = std::make_unique<Batch>(pipeline_->output_type(), options_.batch_size);
    batch->Reset(static_cast<uint64_t>(next_epoch_), next_number_,
                 absl::MakeConstSpan(order_.data() + next_offset_, static_cast<size_t>(take)));
    next_offset_ += take;
    ++next_number_;
    Batch* b = batch.release();
    in_flight_.push_back(b);
    for (int64_t slot = 0; slot < take; ++slot) {
      pool_->Submit([this, b, slot](int worker) { RunSample(worker, b, slot); });
    }
  }
}

void Loader::RunSample(int worker, Batch* batch, int64_t slot) {
  Workspace& ws = *workspaces_[worker];
  const int64_t index = batch->index_at(slot);
  Sample s;
  s.epoch = batch->epoch();
  s.index = index;
  s.label = dataset_->label(index);
  const int64_t t0 = ThreadCpuNanos();
  size_t size = 0;
  absl::Status status;
  try {
    status = dataset_->Read(index, &ws.encoded, &size);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory reading the sample");
  }
  read_profiler_->Record(0, ThreadCpuNanos() - t0, static_cast<int64_t>(size));
  if (status.ok()) {
    s.kind = ValueKind::kEncoded;
    s.data = ws.encoded.data();
    s.size = size;
    s.shape = {static_cast<int64_t>(size)};
    status = pipeline_->Run(0, pipeline_->num_stages(), s, ws, stage_profiler_.get(),
                            batch->slot(slot), batch->sample_bytes());
  }
  bool done;
  if (status.ok()) {
    done = batch->FinishOk(slot, s.label, SampleHash(index, s.label, s.data, s.size));
  } else {
    done = batch->FinishError(slot, SampleError{index, dataset_->SamplePath(index), status});
  }
  if (done) {
    absl::MutexLock lock(&mu_);
    batch_done_.SignalAll();
  }
}

absl::StatusOr<BatchPtr> Loader::Next() {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  const int64_t now = WallNanos();
  if (start_nanos_ == 0) {
    start_nanos_ = now;
    start_cpu_nanos_ = ProcessCpuNanos();
  }
  TopUp();
  if (in_flight_.empty()) {
    if (end_nanos_ == 0) {
      end_nanos_ = now;
      end_cpu_nanos_ = ProcessCpuNanos();
    }
    return BatchPtr();
  }
  Batch* batch = in_flight_.front();
  while (!batch->complete()) batch_done_.Wait(&mu_);
  wait_nanos_ += WallNanos() - now;
  in_flight_.pop_front();

  std::vector<SampleError> errors = batch->Compact();
  for (SampleError& e : errors) {
    ++errors_;
    if (options_.on_error == OnError::kFail) {
      failure_ = absl::Status(e.status.code(), absl::StrCat(e.path, ": ", e.status.message()));
      spdlog::error("sample {} failed, stopping (--on-error fail): {}", e.index,
                    std::string(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      delete batch;
      end_nanos_ = WallNanos();
      end_cpu_nanos_ = ProcessCpuNanos();
      return failure_;
    }
    spdlog::warn("skipping sample {} ({}): {}", e.index, e.path, e.status.ToString());
    if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
  }
  for (uint64_t h : batch->hashes()) checksum_.Add(h);
  images_ += batch->size();
  bytes_ += batch->bytes();
  ++batches_;
  TopUp();  // keep the workers busy while the trainer consumes this batch

  std::shared_ptr<Pool> pool = pool_of_batches_;
  return BatchPtr(batch, [pool](const Batch* b) {
    absl::MutexLock lock(&pool->mu);
    pool->free.emplace_back(const_cast<Batch*>(b));
  });
}

LoaderStats Loader::Stats() const {
  LoaderStats st;
  {
    absl::MutexLock lock(&mu_);
    st.images = images_;
    st.errors = errors_;
    st.batches = batches_;
    st.bytes = bytes_;
    const int64_t end = end_nanos_ != 0 ? end_nanos_ : WallNanos();
    st.seconds = start_nanos_ != 0 ? (end - start_nanos_) * 1e-9 : 0;
    const int64_t end_cpu = end_cpu_nanos_ != 0 ? end_cpu_nanos_ : ProcessCpuNanos();
    st.cpu_seconds = start_nanos_ != 0 ? (end_cpu - start_cpu_nanos_) * 1e-9 : 0;
    st.wait_seconds = wait_nanos_ * 1e-9;
    st.first_errors = first_errors_;
  }
  st.checksum = checksum_.value();
  st.stages = read_profiler_->Snapshot();
  for (StageStats& s : stage_profiler_->Snapshot()) st.stages.push_back(std::move(s));
  return st;
}

}  // namespace prepflow
