#include "client/loader.h"

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
#include "client/remote_pool.h"
#include "client/remote_worker.h"
#include "client/sample_runner.h"
#include "client/scheduler_grants.h"
#include "pipeline/batch_ops.h"
#include "pipeline/epoch_order.h"
#include "pipeline/materialize.h"
#include "pipeline/rng.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// The random stream that places samples (local or remote): not a pipeline
// stage, so placement never disturbs augmentation.
constexpr uint32_t kPlacementStream = kMaxStages - 1;

// Batches in flight are raised to keep every worker's credits busy, up to
// this many; the thread pool's task queue is sized for it up front.
constexpr int kMaxPrefetchBatches = 32;

// What a job asks the scheduler for when it has no measure of what it
// would use: as much as its fair share gives.
constexpr double kWantAllCores = 1e6;

// A sample that storage did not answer for, its retries and outage wait
// spent (storage/http.h): what says nothing of the sample's own bytes.
bool IsOutage(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

// Batches not in use. Delivered BatchPtrs hold a reference so that a batch
// kept past the Loader's life is still freed safely.
struct Loader::FreeBatches {
  absl::Mutex mu;
  std::vector<std::unique_ptr<Batch>> free ABSL_GUARDED_BY(mu);
};

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
  samples_per_rank_ = RankSamples(size, options_.rank, options_.world_size, options_.rank_split);
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
    auto batch = std::make_unique<Batch>(out, options_.batch_size, options_.batch_allocator);
    std::memset(batch->slot(0), 0, out.bytes() * options_.batch_size);
    free_batches_->free.push_back(std::move(batch));
  }
}

absl::Status Loader::OpenData() {
  if (absl::Status s = OpenPipeline(); !s.ok()) return s;
  if (!options_.dataset.has_materialized()) {
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
  }
  auto dataset = OpenClientDataset(options_.dataset, options_.storage);
  if (!dataset.ok()) return dataset.status();
  dataset_ = *std::move(dataset);
  if (m != nullptr) {
    if (absl::Status s = CheckMaterializedSamples(*m, *dataset_); !s.ok()) return bad_data(s);
  }
  for (const std::string& w : dataset_->index_warnings()) spdlog::warn("{}", SafeText(w));
  auto batch_ops = CreateBatchOps(options_.pipeline, pipeline_->output_type(),
                                  static_cast<int64_t>(dataset_->classes().size()));
  if (!batch_ops.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline ", pipeline_->name(), ": ", batch_ops.status().message()));
  }
  batch_ops_ = *std::move(batch_ops);
  return OpenCache();
}

absl::Status Loader::OpenPipeline() {
  PipelineOptions popts;
  popts.seed = options_.seed;
  popts.decode.max_pixels = options_.max_pixels;
  popts.decode.max_jpeg_scans = options_.max_jpeg_scans;
  auto pipeline = Pipeline::Create(options_.pipeline, popts);
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = *std::move(pipeline);
  const int n = pipeline_->num_stages();
  const ValueType& out = pipeline_->output_type();
  if (!out.fixed()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline ", pipeline_->name(), ": its output (", out.DebugString(),
                     ") has no fixed shape, so samples cannot be batched; end it with a crop or a "
                     "fixed-size resize"));
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
  const std::string& path = options_.dataset.path();
  char real[PATH_MAX], cwd[PATH_MAX];
  if (IsUrl(path)) {
    // as it is
  } else if (realpath(path.c_str(), real) != nullptr) {
    open.mutable_dataset()->set_path(real);
  } else if (!path.empty() && path[0] != '/' && getcwd(cwd, sizeof(cwd)) != nullptr) {
    open.mutable_dataset()->set_path(absl::StrCat(cwd, "/", path));
  }
  *open.mutable_pipeline() = options_.pipeline;
  open.set_seed(options_.seed);
  open.set_max_pixels(options_.max_pixels);
  open.set_max_jpeg_scans(options_.max_jpeg_scans);
  open.set_dataset_size(dataset_->size());
  open.set_dataset_fingerprint(dataset_->fingerprint());
  open.set_max_items_in_flight(options_.max_items_per_worker);
  open.set_cache_at(cache_at_);
  open.set_echo_at(echo_at_);
  open.set_echo(echo_cap_);
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

int Loader::prefetch_batches() const {
  absl::MutexLock lock(&mu_);
  return prefetch_;
}

int64_t Loader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  const int64_t n = samples_per_epoch();
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

double Loader::WantedRemoteCores() const {
  if (offload_.kind == OffloadMode::kOff) return 0;
  double want = options_.max_remote_cores > 0 ? options_.max_remote_cores : kWantAllCores;
  // kAuto: what the planner would use with the pool to itself.
  if (replanner_ && offload_.kind == OffloadMode::kAuto) {
    want = std::min(want, replanner_->WantedRemoteCores().value_or(want));
  }
  return want;
}

int Loader::threads() const { return runner_->threads(); }

double Loader::LocalCores() const {
  // Ranks on this machine share its CPUs: the planner's L adds up to them.
  return std::min<double>(runner_->threads(), EffectiveCpus() / std::max(1, options_.local_ranks));
}

int Loader::ItemSamples(int cut, int64_t item_bytes_limit) const {
  // As many as fit the smallest item the workers take, from the bound on one
  // sample at this cut (the worker admits items against its memory budget).
  const int64_t fit = item_bytes_limit / std::max<int64_t>(1, runner_->max_sample_bytes(cut));
  return static_cast<int>(std::clamp<int64_t>(fit, 1, options_.item_samples));
}

void Loader::UpdatePrefetch() {
  if (!remote_) return;
  const int64_t remote_samples =
      static_cast<int64_t>(remote_->UsableCredits()) * options_.item_samples;
  const int64_t room = static_cast<int64_t>(runner_->queue_capacity()) / (2 * options_.batch_size);
  prefetch_ = static_cast<int>(std::max<int64_t>(
      prefetch_, std::min<int64_t>(room, 2 + remote_samples / options_.batch_size)));
}

int Loader::PlacementOf(uint64_t epoch, int64_t index) const {
  if (placement_.all_local()) return -1;  // no draw needed
  SampleRng rng(options_.seed, epoch, static_cast<uint64_t>(index), kPlacementStream);
  return placement_.Draw(rng.Uniform());
}

void Loader::StartWarmUp() {
  const double remote = remote_->UsableCores();
  const double local = LocalCores();
  std::vector<int64_t> fixed_bytes = {-1};
  for (int k = 1; k <= pipeline_->num_stages(); ++k) {
    const ValueType& t = pipeline_->boundary_type(k);
    fixed_bytes.push_back(t.fixed() ? static_cast<int64_t>(t.bytes()) : -1);
  }
  int cut = 0;
  const std::optional<policy::Placement> warm = policy::WarmUp(fixed_bytes, local, remote, &cut);
  if (!warm) return;
  placement_ = *warm;
  spdlog::info(
      "--offload auto: warming up with {:.0f}% of samples at cut {} ({:.2f} remote cores, "
      "{:.2f} here) until every stage is measured",
      100 * remote / (local + remote), cut, remote, local);
}

void Loader::MaybeReplan() {
  if (!replanner_ || images_ == 0) return;
  policy::Snapshot s;
  if (remote_) remote_->FillSnapshot(&s);
  // --echo auto plans without workers too: for its echo factor.
  if (s.workers.empty() && !options_.echo_auto) return;
  s.now_nanos = WallNanos();
  s.process_cpu_nanos = ProcessCpuNanos();
  s.local_cores = LocalCores();
  runner_->Measure(&s);
  s.trainer_work = {trainer_cpu_nanos_ * 1e-9, 0, static_cast<double>(images_)};
  s.delivered_samples = static_cast<double>(images_);
  s.reuse_at = delivered_echo_ > 1 ? std::max(echo_at_, cache_at_) : cache_at_;
  s.cache_hits = static_cast<double>(runner_->remote_cache_hits() + (cache_ ? cache_->hits() : 0));
  s.cache_misses =
      static_cast<double>(runner_->remote_cache_misses() + (cache_ ? cache_->misses() : 0));
  s.echo = delivered_echo_;
  s.busy_seconds = (s.now_nanos - start_nanos_ - wait_nanos_) * 1e-9;
  std::vector<std::string> notes;
  std::optional<policy::Placement> next = replanner_->Update(s, &notes);
  // Without --offload auto the plans only inform --echo auto: not news.
  const auto level =
      offload_.kind == OffloadMode::kAuto ? spdlog::level::info : spdlog::level::debug;
  for (const std::string& note : notes) spdlog::log(level, "{}", note);
  if (next && offload_.kind == OffloadMode::kAuto) placement_ = *std::move(next);
}

bool Loader::EpochStillLoading() const {
  if (cache_ == nullptr && (remote_ == nullptr || !remote_->AnyWorkerCaches())) return false;
  for (const Batch* b : in_flight_) {
    if (!b->complete()) return true;
  }
  return false;
}

Batch* Loader::StartBatch() {
  while (next_epoch_ < options_.first_epoch + options_.epochs) {
    if (!order_ready_) {
      // With sample caches, a sample of the next epoch must not start while
      // this epoch's run of it may still be loading: it would miss the cache
      // and read storage again. The next epoch starts once the batches in
      // flight are complete (a pause of the pipeline's depth per epoch).
      if (next_epoch_ > options_.first_epoch && EpochStillLoading()) return nullptr;
      order_ =
          EpochOrder(dataset_->size(), options_.seed, static_cast<uint64_t>(next_epoch_),
                     options_.shuffle, options_.rank, options_.world_size, options_.rank_split);
      order_copies_.clear();
      const int echo =
          epoch_echo_.count(next_epoch_) ? epoch_echo_[next_epoch_] : ChooseEpochEcho(next_epoch_);
      echo_now_ = echo;
      if (echo > 1) {
        EchoOrder(&order_, &order_copies_, echo, options_.echo_window, options_.seed,
                  static_cast<uint64_t>(next_epoch_));
      }
      order_ready_ = true;
      // A resumed run starts its first epoch past the batches already seen.
      next_number_ = next_epoch_ == options_.first_epoch ? options_.skip_batches : 0;
      next_offset_ = std::min<int64_t>(next_number_ * options_.batch_size,
                                       static_cast<int64_t>(order_.size()));
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
      absl::MutexLock lock(&free_batches_->mu);
      if (!free_batches_->free.empty()) {
        batch = std::move(free_batches_->free.back());
        free_batches_->free.pop_back();
      }
    }
    // Only when the trainer keeps more batches than it hands back.
    if (!batch) {
      batch = std::make_unique<Batch>(pipeline_->output_type(), options_.batch_size,
                                      options_.batch_allocator);
    }
    batch->Reset(static_cast<uint64_t>(next_epoch_), next_number_,
                 absl::MakeConstSpan(order_.data() + next_offset_, static_cast<size_t>(take)),
                 order_copies_.empty() ? absl::Span<const uint32_t>()
                                       : absl::MakeConstSpan(order_copies_.data() + next_offset_,
                                                             static_cast<size_t>(take)),
                 echo_now_);
    next_offset_ += take;
    ++next_number_;
    return batch.release();
  }
  return nullptr;
}

void Loader::Place(Batch* b) {
  // Remote samples go out in items of one cut each.
  const int64_t limit = remote_ ? remote_->item_bytes_limit() : kMaxReplyBytes;
  // Workers without a custom op's plugin run up to it; results are the same
  // at every cut.
  const int stage_limit = remote_ ? remote_->StageLimit() : 0;
  const int start = Materialized() != nullptr ? Materialized()->upto() : 0;
  // Remote items by (cut, home worker): with caching workers each sample
  // goes to the one whose cache holds it (RemotePool::HomeOf).
  std::map<std::pair<int, int>, RemoteItem> open_items;
  std::vector<int64_t> local_slots, local_indices;
  for (int64_t slot = 0; slot < b->size(); ++slot) {
    const int64_t index = b->index_at(slot);
    int cut = PlacementOf(b->epoch(), index);
    if (cut > stage_limit) cut = stage_limit;
    // Materialized data starts at its boundary: no cut comes before it.
    if (cut >= 0 && cut < start) cut = stage_limit >= start ? start : -1;
    if (cut < 0) {
      local_slots.push_back(slot);
      local_indices.push_back(index);
      continue;
    }
    const int home = remote_->HomeOf(index, cut);
    const RemoteItem fresh{b, {}, cut, home};
    RemoteItem& item = open_items.try_emplace({cut, home}, fresh).first->second;
    item.slots.push_back(slot);
    if (static_cast<int>(item.slots.size()) == ItemSamples(cut, limit)) {
      remote_->Submit(std::exchange(item, fresh));
    }
  }
  for (auto& [key, item] : open_items) {
    if (!item.slots.empty()) remote_->Submit(std::move(item));
  }
  // Remote data: the batch's reads start now, many at once, ahead of the
  // threads that decode.
  PrefetchLocal(b->epoch(), local_indices);
  for (const int64_t slot : local_slots) runner_->RunLocal(b, slot);
}

void Loader::TopUp() {
  UpdatePrefetch();
  while (static_cast<int>(in_flight_.size()) < prefetch_) {
    Batch* b = StartBatch();
    if (b == nullptr) return;
    in_flight_.push_back(b);
    Place(b);
  }
}

void Loader::SignalBatchDone() {
  absl::MutexLock lock(&mu_);
  batch_done_.SignalAll();
}

void Loader::OnRefusal(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
    batch_done_.SignalAll();
  }
  if (grants_) grants_->Finish();
}

void Loader::EndRun() {
  if (end_nanos_ != 0) return;
  end_nanos_ = WallNanos();
  end_cpu_nanos_ = ProcessCpuNanos();
  // Let the workers finish their streams cleanly; the scheduler learns at
  // once that this job wants nothing now.
  if (remote_) remote_->Finish();
  if (grants_) grants_->Finish();
}

absl::Status Loader::TakeErrors(Batch* batch) {
  for (SampleError& e : batch->Compact()) {
    ++errors_;
    if (IsOutage(e.status)) {
      // Storage that does not answer says nothing of the sample: skipping
      // it would drop good data for as long as the outage lasts.
      failure_ = absl::Status(
          e.status.code(),
          absl::StrCat(e.path, ": storage is unavailable (", e.status.message(),
                       "); an outage is not bad data, so the run stops whatever --on-error says "
                       "(--storage-outage-seconds sets how long one is waited out)"));
      spdlog::error("sample {}: {}", e.index, SafeText(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      return failure_;
    }
    if (options_.on_error == OnError::kFail) {
      failure_ = absl::Status(e.status.code(), absl::StrCat(e.path, ": ", e.status.message()));
      spdlog::error("sample {} failed, stopping (--on-error fail): {}", e.index,
                    SafeText(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      return failure_;
    }
    // Every failed sample is counted and kept (first_errors); the log gets
    // the first few, then a line with the count at most every 10 s, so a
    // dataset of broken files cannot flood it epoch after epoch.
    if (const int64_t quiet = skip_log_.Admit(WallNanos()); quiet >= 0) {
      spdlog::warn("skipping sample {} ({}): {}{}", e.index, SafeText(e.path),
                   SafeText(e.status.ToString()),
                   quiet > 0 ? absl::StrCat(" (and ", quiet, " more not logged)") : "");
    }
    if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
  }
  return absl::OkStatus();
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
    EndRun();
    return BatchPtr();
  }
  Batch* batch = in_flight_.front();
  AwaitBatch(*batch);
  wait_nanos_ += WallNanos() - now;
  if (!failure_.ok()) return failure_;
  in_flight_.pop_front();
  if (absl::Status s = TakeErrors(batch); !s.ok()) {
    delete batch;
    EndRun();
    return s;
  }
  for (uint64_t h : batch->hashes()) checksum_.Add(h);
  if (batch_ops_ != nullptr) {
    const int64_t cpu = ThreadCpuNanos();
    if (absl::Status s = batch_ops_->Apply(options_.seed, batch); !s.ok()) {
      delete batch;
      failure_ = s;
      EndRun();
      return s;
    }
    // The planner counts it against this machine's CPU on every path.
    trainer_cpu_nanos_ += ThreadCpuNanos() - cpu;
  }
  images_ += batch->size();
  remote_images_ += batch->remote_samples();
  for (uint32_t copy : batch->copies()) echoed_images_ += copy > 0 ? 1 : 0;
  delivered_echo_ = batch->echo();
  bytes_ += batch->bytes();
  ++batches_;
  MaybeReplan();
  TopUp();  // keep the workers busy while the trainer consumes this batch

  std::shared_ptr<FreeBatches> free = free_batches_;
  return BatchPtr(batch, [free](const Batch* b) {
    absl::MutexLock lock(&free->mu);
    free->free.emplace_back(const_cast<Batch*>(b));
  });
}

void Loader::AwaitBatch(const Batch& batch) {
  // Every unfinished sample is a task of the runner's or an item the pool
  // owes. When neither holds anything for three checks a second apart and the
  // batch is still short, its samples were lost (a bug): the run stops saying
  // so, rather than waiting for ever.
  int idle_checks = 0;
  while (!batch.complete() && failure_.ok()) {
    if (!batch_done_.WaitWithTimeout(&mu_, absl::Seconds(1))) continue;
    const bool held = runner_->pending_tasks() > 0 || (remote_ && remote_->owed_items() > 0);
    idle_checks = held || batch.complete() ? 0 : idle_checks + 1;
    if (idle_checks < 3) continue;
    failure_ = absl::InternalError(absl::StrCat(
        "lost ", batch.pending(), " samples of batch ", batch.number(), " of epoch ", batch.epoch(),
        ": no thread and no worker holds them (a bug in prepflow; please report it)"));
  }
}

void Loader::AddTrainerWork(double cpu_seconds) {
  if (!(cpu_seconds > 0) || !std::isfinite(cpu_seconds)) return;
  absl::MutexLock lock(&mu_);
  trainer_cpu_nanos_ += static_cast<int64_t>(cpu_seconds * 1e9);
}

double Loader::trainer_cpu_seconds() const {
  absl::MutexLock lock(&mu_);
  return trainer_cpu_nanos_ * 1e-9;
}

LoaderStats Loader::Stats() const {
  LoaderStats st;
  {
    absl::MutexLock lock(&mu_);
    st.images = images_;
    st.remote_images = remote_images_;
    st.local_images = images_ - remote_images_;
    st.echoed_samples = echoed_images_;
    st.fresh_samples = images_ - echoed_images_;
    st.errors = errors_;
    st.batches = batches_;
    st.bytes = bytes_;
    const int64_t end = end_nanos_ != 0 ? end_nanos_ : WallNanos();
    st.seconds = start_nanos_ != 0 ? (end - start_nanos_) * 1e-9 : 0;
    const int64_t end_cpu = end_cpu_nanos_ != 0 ? end_cpu_nanos_ : ProcessCpuNanos();
    st.cpu_seconds = start_nanos_ != 0 ? (end_cpu - start_cpu_nanos_) * 1e-9 : 0;
    st.wait_seconds = wait_nanos_ * 1e-9;
    st.first_errors = first_errors_;
    st.plan_fractions = placement_.Fractions();
    st.storage_bytes_read_per_epoch = StorageBytesPerEpoch();
    for (const auto& [epoch, echo] : epoch_echo_) {
      if (epoch < options_.first_epoch + options_.epochs) st.echo_factor_per_epoch.push_back(echo);
    }
  }
  st.offload = OffloadModeString(offload_);
  const policy::ReplanState plan = replanner_ ? replanner_->State() : policy::ReplanState();
  if (replanner_) {
    st.plan = plan.explanation;
    st.plan_changes = plan.changes;
    st.plan_throughput = plan.throughput;
    st.ingest_limit = plan.ingest_limit;
    st.receive_cpu_per_byte = plan.receive_cost_per_byte;
    st.unseen_cpu_per_sample = plan.unseen_cost_per_sample;
    st.worker_send_cpu_per_byte = plan.send_cost_per_byte;
    st.storage_limit_here = plan.storage_limit_here;
    st.storage_limit_workers = plan.storage_limit_workers;
  }
  if (remote_) AddRemoteStats(plan, &st);
  st.scheduler = options_.scheduler;
  st.local_cores = LocalCores();
  if (grants_) {
    const SchedulerGrants::State g = grants_->state();
    st.scheduler_reachable = g.reachable;
    st.wanted_cores = g.wanted_cores;
    st.fair_share_cores = g.fair_share_cores;
    st.job_fair_share_cores = g.job_fair_share_cores;
  }
  st.checksum = checksum_.value();
  st.stages = runner_->LocalStages();
  st.remote_stages = runner_->RemoteStages();
  if (dataset_->store() != nullptr) st.storage = dataset_->store()->stats();
  st.storage.Add(runner_->RemoteStorage());
  // Against the split that deals every sample once: the repeats this rank
  // takes (pad), and what no rank takes (drop).
  const int64_t n = dataset_->size();
  const int64_t once = RankSamples(n, options_.rank, options_.world_size, RankSplit::kUneven);
  if (options_.rank_split == RankSplit::kPad)
    st.padded_samples_per_epoch = samples_per_rank_ - once;
  if (options_.rank_split == RankSplit::kDrop && options_.world_size > 1) {
    st.dropped_samples_per_epoch = n % options_.world_size;
  }
  st.cache_at = cache_at_;
  st.echo_factor = echo_now_;
  st.echo_at = echo_at_;
  st.cache_hits = runner_->remote_cache_hits();
  st.cache_misses = runner_->remote_cache_misses();
  if (cache_ != nullptr) {
    st.cache_hits += cache_->hits();
    st.cache_misses += cache_->misses();
    const SampleCache::Stats c = cache_->cache().stats();
    st.cache_ram_bytes = c.ram_bytes;
    st.cache_disk_bytes = c.disk_bytes;
    st.cache_evictions = c.evictions;
  }
  return st;
}

std::vector<int64_t> Loader::StorageBytesPerEpoch() const {
  const int begun =
      std::min(options_.epochs, next_epoch_ - options_.first_epoch + (order_ready_ ? 1 : 0));
  std::vector<int64_t> out(static_cast<size_t>(std::max(0, begun)), 0);
  for (const auto& [epoch, bytes] : runner_->StorageBytesByEpoch()) {
    const int64_t e = static_cast<int64_t>(epoch) - options_.first_epoch;
    if (e >= 0 && e < static_cast<int64_t>(out.size())) out[static_cast<size_t>(e)] = bytes;
  }
  return out;
}

void Loader::AddRemoteStats(const policy::ReplanState& plan, LoaderStats* st) const {
  const RemotePool::Counters c = remote_->counters();
  st->reissued_items = c.reissued_items;
  st->hedged_items = c.hedged_items;
  st->hedge_wins = c.hedge_wins;
  // One entry per address: a worker granted again after it was closed has
  // a second stream, and both count.
  std::map<std::string, size_t> by_address;
  for (const RemotePool::Member& m : remote_->Members()) {
    auto [it, fresh] = by_address.try_emplace(m.address, st->workers.size());
    if (fresh) st->workers.emplace_back().address = m.address;
    LoaderStats::WorkerStats& ws = st->workers[it->second];
    ws.alive = ws.alive || m.usable();
    ++ws.streams;
    if (m.usable() && !m.worker_id.empty()) ws.granted_cores = m.granted_cores;
    ws.received_bytes += m.received_bytes;
    ws.samples += m.samples;
    if (auto link = plan.links.find(m.id); link != plan.links.end()) {
      ws.link_limit = std::max(ws.link_limit, link->second.limit);
      if (m.alive) ws.ingest_rate = link->second.ingest_rate;
    }
  }
  st->workers_total = static_cast<int>(st->workers.size());
  for (const LoaderStats::WorkerStats& ws : st->workers) {
    st->workers_alive += ws.alive ? 1 : 0;
    st->granted_cores += ws.granted_cores;
  }
}

}  // namespace prepflow
