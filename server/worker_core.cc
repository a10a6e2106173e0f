#include "server/worker_core.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "google/protobuf/util/message_differencer.h"
#include "pipeline/core/profiler.h"
#include "pipeline/core/wire.h"
#include "pipeline/core/working_memory.h"
#include "pipeline/reuse/materialize.h"
#include "server/runnable_prefix.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// What a job may read: below the data root, and URLs below the allowed
// prefixes only.
DatasetOptions JobDatasets(const WorkerOptions& options, std::shared_ptr<ByteBudget> held_ahead) {
  DatasetOptions d;
  d.confine_to = options.data_root;
  d.store = options.store;
  d.confine_urls = true;
  d.url_prefixes = options.allow_url_prefixes;
  d.read_ahead = options.read_ahead;
  d.read_ahead.shared = std::move(held_ahead);
  d.index_cache_dir = options.index_cache_dir;
  return d;
}

// `options` with its memory budget resolved (0: half of what this process
// may use).
WorkerOptions WithDefaults(WorkerOptions options) {
  if (options.max_memory_bytes <= 0) options.max_memory_bytes = AvailableMemoryBytes() / 2;
  return options;
}

// The paths of the fields two messages differ in ("dataset.path", "seed"),
// never their values: a refusal must not tell one job another's options.
class DifferingFields : public google::protobuf::util::MessageDifferencer::Reporter {
 public:
  using Path = std::vector<google::protobuf::util::MessageDifferencer::SpecificField>;
  void ReportAdded(const google::protobuf::Message&, const google::protobuf::Message&,
                   const Path& path) override {
    Add(path);
  }
  void ReportDeleted(const google::protobuf::Message&, const google::protobuf::Message&,
                     const Path& path) override {
    Add(path);
  }
  void ReportModified(const google::protobuf::Message&, const google::protobuf::Message&,
                      const Path& path) override {
    Add(path);
  }
  // The innermost fields: "dataset.path", not "dataset" as well.
  std::string Names() const {
    std::vector<std::string> leaves;
    for (auto it = names_.begin(); it != names_.end(); ++it) {
      const auto next = std::next(it);
      if (next == names_.end() || !absl::StartsWith(*next, *it + ".")) leaves.push_back(*it);
    }
    return absl::StrJoin(leaves, ", ");
  }

 private:
  void Add(const Path& path) {
    std::string name;
    for (const auto& f : path) {
      if (f.field == nullptr) break;  // an unknown field: its parent names it
      absl::StrAppend(&name, name.empty() ? "" : ".", f.field->name());
    }
    names_.insert(name.empty() ? "an unknown field" : name);
  }
  std::set<std::string> names_;
};

}  // namespace

WorkerCore::WorkerCore(const WorkerOptions& options, WorkerMetrics* metrics)
    : options_(WithDefaults(options)),
      metrics_(metrics),
      held_ahead_(std::make_shared<ByteBudget>(options_.max_memory_bytes / 4)),
      datasets_(DatasetCacheOptions{JobDatasets(options_, held_ahead_), nullptr,
                                    options_.min_reindex_seconds,
                                    /*max_entries=*/64, options_.max_file_bytes_limit}) {
  const int threads = options_.threads > 0 ? options_.threads : AvailableCpus();
  if (options_.max_items_per_stream <= 0) options_.max_items_per_stream = 2 * threads;
  if (options_.worker_id.empty()) {
    char host[256] = "worker";
    gethostname(host, sizeof(host) - 1);
    options_.worker_id = absl::StrCat(host, ":", getpid());
  }
  working_ = std::make_unique<WorkingMemory>(
      options_.max_memory_bytes / 4, threads,
      absl::StrCat("a quarter of --max-memory-bytes ", options_.max_memory_bytes, " over ", threads,
                   " threads"));
  for (int i = 0; i < threads; ++i) {
    workspaces_.push_back(std::make_unique<Workspace>(working_.get()));
  }
  if (metrics_ != nullptr) metrics_->SetMemoryBudget(ResultBytes());
  // Every stream respects its credits, so the queue never fills.
  pool_ = std::make_unique<ThreadPool>(
      threads, static_cast<size_t>(options_.max_streams) * options_.max_items_per_stream);
}

WorkerCore::~WorkerCore() { pool_->Stop(); }

void WorkerCore::BeginDrain(bool reclaimed) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  drain_reclaimed_ = reclaimed;
}

bool WorkerCore::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool WorkerCore::drain_reclaimed() const {
  absl::MutexLock lock(&mu_);
  return drain_reclaimed_;
}

void WorkerCore::RefuseStream(const absl::Status& status, const std::string& peer) {
  if (metrics_ != nullptr) metrics_->StreamRefused(status.code());
  // A refusal may quote what the job sent (a path, a pipeline's or an op's
  // name): escaped, so no job writes raw bytes or lines into this log.
  spdlog::warn("refused a job stream from {}: {}", SafeText(peer), SafeText(status.ToString()));
}

namespace {

// InvalidArgument unless 0 <= value <= limit (NaN is not within): a job may
// ask a worker for less than its flag allows, not more.
template <typename T>
absl::Status WithinLimit(const char* field, T value, T limit, const char* flag) {
  if (value >= 0 && value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "job open: ", field, " ", value, " is outside [0, ", limit, "] (this worker's ", flag, ")"));
}

}  // namespace

absl::Status WorkerCore::CheckJobLimits(const proto::JobOpen& open) const {
  const WorkerOptions& o = options_;
  for (absl::Status s : {
           WithinLimit("max_pixels", open.max_pixels(), o.max_pixels_limit, "--max-pixels"),
           WithinLimit("max_jpeg_scans", open.max_jpeg_scans(), o.max_jpeg_scans_limit,
                       "--max-jpeg-scans"),
           WithinLimit("max_audio_seconds", open.max_audio_seconds(), o.max_audio_seconds_limit,
                       "--max-audio-seconds"),
           WithinLimit("max_audio_channels", open.max_audio_channels(), o.max_audio_channels_limit,
                       "--max-audio-channels"),
           WithinLimit("max_video_seconds", open.max_video_seconds(), o.max_video_seconds_limit,
                       "--max-video-seconds"),
           WithinLimit("max_video_frames", open.max_video_frames(), o.max_video_frames_limit,
                       "--max-video-frames"),
           WithinLimit("dataset.max_file_bytes", open.dataset().max_file_bytes(),
                       o.max_file_bytes_limit, "--max-file-bytes"),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<WorkerJob>> WorkerCore::OpenJob(const proto::JobOpen& open,
                                                               const std::string& client,
                                                               proto::JobOpened* opened,
                                                               const std::string& identity) {
  auto refuse = [this, &client](absl::Status s) {
    RefuseStream(s, client);
    return s;
  };
  if (absl::Status s = CheckJobLimits(open); !s.ok()) return refuse(s);
  if (open.world_size() < 0 || open.rank() < 0 || open.rank() >= std::max(1, open.world_size())) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "job open: rank ", open.rank(), " is outside [0, world_size ", open.world_size(), ")")));
  }
  std::shared_ptr<WorkerJob> job;
  {
    absl::MutexLock lock(&mu_);
    auto found = FindJob(open, identity);
    if (!found.ok()) return refuse(found.status());
    job = *std::move(found);
  }
  if (job == nullptr) {  // the job's first stream here: built outside mu_
    auto built = BuildJob(open);
    if (!built.ok()) return refuse(built.status());
    job = *std::move(built);
    job->identity_ = identity;
  }
  // Another rank may have opened the job meanwhile: then this stream joins
  // that one.
  if (absl::Status s = AdmitStream(client, &job); !s.ok()) {
    return absl::IsUnavailable(s) ? s : refuse(s);  // draining is not a refusal
  }
  const int asked = open.max_items_in_flight();
  opened->set_worker_id(options_.worker_id);
  opened->set_threads(pool_->size());
  opened->set_cores(std::min<double>(pool_->size(), EffectiveCpus()));
  opened->set_max_items_in_flight(asked > 0 ? std::min(asked, options_.max_items_per_stream)
                                            : options_.max_items_per_stream);
  const int n = job->pipeline_->num_stages();
  opened->set_num_stages(n);
  opened->set_unavailable(job->unavailable_);
  if (options_.cache != nullptr) opened->set_cache_bytes(options_.cache->capacity());
  // Enough for every thread to hold an item at once, within one reply.
  opened->set_max_item_bytes(
      std::min(ItemCap(), std::max(job->max_sample_bytes_[n], ResultBytes() / threads())));
  return job;
}

absl::StatusOr<std::shared_ptr<WorkerJob>> WorkerCore::FindJob(const proto::JobOpen& open,
                                                               const std::string& identity) {
  auto it = jobs_.find(open.job_id());
  if (it == jobs_.end()) return nullptr;
  if (it->second->identity_ != identity) {
    return absl::PermissionDeniedError(
        absl::StrCat("job open: job ", SafeText(open.job_id()),
                     " is open here for another client certificate; choose another --job"));
  }
  // A rank's own fields, and what each stream asks for itself, may differ.
  google::protobuf::util::MessageDifferencer same;
  const google::protobuf::Descriptor* d = proto::JobOpen::descriptor();
  for (const char* own : {"rank", "world_size", "max_items_in_flight"}) {
    same.IgnoreField(d->FindFieldByName(own));
  }
  DifferingFields differing;
  same.ReportDifferencesTo(&differing);
  if (same.Compare(it->second->spec_, open)) return it->second;
  return absl::FailedPreconditionError(absl::StrCat(
      "job open: job ", SafeText(open.job_id()), " is open here with other options (",
      differing.Names(),
      " differ); the ranks of one job must agree, and different jobs need different names "
      "(--job)"));
}

absl::StatusOr<std::shared_ptr<WorkerJob>> WorkerCore::BuildJob(const proto::JobOpen& open) {
  auto job = std::make_shared<WorkerJob>();
  job->spec_ = open;
  PipelineOptions popts;
  popts.seed = open.seed();
  popts.decode.max_pixels = open.max_pixels() > 0 ? open.max_pixels() : options_.max_pixels_limit;
  popts.decode.max_jpeg_scans =
      open.max_jpeg_scans() > 0 ? open.max_jpeg_scans() : options_.max_jpeg_scans_limit;
  popts.decode.max_audio_seconds =
      open.max_audio_seconds() > 0 ? open.max_audio_seconds() : options_.max_audio_seconds_limit;
  popts.decode.max_audio_channels =
      open.max_audio_channels() > 0 ? open.max_audio_channels() : options_.max_audio_channels_limit;
  popts.decode.max_video_seconds =
      open.max_video_seconds() > 0 ? open.max_video_seconds() : options_.max_video_seconds_limit;
  popts.decode.max_video_frames =
      open.max_video_frames() > 0 ? open.max_video_frames() : options_.max_video_frames_limit;
  popts.open_data = OpDataOpenerFor(JobDatasets(options_, held_ahead_));
  popts.read_file = OpFileReaderFor(JobDatasets(options_, held_ahead_));
  popts.max_data_bytes = options_.max_memory_bytes / 4;  // a noise set, whatever the job asks
  auto pipeline = Pipeline::Create(
      RunnablePrefix(open, popts.open_data, popts.read_file, &job->unavailable_), popts);
  if (!pipeline.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job open: pipeline: ", pipeline.status().message()));
  }
  job->pipeline_ = *std::move(pipeline);
  // What one sample may take at each cut, from the types alone: the budget's
  // unit. A job whose finished sample cannot fit in one item is refused now.
  const int n = job->pipeline_->num_stages();
  const int64_t file_limit = open.dataset().max_file_bytes() > 0 ? open.dataset().max_file_bytes()
                                                                 : options_.max_file_bytes_limit;
  for (int k = 0; k <= n; ++k) {
    job->max_sample_bytes_.push_back(job->pipeline_->MaxBytesAt(k, file_limit));
  }
  const int64_t item_cap = ItemCap();
  if (job->max_sample_bytes_[n] > item_cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "job open: one sample of pipeline %s is %d bytes (%s), over the %d this worker holds for "
        "one item (half of --max-memory-bytes %d; at most %d per reply)",
        job->pipeline_->name(), job->max_sample_bytes_[n],
        job->pipeline_->output_type().DebugString(), item_cap, options_.max_memory_bytes,
        kMaxReplyBytes));
  }
  // Indexing may take seconds: it runs outside mu_, and opens of the same
  // dataset share one (dataset_cache.h).
  auto ds = datasets_.Get(open.dataset(), open.dataset_fingerprint(), open.dataset_size());
  if (!ds.ok()) {
    const absl::Status& s = ds.status();
    return absl::Status(s.code(), absl::StrCat("job open: dataset: ", s.message()));
  }
  job->dataset_ = *std::move(ds);
  if (absl::Status s = OpenReuse(job.get()); !s.ok()) return s;
  if (metrics_ != nullptr) {
    job->stage_histograms_ = metrics_->StageHistograms(job->pipeline_->stage_names());
  }
  return job;
}

absl::Status WorkerCore::OpenReuse(WorkerJob* job) const {
  const proto::JobOpen& open = job->spec_;
  if (open.echo_at() < 0 || open.echo_at() > open.pipeline().stages_size()) {
    return absl::InvalidArgumentError(absl::StrCat("job open: echo_at ", open.echo_at(),
                                                   " is not a stage boundary of the pipeline"));
  }
  if (open.echo() < 0 || open.echo() >= static_cast<int>(kMaxCopies)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job open: echo ", open.echo(), " is outside [0, ", kMaxCopies, ")"));
  }
  if (open.echo() > 1) {
    job->echo_ = std::make_unique<EchoStore>(options_.echo_bytes, held_ahead_);
  }
  if (open.dataset().has_materialized()) {
    const proto::Materialized& m = open.dataset().materialized();
    if (m.upto() < 0 || m.upto() > open.pipeline().stages_size()) {
      return absl::InvalidArgumentError(absl::StrCat("job open: dataset: materialized upto ",
                                                     m.upto(), " is not a stage boundary"));
    }
    absl::Status s = CheckEncoding(m.encoding());
    if (s.ok() && m.upto() <= job->pipeline_->num_stages()) {
      s = CheckMaterializedPrefix(m, *job->pipeline_);
    }
    if (s.ok()) s = CheckMaterializedSamples(m, *job->dataset_);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("job open: dataset: ", s.message()));
    }
  }
  return OpenCache(job);
}

absl::Status WorkerCore::OpenCache(WorkerJob* job) const {
  const Pipeline& p = *job->pipeline_;
  const proto::JobOpen& open = job->spec_;
  const int k = open.has_cache_at() ? open.cache_at() : p.CacheBoundary();
  if (k < 0 || (open.has_cache_at() && k > job->spec_.pipeline().stages_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("job open: cache_at ", k, " is not a stage boundary of the pipeline"));
  }
  // Past the stages this worker can run: no item reaches it here.
  if (k > p.num_stages() || options_.cache == nullptr) return absl::OkStatus();
  if (const std::string why = p.WhyNotDeterministic(k); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job open: cache_at ", k, ": the values there differ from epoch to epoch: ", why));
  }
  job->cache_ = std::make_unique<BoundaryCache>(
      options_.cache, CacheSpace(job->dataset_->identity(), p.PrefixFingerprint(k)), k,
      job->dataset_.get());
  return absl::OkStatus();
}

absl::Status WorkerCore::AdmitStream(const std::string& client, std::shared_ptr<WorkerJob>* job) {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("worker is shutting down");
  if (streams_ >= options_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker has ", streams_, " open streams, the limit (--max-streams)"));
  }
  if (streams_by_client_[client] >= options_.max_streams_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat("worker has ", streams_by_client_[client],
                                                     " open streams from ", client,
                                                     ", the limit (--max-streams-per-client)"));
  }
  auto found = FindJob((*job)->spec_, (*job)->identity_);
  if (!found.ok()) return found.status();
  if (*found != nullptr) *job = *std::move(found);  // the one built here is dropped
  WorkerJob& j = **job;
  const std::string& id = j.spec_.job_id();
  if (j.streams_ == 0) {
    jobs_[id] = *job;
    if (metrics_ != nullptr) metrics_->JobOpened();
    spdlog::info("opened job {} on {}: {} samples, {}", SafeText(id),
                 SafeText(j.spec_.dataset().path()), j.dataset_->size(),
                 j.pipeline_->DebugString());
  } else {
    spdlog::info("job {}: another rank's stream joins it ({} open)", SafeText(id), j.streams_ + 1);
  }
  ++j.streams_;
  ++streams_;
  ++streams_by_client_[client];
  if (metrics_ != nullptr) metrics_->StreamOpened();
  return absl::OkStatus();
}

void WorkerCore::CloseJob(const std::shared_ptr<WorkerJob>& job, const std::string& client) {
  if (job == nullptr) return;
  absl::MutexLock lock(&mu_);
  --streams_;
  if (--streams_by_client_[client] <= 0) streams_by_client_.erase(client);
  if (metrics_ != nullptr) metrics_->StreamClosed();
  if (--job->streams_ > 0) return;
  auto it = jobs_.find(job->spec_.job_id());
  if (it != jobs_.end() && it->second == job) jobs_.erase(it);
  if (metrics_ != nullptr) metrics_->JobClosed();
}

absl::Status WorkerCore::Submit(std::shared_ptr<WorkerJob> job, proto::WorkItem item,
                                std::function<void(ItemOutput)> done) {
  const int64_t n = job->dataset().size();
  if (item.cut() > job->pipeline().num_stages() && !job->unavailable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("work item ", item.item_id(), ": cut ", item.cut(),
                     " needs a stage this worker cannot run: ", job->unavailable_));
  }
  if (item.cut() < 0 || item.cut() > job->pipeline().num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("work item ", item.item_id(), ": cut ",
                                                   item.cut(), " is outside [0, ",
                                                   job->pipeline().num_stages(), "]"));
  }
  if (item.indices_size() == 0 || item.indices_size() > options_.max_item_samples) {
    return absl::InvalidArgumentError(absl::StrCat("work item ", item.item_id(), ": has ",
                                                   item.indices_size(), " samples; 1 to ",
                                                   options_.max_item_samples, " allowed"));
  }
  if (const int start = job->start_stage(); item.cut() < start) {
    return absl::InvalidArgumentError(
        absl::StrCat("work item ", item.item_id(), ": cut ", item.cut(),
                     " is before the boundary the data was materialized at (", start, ")"));
  }
  if (item.copies_size() != 0 && item.copies_size() != item.indices_size()) {
    return absl::InvalidArgumentError(absl::StrCat("work item ", item.item_id(), ": has ",
                                                   item.copies_size(), " copies for ",
                                                   item.indices_size(), " samples"));
  }
  if (item.echo() > static_cast<uint32_t>(std::max(1, job->spec().echo()))) {
    return absl::InvalidArgumentError(absl::StrCat("work item ", item.item_id(), ": echo ",
                                                   item.echo(), " is over the job's ",
                                                   std::max(1, job->spec().echo())));
  }
  for (uint32_t copy : item.copies()) {
    if (copy >= kMaxCopies) {
      return absl::InvalidArgumentError(absl::StrCat("work item ", item.item_id(), ": copy ", copy,
                                                     " is not below ", kMaxCopies));
    }
  }
  for (int64_t index : item.indices()) {
    if (index < 0 || index >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "work item ", item.item_id(), ": index ", index, " is outside the dataset [0, ", n, ")"));
    }
  }
  const int64_t sample_bytes = job->max_sample_bytes(item.cut());
  const int64_t bytes = item.indices_size() * sample_bytes;
  const int64_t item_cap = ItemCap();
  if (bytes > item_cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "work item %d: %d samples at cut %d are up to %d bytes (%d each), over the %d one item "
        "may hold (half of --max-memory-bytes %d; at most %d per reply)",
        item.item_id(), item.indices_size(), item.cut(), bytes, sample_bytes, item_cap,
        options_.max_memory_bytes, kMaxReplyBytes));
  }
  // Remote data: the item's reads start now, ahead of the thread that runs
  // it (those the cache holds are not read).
  const auto indices = absl::MakeConstSpan(item.indices().data(), item.indices_size());
  if (job->Cached(item.cut())) {
    job->dataset().Prefetch(job->cache()->NotHeld(indices));
  } else {
    job->dataset().Prefetch(indices);
  }
  if (!AdmitToJob(Admission{std::move(job), std::move(item), std::move(done), bytes})) {
    return absl::UnavailableError("worker is shutting down");
  }
  return absl::OkStatus();
}

bool WorkerCore::AdmitToJob(Admission a) {
  std::shared_ptr<WorkerJob> job = a.job;
  {
    absl::MutexLock lock(&job->admit_mu_);
    if (job->admitted_ >= options_.max_items_per_stream) {
      job->held_.push_back(std::move(a));
      return true;
    }
    ++job->admitted_;
  }
  if (AdmitToMemory(std::move(a))) return true;
  FinishedInJob(job);
  return false;
}

void WorkerCore::FinishedInJob(const std::shared_ptr<WorkerJob>& job) {
  std::optional<Admission> next;
  {
    absl::MutexLock lock(&job->admit_mu_);
    --job->admitted_;
    if (job->held_.empty()) return;
    next = std::move(job->held_.front());
    job->held_.pop_front();
    ++job->admitted_;
  }
  if (!AdmitToMemory(*std::move(next))) FinishedInJob(job);
}

bool WorkerCore::AdmitToMemory(Admission a) {
  {
    absl::MutexLock lock(&budget_mu_);
    if (!waiting_.empty() || reserved_bytes_ + a.bytes > ResultBytes()) {
      // Runs when earlier items' replies are written and their memory freed.
      waiting_.push_back(std::move(a));
      if (metrics_ != nullptr) metrics_->SetMemory(reserved_bytes_, waiting_.size());
      return true;
    }
    reserved_bytes_ += a.bytes;
    if (metrics_ != nullptr) metrics_->SetMemory(reserved_bytes_, waiting_.size());
  }
  return Launch(std::move(a));
}

bool WorkerCore::Launch(Admission a) {
  const int64_t bytes = a.bytes;
  const int64_t launched = WallNanos();
  const bool queued = pool_->Submit([this, bytes, launched, a = std::move(a)](int thread) {
    ItemOutput out;
    // Released when the caller drops the output, after writing its reply.
    out.reservation = std::shared_ptr<void>(nullptr, [this, bytes](void*) { Release(bytes); });
    RunItem(thread, *a.job, a.item, &out);
    FinishedInJob(a.job);
    int64_t sent = 0;
    for (const Payload& p : out.payloads) sent += static_cast<int64_t>(p.size);
    out.result.set_transport_cpu_per_byte(CountSent(sent));
    out.result.set_worker_busy(BusyShare());
    out.result.set_run_seconds((WallNanos() - launched) * 1e-9);
    a.done(std::move(out));
  });
  if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<double>(pool_->queue_depth()));
  if (!queued) Release(bytes);
  return queued;
}

double WorkerCore::CountSent(int64_t bytes) {
  constexpr int64_t kWindowBytes = 16 << 20, kWindowNanos = 250'000'000;
  absl::MutexLock lock(&transport_mu_);
  sent_bytes_ += bytes;
  const int64_t now = WallNanos();
  if (window_.start_nanos != 0 && (sent_bytes_ - window_.sent_bytes < kWindowBytes ||
                                   now - window_.start_nanos < kWindowNanos)) {
    return transport_cpu_per_byte_;
  }
  const TransportWindow next{now, ProcessCpuNanos(),
                             reported_cpu_nanos_.load(std::memory_order_relaxed), sent_bytes_};
  if (window_.start_nanos != 0) {  // the first call only opens a window
    const int64_t outside =
        (next.process_cpu - window_.process_cpu) - (next.reported_cpu - window_.reported_cpu);
    const double ratio = std::max<int64_t>(outside, 0) * 1e-9 /
                         static_cast<double>(next.sent_bytes - window_.sent_bytes);
    transport_cpu_per_byte_ =
        transport_cpu_per_byte_ > 0 ? 0.5 * (transport_cpu_per_byte_ + ratio) : ratio;
  }
  window_ = next;
  return transport_cpu_per_byte_;
}

double WorkerCore::BusyShare() {
  constexpr int64_t kWindowNanos = 500'000'000;
  absl::MutexLock lock(&transport_mu_);
  const int64_t now = WallNanos();
  if (busy_start_nanos_ != 0 && now - busy_start_nanos_ < kWindowNanos) return busy_;
  const int64_t cpu = ProcessCpuNanos();
  if (busy_start_nanos_ != 0) {
    const double cores = std::max(1e-3, std::min<double>(pool_->size(), EffectiveCpus()));
    busy_ = std::clamp(static_cast<double>(cpu - busy_start_cpu_) /
                           (static_cast<double>(now - busy_start_nanos_) * cores),
                       0.0, 1.0);
  }
  busy_start_nanos_ = now;
  busy_start_cpu_ = cpu;
  return busy_;
}

void WorkerCore::Release(int64_t bytes) {
  std::vector<Admission> ready;
  bool trim = false;
  {
    absl::MutexLock lock(&budget_mu_);
    reserved_bytes_ -= bytes;
    // In order: a large item at the head is not starved by smaller ones.
    while (!waiting_.empty() && reserved_bytes_ + waiting_.front().bytes <= ResultBytes()) {
      reserved_bytes_ += waiting_.front().bytes;
      ready.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    if (metrics_ != nullptr) metrics_->SetMemory(reserved_bytes_, waiting_.size());
    const int64_t now = WallNanos();
    if (reserved_bytes_ == 0 && now - last_trim_nanos_ > 1'000'000'000) {
      last_trim_nanos_ = now;
      trim = true;
    }
  }
  // Idle: hand freed result buffers back to the kernel, so a burst of large
  // items does not leave the worker holding gigabytes (at most once a second).
  if (trim) malloc_trim(0);
  for (Admission& a : ready) {
    std::shared_ptr<WorkerJob> job = a.job;
    if (!Launch(std::move(a))) FinishedInJob(job);
  }
}

int WorkerCore::active_streams() const {
  absl::MutexLock lock(&mu_);
  return streams_;
}

int WorkerCore::active_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

absl::Status WorkerCore::Load(const WorkerJob& job, Sample& s, Workspace& ws,
                              proto::SampleResult* out, int* from, ItemRun* run) {
  *from = 0;
  BoundaryCache* cache = job.Cached(run->cut) ? job.cache() : nullptr;
  if (cache != nullptr && cache->Restore(s, ws)) {
    *from = cache->boundary();
    out->set_cache_hit(true);
    out->set_first_stage(*from);
    return absl::OkStatus();
  }
  const int64_t t0 = ThreadCpuNanos(), wall0 = WallNanos();
  size_t size = 0;
  // Materialized data holds the whole record in its one member.
  absl::Status status = job.spec().dataset().has_materialized()
                            ? ReadRecord(job.dataset(), MediaOnly(), ws, s, &size)
                            : ReadRecord(job.dataset(), job.pipeline().fields(), ws, s, &size);
  const int64_t read_nanos = ThreadCpuNanos() - t0;
  run->reported_cpu_nanos += read_nanos;
  run->read_wait_nanos += WallNanos() - wall0;
  run->read_bytes += static_cast<int64_t>(size);
  out->set_read_cpu_seconds(read_nanos * 1e-9);
  if (!status.ok()) return status;
  // The index is shared, read under this worker's file limit; a job may
  // have asked for less.
  if (const int64_t limit = job.spec().dataset().max_file_bytes();
      limit > 0 && size > static_cast<uint64_t>(limit)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a sample of ", size, " bytes, over the job's --max-file-bytes ", limit));
  }
  if (const proto::DatasetSpec& spec = job.spec().dataset(); spec.has_materialized()) {
    // Materialized data: the stored value is the one after its stages.
    status = DecodeMaterialized(spec.materialized(), job.pipeline().options().decode, ws, s);
    if (!status.ok()) return status;
    *from = spec.materialized().upto();
    out->set_first_stage(*from);
  }
  if (cache != nullptr && run->keep && cache->boundary() == *from) cache->Keep(s);
  return absl::OkStatus();
}

absl::Status WorkerCore::RunStages(const WorkerJob& job, int begin, int end, Sample& s,
                                   Workspace& ws, proto::SampleResult* out, ItemRun* run) {
  // Stage costs are measured here, one stage at a time, so they travel with
  // the sample for the client's planner.
  BoundaryCache* cache = job.Cached(end) && run->keep ? job.cache() : nullptr;
  for (int stage = begin; stage < end; ++stage) {
    const int64_t c0 = ThreadCpuNanos();
    const absl::Status status = job.pipeline().Run(stage, stage + 1, s, ws);
    const int64_t nanos = ThreadCpuNanos() - c0;
    run->reported_cpu_nanos += nanos;
    const double seconds = nanos * 1e-9;
    proto::StageCost* cost = out->add_stages();
    cost->set_cpu_seconds(seconds);
    cost->set_output_bytes(static_cast<int64_t>(s.record_bytes()));
    if (!job.stage_histograms_.empty()) job.stage_histograms_[stage]->Observe(seconds);
    if (!status.ok()) return status;
    if (cache != nullptr && stage + 1 == cache->boundary()) cache->Keep(s);
  }
  return absl::OkStatus();
}

absl::Status WorkerCore::RunSample(const WorkerJob& job, Sample& s, Workspace& ws,
                                   proto::SampleResult* out, ItemRun* run) {
  int from = 0;
  absl::Status status;
  const int echo_at = job.EchoAt(run->cut);
  if (echo_at >= 0) {
    // Copies of the sample share one load up to the echo boundary.
    bool loaded = false;
    status = job.echo_->Get(s, ws, run->copies, [&] {
      loaded = true;
      absl::Status st = Load(job, s, ws, out, &from, run);
      if (st.ok()) st = RunStages(job, from, echo_at, s, ws, out, run);
      return st;
    });
    if (!loaded) {
      out->set_echoed(true);
      out->set_first_stage(echo_at);
    }
    from = echo_at;
  } else {
    status = Load(job, s, ws, out, &from, run);
  }
  if (status.ok()) status = RunStages(job, from, run->cut, s, ws, out, run);
  return status;
}

void WorkerCore::RunItem(int thread, const WorkerJob& job, const proto::WorkItem& item,
                         ItemOutput* output) {
  proto::ItemResult* result = &output->result;
  Workspace& ws = *workspaces_[thread];
  const Dataset& dataset = job.dataset();
  BoundaryCache* cache = job.Cached(item.cut()) ? job.cache() : nullptr;
  result->set_item_id(item.item_id());
  int64_t bytes = 0;
  ItemRun run;
  run.cut = item.cut();
  run.copies = item.echo() > 0 ? static_cast<int>(item.echo()) : job.spec().echo();
  run.keep = !item.away();
  const StorageStats storage_before = ThreadStorageStats();
  output->payloads.resize(static_cast<size_t>(item.indices_size()));
  int64_t hits = 0, misses = 0;
  for (int i = 0; i < item.indices_size(); ++i) {
    const int64_t index = item.indices(i);
    proto::SampleResult* out = result->add_samples();
    out->set_index(index);
    out->set_label(dataset.label(index));
    Sample s;
    s.epoch = item.epoch();
    dataset.Describe(index, s);
    s.copy = item.copies_size() > 0 ? item.copies(i) : 0;
    s.echo_at = job.spec().echo_at();
    // What the sample took past the thread's share goes back when it ends.
    absl::Cleanup end_sample = [&ws] { ws.EndSample(); };
    absl::Status status;
    try {
      status = RunSample(job, s, ws, out, &run);
    } catch (const std::bad_alloc& e) {  // a read or cached value over the working memory
      status = absl::ResourceExhaustedError(OutOfMemoryMessage(e));
    }
    if (cache != nullptr && !out->echoed()) ++(out->cache_hit() ? hits : misses);
    if (!status.ok()) {
      out->set_code(static_cast<int>(status.code()));
      // The client adds the path. A message may hold a file's name, any
      // bytes, and a proto string must be UTF-8: unescaped, the reply did
      // not parse and the worker was dropped.
      out->set_error(SafeText(status.message()));
      if (metrics_ != nullptr) metrics_->SampleFailed(status.code());
      continue;
    }
    // The one copy of the payload on this side: out of the reused workspace
    // into a buffer the transport sends from and frees.
    ToWire(s, out->mutable_value(), /*include_data=*/false);
    Payload& payload = output->payloads[i];
    payload.data.reset(static_cast<uint8_t*>(std::malloc(s.size > 0 ? s.size : 1)));
    if (payload.data == nullptr) {
      out->clear_value();
      out->set_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
      out->set_error("out of memory for the result");
      continue;
    }
    std::memcpy(payload.data.get(), s.data, s.size);
    payload.size = s.size;
    bytes += static_cast<int64_t>(s.record_bytes());
  }
  reported_cpu_nanos_.fetch_add(run.reported_cpu_nanos, std::memory_order_relaxed);
  result->set_read_wait_seconds(run.read_wait_nanos * 1e-9);
  result->set_read_bytes(run.read_bytes);
  const StorageStats storage = ThreadStorageStats().Minus(storage_before);
  if (storage.requests > 0) {
    proto::StorageCost* cost = result->mutable_storage();
    cost->set_bytes(storage.bytes);
    cost->set_requests(storage.requests);
    cost->set_retries(storage.retries);
    cost->set_errors(storage.errors);
    cost->set_whole_objects(storage.whole_objects);
  }
  if (cache != nullptr) {
    result->mutable_cache()->set_hits(hits);
    result->mutable_cache()->set_misses(misses);
  }
  if (metrics_ != nullptr) {
    metrics_->ItemDone(item.indices_size(), bytes);
    metrics_->SetQueueDepth(static_cast<double>(pool_->queue_depth()));
  }
}

}  // namespace prepflow
