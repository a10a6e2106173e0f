// How a Loader starts (client/loader.h): options resolved, the data, the
// pipeline and the caches opened, the batches made, and the workers (given
// or granted) opened. The run itself is loader.cc; its stats
// loader_report.cc.
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/datasets.h"
#include "client/loader.h"
#include "client/remote/remote_pool.h"
#include "client/remote/remote_worker.h"
#include "client/remote/scheduler_grants.h"
#include "client/sample_lengths.h"
#include "client/sample_runner.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/record.h"
#include "pipeline/core/rng.h"
#include "pipeline/ops/batch_ops.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/reuse/materialize.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// Batches in flight are raised to keep every worker's credits busy, up to
// this many; the thread pool's task queue is sized for it up front.
constexpr int kMaxPrefetchBatches = 32;

}  // namespace

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(const LoaderOptions& options) {
  std::unique_ptr<Loader> loader(new Loader);
  absl::Status s;
  try {
    s = loader->Init(options);
  } catch (const std::bad_alloc&) {  // threads' workspaces, batches: sized by the options
    s = absl::ResourceExhaustedError(
        "out of memory setting up the run (--threads, --batch, --prefetch size what is "
        "allocated up front; this process is at its memory limit)");
  }
  if (!s.ok()) return s;
  return loader;
}

absl::Status Loader::Init(const LoaderOptions& given) {
  auto resolved = ResolveOptions(given);
  if (!resolved.ok()) return resolved.status();
  options_ = *std::move(resolved);
  offload_ = *options_.offload;
  auto security = LoadSecurity(options_.security, options_.surface);
  if (!security.ok()) return security.status();
  security_ = *std::move(security);
  job_id_ = options_.job;
  if (job_id_.empty()) {  // a job of its own
    SampleRng id_rng(static_cast<uint64_t>(WallNanos()), 0, static_cast<uint64_t>(getpid()), 0);
    job_id_ = absl::StrFormat("job-%016x", id_rng.NextU64());
    if (options_.world_size > 1 && (!options_.workers.empty() || !options_.scheduler.empty())) {
      spdlog::warn(
          "rank {} of {} names no job (--job, PREPFLOW_JOB): workers and the scheduler "
          "see each rank as a job of its own",
          options_.rank, options_.world_size);
    }
  }
  if (absl::Status s = OpenData(); !s.ok()) return s;

  // By default the threads of this rank's share of the machine.
  const int threads = options_.threads > 0
                          ? options_.threads
                          : std::max(1, AvailableCpus() / std::max(1, options_.local_ranks));
  const int64_t size = dataset_->size();
  epoch_samples_ = size;
  if (!mix_.sizes.empty()) {
    epoch_samples_ = 0;
    for (int64_t c : MixCounts(mix_)) epoch_samples_ += c;
  }
  samples_per_rank_ =
      RankSamples(epoch_samples_, options_.rank, options_.world_size, options_.rank_split);
  echo_cap_ = options_.echo_auto ? options_.max_echo : options_.echo;
  {
    absl::MutexLock lock(&mu_);
    next_epoch_ = options_.first_epoch;
    prefetch_ = options_.prefetch_batches;
    echo_now_ = ChooseEpochEcho(next_epoch_);
  }
  // Room for every task of every batch that may come to be in flight, twice
  // (a sample's local run, or its remote suffix): Submit() never waits for
  // long.
  runner_ = std::make_unique<SampleRunner>(
      dataset_.get(), pipeline_.get(),
      SampleRunner::Sources{cache_.get(), Materialized(), {echo_at_, options_.echo_bytes}}, threads,
      2 * static_cast<size_t>(options_.batch_size) *
          std::max(options_.prefetch_batches, kMaxPrefetchBatches),
      [this] { SignalBatchDone(); });
  if (runner_->threads() < threads) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--threads ", threads, ": only ", runner_->threads(), " threads could be started (",
        runner_->start_error(), "); this process is at its thread or memory limit"));
  }
  const bool remote_possible = offload_.kind != OffloadMode::kOff &&
                               (!options_.workers.empty() || !options_.scheduler.empty());
  if (offload_.kind == OffloadMode::kAuto && !remote_possible) {
    spdlog::info("--offload auto: no workers given (--workers or --scheduler); running locally");
  } else if (remote_possible) {
    if (absl::Status s = StartRemote(); !s.ok()) return s;
  }
  if (options_.echo_auto && !replanner_) MakeReplanner();
  free_batches_ = std::make_shared<FreeBatches>();
  absl::MutexLock lock(&mu_);
  if (replanner_ && offload_.kind == OffloadMode::kAuto) StartWarmUp();
  UpdatePrefetch();
  MakeBatches();
  spdlog::debug("loader: {} samples ({}), pipeline {}, {} threads, offload {}", size,
                dataset_->format(), pipeline_->DebugString(), threads, OffloadModeString(offload_));
  return absl::OkStatus();
}

void Loader::MakeBatches() {
  // Made and touched now: memory is committed up front and the first
  // batches do not pay for page faults.
  absl::MutexLock free_lock(&free_batches_->mu);
  const ValueType& out = pipeline_->output_type();
  for (int i = 0; i <= prefetch_ + options_.held_batches; ++i) {
    auto batch = std::make_unique<Batch>(pipeline_->OutputFields(), options_.batch_size,
                                         options_.batch_allocator);
    if (!batch->ragged()) std::memset(batch->slot(0), 0, out.bytes() * options_.batch_size);
    free_batches_->free.push_back(std::move(batch));
  }
}

absl::Status Loader::OpenData() {
  if (absl::Status s = OpenPipeline(); !s.ok()) return s;
  if (!options_.dataset.has_materialized() && options_.dataset.mix_size() == 0) {
    if (absl::Status s = FindMaterialized(&options_.dataset, options_.storage); !s.ok()) return s;
  }
  // Materialized data: its prefix must be the pipeline's (before the
  // dataset opens), and every sample made by that prefix (after).
  const proto::Materialized* m = Materialized();
  auto bad_data = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data ", SafeText(options_.dataset.path()), ": ", s.message()));
  };
  if (m != nullptr) {
    if (absl::Status s = CheckMaterializedPrefix(*m, *pipeline_); !s.ok()) return bad_data(s);
    if (pipeline_->record() && m->encoding() != "raw") {
      return bad_data(absl::InvalidArgumentError(absl::StrCat(
          "materialized as ", m->encoding(),
          " pictures, one image per sample; this pipeline's records have several fields")));
    }
  }
  auto dataset = OpenClientDataset(options_.dataset, options_.storage);
  if (!dataset.ok()) return dataset.status();
  dataset_ = *std::move(dataset);
  if (m != nullptr) {
    if (absl::Status s = CheckMaterializedSamples(*m, *dataset_); !s.ok()) return bad_data(s);
  }
  for (const std::string& w : dataset_->index_warnings()) spdlog::warn("{}", SafeText(w));
  if (absl::Status s = PlanMix(); !s.ok()) return s;
  if (pipeline_->record() && m == nullptr && !dataset_->has_members()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline ", pipeline_->name(), " reads fields (",
        absl::StrJoin(pipeline_->fields(), ", ",
                      [](std::string* out, const std::string& f) { out->append(FieldName(f)); }),
        ") but --data ", SafeText(options_.dataset.path()), " is ", dataset_->format(),
        ", whose samples are one file; records of several fields come from WebDataset shards"));
  }
  if (options_.max_batch_seconds > 0) {
    absl::StatusOr<std::string> field = LengthField(m != nullptr);
    if (!field.ok()) return field.status();
    absl::StatusOr<std::vector<double>> seconds = SampleSeconds(*dataset_, *field);
    if (!seconds.ok()) return seconds.status();
    seconds_ = *std::move(seconds);
  }
  auto batch_ops = CreateBatchOps(options_.pipeline, pipeline_->output_type(),
                                  static_cast<int64_t>(dataset_->classes().size()));
  if (!batch_ops.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline ", pipeline_->name(), ": ", batch_ops.status().message()));
  }
  batch_ops_ = *std::move(batch_ops);
  return OpenCache();
}

absl::Status Loader::PlanMix() {
  if (dataset_->mix_sizes().empty()) return absl::OkStatus();
  mix_.sizes = dataset_->mix_sizes();
  for (const proto::MixSource& source : options_.dataset.mix())
    mix_.weights.push_back(source.weight());
  mix_.epoch_samples = options_.mix_epoch_samples;
  mix_.stop_at_first_end = options_.mix_stop_at_first_end;
  if (std::string why = WhyNotMixable(mix_); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--mix: ", why));
  }
  // Not yet: a sample's copies in an epoch are the mixture's repeats.
  if (options_.echo > 1 || options_.echo_auto) {
    return absl::InvalidArgumentError("--echo: a mixture (--mix) is not echoed yet");
  }
  if (options_.max_batch_seconds > 0) {
    return absl::InvalidArgumentError(
        "--max-batch-seconds: a mixture (--mix) is not batched by length yet");
  }
  int64_t offset = 0;
  for (int64_t size : mix_.sizes) {
    mix_offsets_.push_back(offset);
    offset += size;
  }
  {
    absl::MutexLock lock(&mu_);
    mix_delivered_.assign(mix_.sizes.size(), 0);
  }
  const std::vector<int64_t> counts = MixCounts(mix_);
  for (size_t s = 0; s < counts.size(); ++s) {
    spdlog::info("mixture: source {} ({}): {} samples, {} an epoch", s,
                 SafeText(options_.dataset.mix(static_cast<int>(s)).path()), mix_.sizes[s],
                 counts[s]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Loader::LengthField(bool materialized) const {
  const Pipeline& p = *pipeline_;
  if (!p.record()) return std::string();
  if (materialized) {
    return absl::InvalidArgumentError(
        "--max-batch-seconds: materialized records are one member per sample; their lengths "
        "are not known before decoding (pad them: leave --max-batch-seconds unset)");
  }
  for (int i = 0; i < p.num_stages(); ++i) {
    if (p.stage_name(i) == "decode_audio") return p.fields()[p.stage_field(i)];
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--max-batch-seconds: batching by length measures a field's audio, and no field of "
      "pipeline ",
      p.name(), " decodes audio (decode_audio)"));
}

absl::Status Loader::OpenPipeline() {
  PipelineOptions popts;
  popts.seed = options_.seed;
  popts.decode.max_pixels = options_.max_pixels;
  popts.decode.max_jpeg_scans = options_.max_jpeg_scans;
  popts.decode.max_audio_seconds = options_.max_audio_seconds;
  popts.decode.max_audio_channels = options_.max_audio_channels;
  popts.decode.max_video_seconds = options_.max_video_seconds;
  popts.decode.max_video_frames = options_.max_video_frames;
  popts.open_data = ClientOpDataOpener(options_.storage);
  popts.read_file = ClientOpFileReader(options_.storage);
  // Workers open the ops' data (a noise set, a tokenizer's model) at the
  // paths they see.
  for (proto::Stage& stage : *options_.pipeline.mutable_stages()) {
    for (std::string* path : MutableDataPaths(&stage)) *path = SharedPath(*path);
    for (std::string* path : MutableFilePaths(&stage)) *path = SharedPath(*path);
  }
  auto pipeline = Pipeline::Create(options_.pipeline, popts);
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = *std::move(pipeline);
  const int n = pipeline_->num_stages();
  if (std::string why = pipeline_->WhyNotBatchable(); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline ", pipeline_->name(), ": ", why));
  }
  if (offload_.kind == OffloadMode::kCut && offload_.cut > n) {
    return absl::InvalidArgumentError(absl::StrCat("--offload: cut=", offload_.cut,
                                                   " is past the last stage (pipeline ",
                                                   pipeline_->name(), " has ", n, " stages)"));
  }
  // kAuto starts local; its first plan comes once there are measurements.
  absl::MutexLock lock(&mu_);
  placement_ = offload_.kind == OffloadMode::kRemote ? policy::Placement::Cut(n, n, 1)
               : offload_.kind == OffloadMode::kCut
                   ? policy::Placement::Cut(n, offload_.cut, offload_.remote_fraction)
                   : policy::Placement::Cut(n, 0, 0);
  return absl::OkStatus();
}

absl::Status Loader::OpenCache() {
  const Pipeline& p = *pipeline_;
  const int start = Materialized() != nullptr ? Materialized()->upto() : 0;
  cache_at_ = options_.cache_at >= 0 ? options_.cache_at : std::max(start, p.CacheBoundary());
  if (cache_at_ < start || (options_.echo_at >= 0 && options_.echo_at < start)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.echo_at >= 0 && options_.echo_at < start ? "--echo-at " : "--cache-at ",
        "must not be before the boundary the data was materialized at (", start, ")"));
  }
  if (cache_at_ > p.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("--cache-at ", cache_at_,
                                                   ": past the last stage boundary (pipeline ",
                                                   p.name(), " has ", p.num_stages(), ")"));
  }
  if (const std::string why = p.WhyNotDeterministic(cache_at_); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cache-at ", cache_at_, ": the values there differ from epoch to epoch (",
                     why, "); the last boundary that may be cached is ", p.CacheBoundary()));
  }
  echo_at_ = options_.echo_at >= 0 ? options_.echo_at : cache_at_;
  if (echo_at_ > p.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("--echo-at ", echo_at_,
                                                   ": past the last stage boundary (pipeline ",
                                                   p.name(), " has ", p.num_stages(), ")"));
  }
  if (const std::string why = p.WhyNotSplittable(echo_at_); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--echo-at ", echo_at_,
                                                   ": copies cannot share the value there (", why,
                                                   "); echo before or after that stage"));
  }
  if (!options_.cache.enabled()) return absl::OkStatus();
  auto cache = SampleCache::Open(options_.cache);
  if (!cache.ok()) return cache.status();
  cache_ = std::make_unique<BoundaryCache>(
      std::shared_ptr<SampleCache>(*std::move(cache)),
      CacheSpace(dataset_->identity(), p.PrefixFingerprint(cache_at_)), cache_at_, dataset_.get());
  return absl::OkStatus();
}

void Loader::PrefetchLocal(uint64_t epoch, absl::Span<const int64_t> indices) const {
  if (cache_ == nullptr && echo_cap_ <= 1) return dataset_->Prefetch(indices);  // nothing to filter
  std::vector<int64_t> wanted = cache_ != nullptr
                                    ? cache_->NotHeld(indices)
                                    : std::vector<int64_t>(indices.begin(), indices.end());
  // An echoed copy whose sample an earlier copy loads (or loaded) is not
  // read again: its read would go unused, and cost the link.
  if (echo_cap_ > 1) wanted = runner_->NotLoaded(epoch, wanted);
  dataset_->Prefetch(wanted);
}

proto::JobOpen Loader::JobOpenMessage() const {
  proto::JobOpen open;
  open.set_job_id(job_id_);
  open.set_rank(options_.rank);
  open.set_world_size(options_.world_size);
  *open.mutable_dataset() = options_.dataset;
  // Workers see the dataset on shared storage under the same absolute path
  // (a shard pattern names no file: it is made absolute as written), or
  // read it from the URL for themselves.
  open.mutable_dataset()->set_path(SharedPath(options_.dataset.path()));
  for (proto::MixSource& source : *open.mutable_dataset()->mutable_mix()) {
    source.set_path(SharedPath(source.path()));
  }
  *open.mutable_pipeline() = options_.pipeline;  // its data paths made shared by OpenPipeline
  open.set_seed(options_.seed);
  open.set_max_pixels(options_.max_pixels);
  open.set_max_jpeg_scans(options_.max_jpeg_scans);
  open.set_max_audio_seconds(options_.max_audio_seconds);
  open.set_max_audio_channels(options_.max_audio_channels);
  open.set_max_video_seconds(options_.max_video_seconds);
  open.set_max_video_frames(options_.max_video_frames);
  open.set_dataset_size(dataset_->size());
  open.set_dataset_fingerprint(dataset_->fingerprint());
  open.set_max_items_in_flight(options_.max_items_per_worker);
  open.set_cache_at(cache_at_);
  open.set_echo_at(echo_at_);
  open.set_echo(echo_cap_);
  // Only the planner uses the probe (ReplanOptions: the links).
  if (offload_.kind == OffloadMode::kAuto) open.set_probe_bytes(options_.link_probe_bytes);
  return open;
}

void Loader::MakeReplanner() {
  policy::ReplanOptions ro;
  ro.period_seconds = options_.replan_seconds;
  ro.drift = options_.replan_drift;
  ro.gain = options_.replan_gain;
  ro.demand = options_.demand;
  // The machine's link, shared by its ranks like its cores.
  ro.bandwidth = options_.bandwidth / std::max(1, options_.local_ranks);
  ro.link_wait_seconds = options_.replan_link_wait_seconds;
  ro.probe_share = options_.replan_probe_share;
  ro.min_gain = options_.replan_min_gain;
  ro.link_growth = options_.replan_link_growth;
  absl::MutexLock lock(&mu_);
  replanner_ = std::make_unique<policy::Replanner>(ro, placement_);
}

int Loader::ChooseEpochEcho(int epoch) {
  int echo = options_.echo;
  if (options_.echo_auto) {
    auto before = epoch_echo_.find(epoch - 1);
    echo = epoch == options_.first_epoch ? std::max(1, options_.start_echo)
           : before != epoch_echo_.end() ? before->second
                                         : 1;
    std::string why;
    const std::optional<int> planned = replanner_ && epoch != options_.first_epoch
                                           ? replanner_->EchoFactor(options_.max_echo, &why)
                                           : std::nullopt;
    if (planned && *planned != echo) {
      spdlog::info("--echo auto: epoch {} yields {} cop{} of each sample (was {}): {}", epoch,
                   *planned, *planned == 1 ? "y" : "ies", echo, why);
      echo = *planned;
    }
  }
  epoch_echo_[epoch] = echo;
  return echo;
}

absl::Status Loader::StartRemote() {
  if (offload_.kind == OffloadMode::kAuto) MakeReplanner();
  RemotePoolOptions po;
  po.worker_timeout_seconds = options_.worker_timeout_seconds;
  po.connect_timeout_seconds = options_.connect_timeout_seconds;
  po.hedge_after = options_.hedge_after;
  // A named job's ranks share its workers (the same --workers on every
  // rank): each plans with its part of them.
  if (!options_.job.empty()) po.static_share = 1.0 / options_.world_size;
  // An echoed copy or a cached sample loads again on a worker idle for it
  // only where reads cost no remote store's requests and bytes (and, below,
  // until storage binds).
  po.steal_from_busy_homes = !ReadsUrls(JobOpenMessage().dataset());
  RemotePool::Callbacks callbacks;
  callbacks.result = [this](RemoteItem item, std::shared_ptr<const ReceivedMessage> answer,
                            const std::string& address) {
    runner_->TakeRemote(item, answer, address);
  };
  callbacks.run_locally = [this](RemoteItem item) {
    std::vector<int64_t> indices;
    for (int64_t slot : item.slots) indices.push_back(item.batch->index_at(slot));
    PrefetchLocal(item.batch->epoch(), indices);
    for (int64_t slot : item.slots) runner_->RunLocal(item.batch, slot);
  };
  callbacks.failed = [this](const absl::Status& status) { OnRefusal(status); };
  // A worker came or went: re-plan at the next batch.
  callbacks.changed = [this] {
    if (replanner_) replanner_->Invalidate();
  };
  StreamFactory factory = [this](const std::string& address, const std::string& tls_name,
                                 WorkerStream::Handlers handlers) {
    Security security = security_;
    // A granted worker that registered over mutual TLS must present the
    // certificate it registered with: verify that name, not the address's.
    if (!tls_name.empty() && security.client_tls()) security.server_name = tls_name;
    return std::make_unique<RemoteWorker>(address, std::move(handlers), security);
  };
  remote_ = std::make_unique<RemotePool>(po, JobOpenMessage(), std::move(factory),
                                         std::move(callbacks), WallNanos);
  if (!options_.scheduler.empty()) {
    SchedulerGrants::Options go{
        options_.scheduler,        job_id_,        options_.rank, options_.world_size,
        options_.scheduler_weight, options_.labels};
    grants_ = std::make_unique<SchedulerGrants>(go, security_, remote_.get(),
                                                [this] { return WantedRemoteCores(); });
  }
  for (const std::string& address : options_.workers) remote_->Add(address);
  // Wait for the first grant (or the scheduler's failure to give one), then
  // for every worker to open the job, refuse it, or time out.
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.connect_timeout_seconds);
  if (grants_) {
    grants_->Start();
    grants_->AwaitFirstAnswer(deadline);
  }
  if (absl::Status s = remote_->AwaitOpened(deadline); !s.ok()) return s;
  remote_->StartWatchdog();
  if (remote_->UsableCredits() > 0) return absl::OkStatus();
  if (offload_.kind != OffloadMode::kAuto && !options_.fallback_local) {
    // The job asked for remote placement: running locally instead would
    // hide a wrong address, TLS set-up, scheduler or pool behind a slow job.
    return NoWorkerError();
  }
  if (grants_) {
    spdlog::warn(
        "the scheduler ({}) has granted no reachable worker yet; running locally until it does",
        options_.scheduler);
  } else {
    spdlog::warn("no worker is reachable ({}); running locally",
                 absl::StrJoin(options_.workers, ", "));
  }
  return absl::OkStatus();
}

absl::Status Loader::NoWorkerError() const {
  std::vector<std::string> reasons;
  for (const RemotePool::Member& m : remote_->Members()) {
    reasons.push_back(absl::StrCat(m.address, " ", m.dropped_because));
  }
  const std::string workers =
      reasons.empty() ? "" : absl::StrCat(" (", SafeText(absl::StrJoin(reasons, "; ")), ")");
  std::string why = absl::StrCat("no worker is reachable", workers, "; check --workers");
  if (grants_) {
    const SchedulerGrants::State st = grants_->state();
    why = !st.reachable
              ? absl::StrCat("the scheduler ", options_.scheduler, " gave no grant (",
                             st.error.empty() ? "no answer" : st.error, "); check --scheduler")
              : absl::StrCat("the scheduler ", options_.scheduler, " granted no reachable worker",
                             workers, "; its pool may be empty or busy");
  }
  return absl::UnavailableError(absl::StrCat(
      "--offload ", OffloadModeString(offload_), ": ", why,
      " and the TLS flags, or give --fallback-local to run locally until a worker is there"));
}

Loader::~Loader() {
  grants_.reset();  // its thread drives the pool: stop it first
  // Cancelling joins each stream's threads; then the thread pool: tasks may
  // still be writing into in-flight batches.
  if (remote_) remote_->Stop();
  if (runner_) runner_->Stop();
  absl::MutexLock lock(&mu_);
  for (Batch* b : in_flight_) delete b;
  in_flight_.clear();
}

}  // namespace prepflow
