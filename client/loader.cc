#include "client/loader.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "pipeline/epoch_order.h"
#include "pipeline/rng.h"
#include "pipeline/text.h"
#include "pipeline/wire.h"
#include "policy/planner.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// The random stream that places samples (local or remote) for kCut: not a
// pipeline stage, so placement never disturbs augmentation.
constexpr uint32_t kPlacementStream = kMaxStages - 1;

// Batches in flight are raised to keep every worker's credits busy, up to
// this many; the pool's task queue is sized for it up front.
constexpr int kMaxPrefetchBatches = 32;

// A granted worker whose stream failed is not dialled again for this long,
// even while the scheduler (which has not noticed yet) still grants it.
constexpr int64_t kRedialAfterNanos = 10'000'000'000;

bool IsRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kPermissionDenied ||
         code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnauthenticated ||
         code == absl::StatusCode::kFailedPrecondition;
}

// host:port with a numeric port, [v6]:port, or a gRPC URI (dns:///..., unix:...).
absl::Status CheckWorkerAddress(const std::string& address) {
  if (absl::StrContains(address, ":/") || absl::StartsWith(address, "unix:")) {
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535 ||
      (address[0] == '[') != (address[colon - 1] == ']')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers: '", SafeText(address), "' is not host:port (e.g. worker1:7070, [::1]:7070)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OnError> ParseOnError(const std::string& name) {
  if (name == "skip") return OnError::kSkip;
  if (name == "fail") return OnError::kFail;
  return absl::InvalidArgumentError(absl::StrCat("--on-error: '", name, "' is not skip or fail"));
}

absl::StatusOr<OffloadMode> ParseOffload(const std::string& text) {
  OffloadMode mode;
  if (text == "off" || text.empty()) return mode;
  if (text == "auto") {
    mode.kind = OffloadMode::kAuto;
    return mode;
  }
  if (text == "remote") {
    mode.kind = OffloadMode::kRemote;
    return mode;
  }
  auto bad = [&text](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--offload: '", text, "': ", why,
                     " (use off, auto, remote, or cut=K[,remote_fraction=F])"));
  };
  if (text.rfind("cut=", 0) != 0) return bad("unknown mode");
  mode.kind = OffloadMode::kCut;
  bool have_cut = false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.first == "cut") {
      if (!absl::SimpleAtoi(kv.second, &mode.cut) || mode.cut < 0) return bad("cut must be >= 0");
      have_cut = true;
    } else if (kv.first == "remote_fraction") {
      if (!absl::SimpleAtod(kv.second, &mode.remote_fraction) || !(mode.remote_fraction >= 0) ||
          mode.remote_fraction > 1) {
        return bad("remote_fraction must be in [0, 1]");
      }
    } else {
      return bad(absl::StrCat("unknown key '", kv.first, "'"));
    }
  }
  if (!have_cut) return bad("cut=K is required");
  return mode;
}

std::string OffloadModeString(const OffloadMode& mode) {
  switch (mode.kind) {
    case OffloadMode::kOff:
      return "off";
    case OffloadMode::kRemote:
      return "remote";
    case OffloadMode::kCut:
      return absl::StrFormat("cut=%d,remote_fraction=%g", mode.cut, mode.remote_fraction);
    case OffloadMode::kAuto:
      return "auto";
  }
  return "?";
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
  if (options.first_epoch < 0 || options.skip_batches < 0) {
    return invalid("--start-epoch/--start-batch: must be >= 0, got ", options.first_epoch, "/",
                   options.skip_batches);
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid("--rank/--world-size: need 0 <= rank < world_size, got ", options.rank, "/",
                   options.world_size);
  }
  if (options.prefetch_batches < 1) {
    return invalid("--prefetch: must be at least 1, got ", options.prefetch_batches);
  }
  if (options.max_pixels < 1)
    return invalid("--max-pixels: must be positive, got ", options.max_pixels);
  if (options.item_samples < 1) return invalid("--item-samples: must be at least 1");
  if (!(options.worker_timeout_seconds > 0)) return invalid("--worker-timeout: must be positive");
  if (!(options.hedge_after >= 0)) return invalid("--hedge-after: must be >= 0 (0: off)");
  OffloadMode offload;
  if (options.offload.has_value()) {
    offload = *options.offload;
  } else if (const char* env = std::getenv("PREPFLOW_OFFLOAD"); env != nullptr && *env != '\0') {
    auto parsed = ParseOffload(env);
    if (!parsed.ok()) {
      return invalid("PREPFLOW_OFFLOAD: ", parsed.status().message());
    }
    offload = *parsed;
  }
  LoaderOptions resolved = options;
  if (resolved.scheduler.empty() && resolved.workers.empty()) {
    // The cluster's scheduler, set once in the trainers' environment, so
    // that a job needs only --offload (or PREPFLOW_OFFLOAD) to use the pool.
    if (const char* env = std::getenv("PREPFLOW_SCHEDULER")) resolved.scheduler = env;
  }
  if ((offload.kind == OffloadMode::kRemote || offload.kind == OffloadMode::kCut) &&
      resolved.workers.empty() && resolved.scheduler.empty()) {
    return invalid("--offload ", OffloadModeString(offload),
                   " needs workers (--workers host:port,... or --scheduler host:port)");
  }
  for (const std::string& w : resolved.workers) {
    if (absl::Status s = CheckWorkerAddress(w); !s.ok()) return s;
  }
  if (!(options.scheduler_weight > 0) || !std::isfinite(options.scheduler_weight))
    return invalid("--weight: must be positive, got ", options.scheduler_weight);
  if (!(options.max_remote_cores >= 0)) return invalid("--max-remote-cores: must be >= 0");
  if (!(options.demand >= 0)) return invalid("--demand: must be >= 0");
  if (!(options.bandwidth >= 0)) return invalid("--bandwidth-mbps: must be >= 0");

  auto security = LoadSecurity(options.security);
  if (!security.ok()) return security.status();
  std::unique_ptr<Loader> loader(new Loader);
  loader->options_ = resolved;
  loader->security_ = *std::move(security);
  loader->offload_ = offload;
  SampleRng id_rng(static_cast<uint64_t>(WallNanos()), 0, static_cast<uint64_t>(getpid()), 0);
  loader->job_id_ = absl::StrFormat("job-%016x", id_rng.NextU64());
  PipelineOptions popts;
  popts.seed = options.seed;
  popts.decode.max_pixels = options.max_pixels;
  if (options.max_jpeg_scans < 1) return invalid("--max-jpeg-scans: must be positive");
  popts.decode.max_jpeg_scans = options.max_jpeg_scans;
  auto pipeline = Pipeline::Create(options.pipeline, popts);
  if (!pipeline.ok()) return pipeline.status();
  loader->pipeline_ = *std::move(pipeline);
  const int64_t max_file_bytes = options.dataset.max_file_bytes() > 0
                                     ? options.dataset.max_file_bytes()
                                     : kDefaultMaxFileBytes;
  for (int k = 0; k <= loader->pipeline_->num_stages(); ++k) {
    loader->max_sample_bytes_.push_back(loader->pipeline_->MaxBytesAt(k, max_file_bytes));
  }
  const int n = loader->pipeline_->num_stages();
  const ValueType& out = loader->pipeline_->output_type();
  if (!out.fixed()) {
    return invalid("pipeline ", loader->pipeline_->name(), ": its output (", out.DebugString(),
                   ") has no fixed shape, so samples cannot be batched; end it with a crop or a "
                   "fixed-size resize");
  }
  if (offload.kind == OffloadMode::kCut && offload.cut > n) {
    return invalid("--offload: cut=", offload.cut, " is past the last stage (pipeline ",
                   loader->pipeline_->name(), " has ", n, " stages)");
  }
  {
    // Placement as a distribution over n + 2 outcomes: local, then remote
    // with cut 0..n (cut 0: the worker only reads the file). kAuto starts
    // local; its first plan comes once there are measurements.
    absl::MutexLock lock(&loader->mu_);
    std::vector<double>& cdf = loader->placement_cdf_;
    cdf.assign(static_cast<size_t>(n) + 2, 1.0);
    if (offload.kind == OffloadMode::kRemote) {
      for (int j = 0; j <= n; ++j) cdf[j] = 0;
    } else if (offload.kind == OffloadMode::kCut) {
      for (int j = 0; j <= offload.cut; ++j) cdf[j] = 1 - offload.remote_fraction;
    }
  }
  auto dataset = OpenDataset(options.dataset);
  if (!dataset.ok()) return dataset.status();
  loader->dataset_ = *std::move(dataset);

  const int threads = options.threads > 0 ? options.threads : AvailableCpus();
  loader->read_profiler_ = std::make_unique<StageProfiler>(std::vector<std::string>{"read"});
  loader->stage_profiler_ = std::make_unique<StageProfiler>(loader->pipeline_->stage_names());
  std::vector<std::string> remote_names = {"read"};
  for (const std::string& s : loader->pipeline_->stage_names()) remote_names.push_back(s);
  loader->remote_profiler_ = std::make_unique<StageProfiler>(remote_names);
  for (int i = 0; i < threads; ++i) loader->workspaces_.push_back(std::make_unique<Workspace>());
  const int64_t size = loader->dataset_->size();
  loader->samples_per_epoch_ =
      size / options.world_size + (options.rank < size % options.world_size ? 1 : 0);
  loader->prefetch_ = options.prefetch_batches;
  {
    absl::MutexLock lock(&loader->mu_);
    loader->next_epoch_ = options.first_epoch;
  }
  // Room for every task of every batch that may come to be in flight, twice
  // (a sample's local run, or its remote suffix): Submit() never waits for
  // long.
  loader->pool_ =
      std::make_unique<ThreadPool>(threads, 2 * static_cast<size_t>(options.batch_size) *
                                                std::max(loader->prefetch_, kMaxPrefetchBatches));
  const bool remote_possible = offload.kind != OffloadMode::kOff &&
                               (!resolved.workers.empty() || !resolved.scheduler.empty());
  if (offload.kind == OffloadMode::kAuto && !remote_possible) {
    spdlog::info("--offload auto: no workers given (--workers or --scheduler); running locally");
  } else if (remote_possible) {
    if (absl::Status s = loader->ConnectWorkers(); !s.ok()) return s;
  }
  if (offload.kind == OffloadMode::kAuto) {
    absl::MutexLock lock(&loader->mu_);
    loader->StartWarmUp();
  }
  loader->pool_of_batches_ = std::make_shared<Pool>();
  {
    // The batches that can be in flight plus the one the trainer holds, made
    // and touched now: memory is committed up front and the first batches do
    // not pay for page faults.
    absl::MutexLock lock(&loader->pool_of_batches_->mu);
    for (int i = 0; i <= loader->prefetch_; ++i) {
      auto batch = std::make_unique<Batch>(out, options.batch_size, options.batch_allocator);
      std::memset(batch->slot(0), 0, out.bytes() * options.batch_size);
      loader->pool_of_batches_->free.push_back(std::move(batch));
    }
  }
  if (remote_possible) {
    loader->watchdog_ = std::thread([l = loader.get()] { l->WatchdogLoop(); });
  }
  spdlog::debug("loader: {} samples ({}), pipeline {}, {} threads, offload {}", size,
                loader->dataset_->format(), loader->pipeline_->DebugString(), threads,
                OffloadModeString(offload));
  return loader;
}

absl::Status Loader::ConnectWorkers() {
  char real[PATH_MAX];
  open_.set_job_id(job_id_);
  *open_.mutable_dataset() = options_.dataset;
  // Workers see the dataset on shared storage under the same absolute path.
  if (realpath(options_.dataset.path().c_str(), real) != nullptr)
    open_.mutable_dataset()->set_path(real);
  *open_.mutable_pipeline() = options_.pipeline;
  open_.set_seed(options_.seed);
  open_.set_max_pixels(options_.max_pixels);
  open_.set_max_jpeg_scans(options_.max_jpeg_scans);
  open_.set_dataset_size(dataset_->size());
  open_.set_dataset_fingerprint(dataset_->fingerprint());
  open_.set_max_items_in_flight(options_.max_items_per_worker);

  if (!options_.scheduler.empty()) {
    registration_ = std::make_unique<JobRegistration>(
        options_.scheduler, security_, job_id_, [this](proto::JobBeat* beat) { FillBeat(beat); },
        [this](const proto::JobGrant& grant) { ApplyGrant(grant); },
        [this](const grpc::Status&) {
          absl::MutexLock lock(&mu_);
          scheduler_answered_ = true;
          scheduler_reachable_ = false;
        });
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& address : options_.workers) AddWorker(address, "", 0);
  if (registration_) registration_->Start();
  // Wait for the first grant (or the scheduler's failure to give one), then
  // for every worker to open the job, refuse it, or time out.
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!failure_.ok()) return true;
    if (registration_ && !scheduler_answered_) return false;
    for (const Worker& w : workers_) {
      if (w.alive && !w.opened) return false;
    }
    return true;
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), absl::Seconds(options_.connect_timeout_seconds));
  if (!failure_.ok()) return failure_;
  int credits = 0;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].alive && !workers_[w].opened) {
      DropWorker(static_cast<int>(w), absl::StrCat("did not open the job within ",
                                                   options_.connect_timeout_seconds, " s"));
    }
    if (workers_[w].alive) credits += workers_[w].credits;
  }
  if (credits == 0) {
    if (registration_) {
      spdlog::warn(
          "the scheduler ({}) has granted no reachable worker yet; running locally "
          "until it does",
          options_.scheduler);
    } else if (offload_.kind != OffloadMode::kAuto && !options_.fallback_local) {
      // The job asked for remote placement: running locally instead would
      // hide a wrong address or TLS set-up behind a slow job.
      std::vector<std::string> reasons;
      for (const Worker& w : workers_) {
        reasons.push_back(absl::StrCat(w.address, " ", w.dropped_because));
      }
      return absl::UnavailableError(
          absl::StrCat("--offload ", OffloadModeString(offload_), ": no worker is reachable (",
                       SafeText(absl::StrJoin(reasons, "; ")),
                       "); check --workers and the TLS flags, or give --fallback-local to run "
                       "locally instead"));
    } else {
      spdlog::warn("no worker is reachable ({}); running locally",
                   absl::StrJoin(options_.workers, ", "));
    }
    all_workers_gone_logged_ = true;
  }
  return absl::OkStatus();
}

int Loader::AddWorker(const std::string& address, const std::string& worker_id,
                      double granted_cores, const std::string& tls_name) {
  const int id = static_cast<int>(workers_.size());
  RemoteWorker::Handlers handlers;
  handlers.opened = [this, id](const proto::JobOpened& opened) {
    absl::MutexLock lock(&mu_);
    Worker& worker = workers_[id];
    if (stopping_ || !worker.alive) return;
    worker.opened = true;
    worker.max_credits = std::max(1, opened.max_items_in_flight());
    if (opened.max_item_bytes() > 0) {
      item_bytes_limit_ = std::min(item_bytes_limit_, opened.max_item_bytes());
    }
    worker.threads = opened.threads();
    worker.cores = opened.cores() > 0 ? opened.cores() : opened.threads();
    worker.credits = CreditsFor(worker);
    worker.last_heard_nanos = WallNanos();
    spdlog::info("worker {} ({}) opened job {}: {} threads, {} of its {} items in flight{}",
                 worker.address, opened.worker_id(), job_id_, opened.threads(), worker.credits,
                 worker.max_credits,
                 worker.granted ? absl::StrFormat(" (granted %.2f cores)", worker.granted_cores)
                                : std::string());
    // A worker that joins mid-run: its credits are usable at once, and the
    // remote capacity changed, so re-plan at the next batch.
    all_workers_gone_logged_ = false;
    last_plan_nanos_ = 0;
    UpdatePrefetch();
    Dispatch();
  };
  handlers.result = [this, id](std::shared_ptr<const ReceivedMessage> received) {
    OnResult(id, std::move(received));
  };
  handlers.closed = [this, id](const absl::Status& status) { OnClosed(id, status); };
  Worker& worker = workers_.emplace_back();
  worker.address = address;
  worker.worker_id = worker_id;
  worker.granted = !worker_id.empty();
  worker.granted_cores = granted_cores;
  worker.added_nanos = WallNanos();
  Security security = security_;
  // A granted worker that registered over mutual TLS must present the
  // certificate it registered with: verify that name, not the address's.
  if (!tls_name.empty() && security.client_tls()) security.server_name = tls_name;
  worker.stream = std::make_unique<RemoteWorker>(address, std::move(handlers), security);
  worker.stream->Start(open_);
  return id;
}

double Loader::UsableCores(const Worker& w) {
  return w.granted ? std::min(w.cores, w.granted_cores) : w.cores;
}

int Loader::ItemSamples(int cut) const {
  // As many as fit the smallest item the workers take, from the bound on one
  // sample at this cut (the worker admits items against its memory budget).
  const int64_t fit = item_bytes_limit_ / std::max<int64_t>(1, max_sample_bytes_[cut]);
  return static_cast<int>(std::clamp<int64_t>(fit, 1, options_.item_samples));
}

int Loader::CreditsFor(const Worker& w) {
  // A grant of part of a worker: ask for that part of its credits, so that
  // jobs sharing it get its cores in proportion to their grants.
  if (!w.granted || w.cores <= 0) return w.max_credits;
  return std::max(1, static_cast<int>(std::ceil(w.max_credits * UsableCores(w) / w.cores)));
}

void Loader::UpdatePrefetch() {
  int credits = 0;
  for (const Worker& w : workers_) credits += w.alive && w.opened && !w.retiring ? w.credits : 0;
  const int64_t remote_samples = static_cast<int64_t>(credits) * options_.item_samples;
  const int64_t room = static_cast<int64_t>(pool_->queue_capacity()) / (2 * options_.batch_size);
  prefetch_ = static_cast<int>(std::max<int64_t>(
      prefetch_, std::min<int64_t>(room, 2 + remote_samples / options_.batch_size)));
}

double Loader::WantedRemoteCores() {
  if (offload_.kind == OffloadMode::kOff || end_nanos_ != 0 || !failure_.ok()) return 0;
  double want = options_.max_remote_cores > 0 ? options_.max_remote_cores : kWantAllCores;
  if (offload_.kind == OffloadMode::kAuto && plan_input_) {
    // What the planner would use with the pool to itself.
    policy::PlanInput unlimited = *plan_input_;
    unlimited.remote_cores = kWantAllCores;
    auto plan = policy::MakePlan(unlimited);
    if (plan.ok() && plan->throughput > 0) want = std::min(want, plan->remote_cores_used);
  }
  return want;
}

void Loader::FillBeat(proto::JobBeat* beat) {
  absl::MutexLock lock(&mu_);
  beat->set_weight(options_.scheduler_weight);
  beat->mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  wanted_cores_ = WantedRemoteCores();
  beat->set_wanted_cores(wanted_cores_);
  for (const Worker& w : workers_) {
    if (!w.granted || !w.alive || w.retiring) continue;
    proto::WorkerGrant* current = beat->add_current();
    current->set_worker_id(w.worker_id);
    current->set_address(w.address);
    current->set_cores(w.granted_cores);
  }
}

void Loader::ApplyGrant(const proto::JobGrant& grant) {
  absl::MutexLock lock(&mu_);
  scheduler_answered_ = true;
  scheduler_reachable_ = true;
  // After the run the job wants nothing (and gets a zero share): the stats
  // keep the share it ran with.
  if (stopping_ || end_nanos_ != 0 || !failure_.ok()) return;
  fair_share_cores_ = grant.fair_share_cores();
  const int64_t now = WallNanos();
  std::vector<bool> named(workers_.size());
  for (const proto::WorkerGrant& g : grant.workers()) {
    int found = -1;
    for (size_t w = 0; w < workers_.size(); ++w) {
      if (workers_[w].alive && workers_[w].address == g.address()) found = static_cast<int>(w);
    }
    if (found < 0) {
      auto failed = failed_nanos_.find(g.address());
      if (failed != failed_nanos_.end() && now - failed->second < kRedialAfterNanos) continue;
      if (refused_.count(g.address()) != 0) continue;
      spdlog::info("scheduler granted worker {} ({}, {:.2f} cores); opening the job there",
                   g.worker_id(), g.address(), g.cores());
      found = AddWorker(g.address(), g.worker_id(), g.cores(), g.tls_name());
      named.push_back(true);
      continue;
    }
    Worker& worker = workers_[found];
    named[found] = true;
    if (!worker.granted) continue;  // named in --workers too: it stays a static worker
    if (worker.retiring) {
      spdlog::info("worker {} is granted again; keeping it", worker.address);
      worker.retiring = false;
    }
    if (worker.granted_cores != g.cores()) {
      worker.granted_cores = g.cores();
      if (worker.opened) worker.credits = CreditsFor(worker);
      last_plan_nanos_ = 0;
    }
  }
  // A settling scheduler (just restarted) may not know every worker yet:
  // only add until it has heard from the whole pool.
  if (!grant.settling()) {
    for (size_t w = 0; w < named.size(); ++w) {
      const Worker& worker = workers_[w];
      if (!named[w] && worker.granted && worker.alive && !worker.retiring)
        Retire(static_cast<int>(w));
    }
  }
  UpdatePrefetch();
  Dispatch();
}

void Loader::Retire(int w) {
  Worker& worker = workers_[w];
  last_plan_nanos_ = 0;
  if (!worker.items.empty()) {
    spdlog::info("worker {} is no longer granted; it finishes its {} items and is closed",
                 worker.address, worker.items.size());
    worker.retiring = true;
    return;
  }
  spdlog::info("worker {} is no longer granted; closing its stream", worker.address);
  worker.alive = false;
  if (worker.stream) worker.stream->Close();
}

Loader::~Loader() {
  if (registration_) {  // its thread takes mu_: stop it first
    registration_->Stop();
    bool reachable;
    {
      absl::MutexLock lock(&mu_);
      reachable = scheduler_reachable_;
    }
    if (reachable) registration_->Release();  // else it would only wait out its deadline
  }
  std::vector<std::unique_ptr<RemoteWorker>> streams;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (Worker& w : workers_) {
      w.alive = false;  // handlers still running drop what they get
      if (w.stream) streams.push_back(std::move(w.stream));
    }
  }
  if (watchdog_.joinable()) watchdog_.join();
  // Cancelling joins each stream's threads; their handlers take mu_ and see
  // the streams gone. Then the pool: workers may still be writing into
  // in-flight batches.
  for (auto& s : streams) s->Cancel();
  streams.clear();
  if (pool_) pool_->Stop();
  absl::MutexLock lock(&mu_);
  for (Batch* b : in_flight_) delete b;
  in_flight_.clear();
}

int64_t Loader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples_per_epoch_ / b : (samples_per_epoch_ + b - 1) / b;
}

int Loader::PlacementOf(uint64_t epoch, int64_t index) const {
  if (placement_cdf_[0] >= 1) return -1;  // all local: no draw needed
  SampleRng rng(options_.seed, epoch, static_cast<uint64_t>(index), kPlacementStream);
  const double u = rng.Uniform();
  const int outcomes = static_cast<int>(placement_cdf_.size());
  for (int j = 0; j < outcomes - 1; ++j) {
    if (u < placement_cdf_[j]) return j - 1;
  }
  return outcomes - 2;
}

namespace {

// The largest relative change between two plan inputs, and what it was.
std::pair<double, std::string> Drift(const policy::PlanInput& a, const policy::PlanInput& b) {
  std::pair<double, std::string> worst = {0, ""};
  auto check = [&](double x, double y, const std::string& what) {
    const bool x_limited = x < 1e299, y_limited = y < 1e299;
    const double change = x_limited != y_limited ? 1 : x_limited ? RelativeChange(x, y) : 0;
    if (change > worst.first) worst = {change, what};
  };
  double la = 0, lb = 0, ra = 0, rb = 0;
  for (size_t i = 0; i < a.local_cost.size() && i < b.local_cost.size(); ++i) {
    la += a.local_cost[i];
    lb += b.local_cost[i];
    ra += a.remote_cost[i];
    rb += b.remote_cost[i];
    check(a.boundary_bytes[i], b.boundary_bytes[i], absl::StrCat("stage ", i, "'s output size"));
  }
  check(la, lb, "the local cost per sample");
  check(ra, rb, "the workers' cost per sample");
  check(a.local_cores, b.local_cores, "the local cores");
  check(a.remote_cores, b.remote_cores, "the remote cores");
  check(a.bandwidth, b.bandwidth, "the ingest bandwidth");
  check(a.demand, b.demand, "the demand");
  check(a.local_cost_per_byte, b.local_cost_per_byte, "the receive cost per byte");
  return worst;
}

}  // namespace

double Loader::LocalCores() const {
  // Re-read each time: a cgroup quota may change while the job runs.
  return std::min<double>(pool_->size(), EffectiveCpus());
}

void Loader::StartWarmUp() {
  double remote = 0;
  for (const Worker& w : workers_)
    remote += w.alive && w.opened && !w.retiring ? UsableCores(w) : 0;
  if (remote <= 0) return;
  const double local = LocalCores();
  const double local_share = local / (local + remote);
  // The cut with the fewest bytes the pipeline's types tell (the latest on a
  // tie, so more stages get measured remotely); local samples measure the
  // rest. The planner takes over once every stage is measured.
  const int n = pipeline_->num_stages();
  int cut = n;
  for (int k = n; k >= 1; --k) {
    const ValueType& t = pipeline_->boundary_type(k);
    if (t.fixed() && t.bytes() < pipeline_->boundary_type(cut).bytes()) cut = k;
  }
  for (size_t j = 0; j < placement_cdf_.size(); ++j)
    placement_cdf_[j] = static_cast<int>(j) <= cut ? local_share : 1.0;
  spdlog::info(
      "--offload auto: warming up with {:.0f}% of samples at cut {} ({:.2f} remote cores, "
      "{:.2f} here) until every stage is measured",
      100 * (1 - local_share), cut, remote, local);
}

void Loader::UpdateMeasurements(int64_t now) {
  auto fold = [](std::vector<SmoothedRatio>& cpu, std::vector<SmoothedRatio>& bytes,
                 const std::vector<StageStats>& stats) {
    if (cpu.empty()) {  // windows of 64 samples, a first estimate after 16
      cpu.assign(stats.size(), SmoothedRatio(64, 0.3, 16));
      bytes.assign(stats.size(), SmoothedRatio(64, 0.3, 16));
    }
    for (size_t i = 0; i < stats.size(); ++i) {
      cpu[i].Update(stats[i].cpu_seconds, static_cast<double>(stats[i].samples));
      bytes[i].Update(static_cast<double>(stats[i].output_bytes),
                      static_cast<double>(stats[i].samples));
    }
  };
  fold(measured_.local_cpu, measured_.local_bytes, stage_profiler_->Snapshot());
  fold(measured_.remote_cpu, measured_.remote_bytes, remote_profiler_->Snapshot());
  const StageStats read = read_profiler_->Snapshot()[0];
  measured_.read_cpu.Update(read.cpu_seconds, static_cast<double>(read.samples));
  double received = 0, receive_cpu = wire_copy_cpu_nanos_.load(std::memory_order_relaxed) * 1e-9;
  for (const Worker& w : workers_) {
    if (!w.stream) continue;
    received += static_cast<double>(w.stream->received_bytes());
    receive_cpu += w.stream->receive_cpu_nanos() * 1e-9;
  }
  measured_.receive_cpu_per_byte.Update(receive_cpu, received);
  measured_.demand.Update(static_cast<double>(images_), (now - start_nanos_ - wait_nanos_) * 1e-9);

  // Each worker's link: a worker that had every credit out yet spent little
  // CPU on our items was held back by the link or by our receiving. Only
  // when this process had CPU to spare is it the link, and what arrived is
  // what the link carries. The estimate only rises on evidence, so a plan
  // that stops filling the link does not forget it.
  const int64_t cpu_now = ProcessCpuNanos();
  const double window = (now - measure_window_nanos_) * 1e-9;
  if (measure_window_nanos_ == 0 || window < 1) {
    if (measure_window_nanos_ == 0) {
      measure_window_nanos_ = now;
      measure_window_cpu_nanos_ = cpu_now;
    }
    return;
  }
  const double here_busy = (cpu_now - measure_window_cpu_nanos_) * 1e-9 / (window * LocalCores());
  measure_window_nanos_ = now;
  measure_window_cpu_nanos_ = cpu_now;
  for (Worker& w : workers_) {
    const double seconds = (now - w.window_start_nanos) * 1e-9;
    if (!w.alive || w.window_start_nanos == 0 || seconds < 1 || w.window_results < 4) continue;
    const double rate = w.window_bytes / seconds;
    w.ingest_rate = rate;
    const double busy = w.window_cpu_seconds / (seconds * std::max(UsableCores(w), 0.01));
    const double saturated = static_cast<double>(w.window_saturated) / w.window_results;
    if (saturated >= 0.8 && busy < 0.6 && here_busy < 0.7) {
      if (w.link_limit == 0) {
        spdlog::info(
            "worker {}: its link binds at {:.1f} MB/s (every credit out, CPU {:.0f}% busy)",
            w.address, rate / 1e6, 100 * busy);
      }
      w.link_limit = w.link_limit > 0 ? 0.5 * (w.link_limit + rate) : rate;
    } else if (w.link_limit > 0 && rate > w.link_limit) {
      w.link_limit = rate;
    }
    w.window_start_nanos = now;
    w.window_bytes = 0;
    w.window_cpu_seconds = 0;
    w.window_results = w.window_saturated = 0;
  }
}

std::optional<policy::PlanInput> Loader::CurrentPlanInput() {
  const Measured& m = measured_;
  policy::PlanInput in;
  const size_t n = m.local_cpu.size();
  for (size_t i = 0; i < n; ++i) {
    const SmoothedRatio& lc = m.local_cpu[i];
    const SmoothedRatio& rc = m.remote_cpu[i + 1];
    if (!lc.known() && !rc.known()) return std::nullopt;  // nothing known about this stage yet
    const double local = lc.value_or(rc.value());
    in.local_cost.push_back(local);
    in.remote_cost.push_back(rc.value_or(local));
    in.boundary_bytes.push_back(m.local_bytes[i].known() ? m.local_bytes[i].value()
                                                         : m.remote_bytes[i + 1].value());
  }
  // Whoever runs stage 0 reads the file.
  const double read_local = m.read_cpu.value_or(0);
  in.local_cost[0] += read_local;
  in.remote_cost[0] += m.remote_cpu[0].value_or(read_local);
  in.local_cost_per_byte = m.receive_cpu_per_byte.value_or(kPriorReceiveCpuPerByte);
  in.remote_cost_per_byte = kAssumedSendCpuPerByte;
  // Capacities in cores the two sides may really use (quotas count).
  in.local_cores = LocalCores();
  double remote_cores = 0, links = 0;
  int alive = 0;
  bool every_link_binds = true;
  for (const Worker& w : workers_) {
    if (!w.alive || !w.opened || w.retiring) continue;
    remote_cores += UsableCores(w);
    ++alive;
    links += w.link_limit;
    every_link_binds = every_link_binds && w.link_limit > 0;
  }
  in.remote_cores = remote_cores;
  in.cores_per_worker = alive > 0 ? remote_cores / alive : 1;
  // The link is a limit only when every worker's is (any other can carry more).
  if (alive > 0 && every_link_binds) in.bandwidth = links;
  if (options_.bandwidth > 0) in.bandwidth = std::min(in.bandwidth, options_.bandwidth);
  // Demand: what the trainer consumes while it is not waiting for data.
  if (options_.demand > 0) {
    in.demand = options_.demand;
  } else if (m.demand.known() && m.demand.value() > 0) {
    in.demand = m.demand.value();
  }
  return in;
}

void Loader::MaybeReplan() {
  if (offload_.kind != OffloadMode::kAuto || images_ == 0 || workers_.empty()) return;
  const int64_t now = WallNanos();
  UpdateMeasurements(now);
  const std::optional<policy::PlanInput> in = CurrentPlanInput();
  if (!in) return;
  // On the period; sooner when a measurement drifted (but not more often than
  // a quarter period, so a noisy window cannot make it flap); at once when a
  // worker came or went (last_plan_nanos_ reset).
  const int64_t period = static_cast<int64_t>(options_.replan_seconds * 1e9);
  const auto [drift, what] = plan_input_ ? Drift(*plan_input_, *in) : std::make_pair(1.0, "");
  const int64_t since = now - last_plan_nanos_;
  const bool drifted = drift > options_.replan_drift && since >= period / 4;
  if (last_plan_nanos_ != 0 && since < period && !drifted) return;
  if (drifted && since < period) {
    spdlog::info("re-planning: {} moved {:.0f}%", what, 100 * drift);
  }
  last_plan_nanos_ = now;
  plan_input_ = in;
  auto plan = policy::MakePlan(*in);
  if (!plan.ok() || plan->throughput <= 0) {
    spdlog::debug("no plan yet: {}", plan.ok() ? "zero throughput" : plan.status().ToString());
    return;
  }
  // Outcomes: local (the plan's path 0), remote cut 0 (never planned), then
  // remote cuts 1..n.
  std::vector<double> cdf(plan->rate.size() + 1);
  double sum = plan->rate[0];
  cdf[0] = cdf[1] = sum / plan->throughput;
  for (size_t k = 1; k < plan->rate.size(); ++k)
    cdf[k + 1] = (sum += plan->rate[k]) / plan->throughput;
  cdf.back() = 1;
  // Hysteresis: keep the current split unless the new plan is clearly better
  // under the same measurements (near-ties between cuts are common, and
  // switching between them on noise gains nothing).
  if (plan_changes_ > 0) {
    std::vector<double> current(plan->rate.size());
    current[0] = placement_cdf_[1];  // local, and cut 0 (which plans never use)
    for (size_t k = 1; k < current.size(); ++k)
      current[k] = placement_cdf_[k + 1] - placement_cdf_[k];
    const absl::StatusOr<double> now_rate = policy::ThroughputOf(*in, current);
    if (now_rate.ok() && plan->throughput <= (1 + options_.replan_gain) * *now_rate) {
      plan_throughput_ = *now_rate;
      return;
    }
  }
  plan_throughput_ = plan->throughput;
  placement_cdf_ = cdf;
  plan_explanation_ = plan->explanation;
  ++plan_changes_;
  spdlog::info("plan {}: {}", plan_changes_, plan->explanation);
}

void Loader::TopUp() {
  while (static_cast<int>(in_flight_.size()) < prefetch_ &&
         next_epoch_ < options_.first_epoch + options_.epochs) {
    if (!order_ready_) {
      order_ = EpochOrder(dataset_->size(), options_.seed, static_cast<uint64_t>(next_epoch_),
                          options_.shuffle, options_.rank, options_.world_size);
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
      absl::MutexLock lock(&pool_of_batches_->mu);
      if (!pool_of_batches_->free.empty()) {
        batch = std::move(pool_of_batches_->free.back());
        pool_of_batches_->free.pop_back();
      }
    }
    // Only when the trainer keeps more batches than it hands back.
    if (!batch) {
      batch = std::make_unique<Batch>(pipeline_->output_type(), options_.batch_size,
                                      options_.batch_allocator);
    }
    batch->Reset(static_cast<uint64_t>(next_epoch_), next_number_,
                 absl::MakeConstSpan(order_.data() + next_offset_, static_cast<size_t>(take)));
    next_offset_ += take;
    ++next_number_;
    Batch* b = batch.release();
    in_flight_.push_back(b);
    // Remote samples go out in items of one cut each.
    std::map<int, Item> open_items;
    auto flush = [&](Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const uint64_t id = next_item_id_++;
      waiting_.push_back(id);
      items_.emplace(id, std::move(item));
      item = Item{b, {}, item.cut};
    };
    for (int64_t slot = 0; slot < take; ++slot) {
      const int cut = PlacementOf(b->epoch(), b->index_at(slot));
      if (cut < 0) {
        SubmitLocal(b, slot);
        continue;
      }
      auto [it, fresh] = open_items.try_emplace(cut, Item{b, {}, cut});
      it->second.slots.push_back(slot);
      if (static_cast<int>(it->second.slots.size()) == ItemSamples(cut)) flush(it->second);
    }
    for (auto& [cut, item] : open_items) {
      if (!item.slots.empty()) flush(item);
    }
  }
  Dispatch();
}

void Loader::Dispatch() {
  while (!waiting_.empty()) {
    int best = -1;
    int best_free = 0;
    bool any_alive = false;
    for (size_t w = 0; w < workers_.size(); ++w) {
      const Worker& worker = workers_[w];
      if (!worker.alive || !worker.opened || worker.retiring) continue;
      any_alive = true;
      const int free = FreeCredits(worker);
      if (free > best_free) {
        best = static_cast<int>(w);
        best_free = free;
      }
    }
    if (!any_alive) {
      // Nobody left to ask: everything waiting runs here.
      if (!all_workers_gone_logged_ && !workers_.empty()) {
        spdlog::warn("all workers are gone; continuing locally");
        all_workers_gone_logged_ = true;
      }
      for (uint64_t id : waiting_) {
        const Item& item = items_.at(id);
        for (int64_t slot : item.slots) SubmitLocal(item.batch, slot);
        items_.erase(id);
      }
      waiting_.clear();
      return;
    }
    if (best < 0) return;  // every worker is at its credit limit
    const uint64_t id = waiting_.front();
    waiting_.pop_front();
    items_.at(id).worker = best;
    SendItem(best, id);
  }
  MaybeHedge();  // nothing waits: an idle worker may back up a slow one
}

void Loader::SendItem(int w, uint64_t id) {
  Item& item = items_.at(id);
  Worker& worker = workers_[w];
  const int64_t now = WallNanos();
  (item.worker == w ? item.sent_nanos : item.hedge_sent_nanos) = now;
  if (worker.items.empty()) worker.last_heard_nanos = now;  // the clock starts now
  worker.items.push_back(id);
  proto::WorkItem msg;
  msg.set_item_id(id);
  msg.set_epoch(item.batch->epoch());
  msg.set_cut(item.cut);
  for (int64_t slot : item.slots) msg.add_indices(item.batch->index_at(slot));
  worker.stream->Send(std::move(msg));
}

void Loader::MaybeHedge() {
  if (options_.hedge_after <= 0 || !waiting_.empty()) return;
  auto usable = [](const Worker& w) { return w.alive && w.opened && !w.retiring; };
  // What an item should take: the fastest worker's smoothed latency.
  double typical = 0;
  for (const Worker& w : workers_) {
    if (usable(w) && w.latency > 0)
      typical = typical == 0 ? w.latency : std::min(typical, w.latency);
  }
  if (typical == 0) return;
  const int64_t now = WallNanos();
  const int64_t due = now - std::max<int64_t>(20'000'000, options_.hedge_after * typical * 1e9);
  while (true) {
    int idle = -1, most_free = 0;
    for (size_t w = 0; w < workers_.size(); ++w) {
      const int free = FreeCredits(workers_[w]);
      if (usable(workers_[w]) && free > most_free) {
        idle = static_cast<int>(w);
        most_free = free;
      }
    }
    if (idle < 0) return;
    uint64_t pick = 0;
    int64_t oldest = due;
    for (const auto& [id, item] : items_) {
      if (item.worker >= 0 && item.worker != idle && item.hedge < 0 && item.sent_nanos <= oldest) {
        oldest = item.sent_nanos;
        pick = id;
      }
    }
    if (pick == 0) return;
    Item& item = items_.at(pick);
    spdlog::debug("hedging item {}: {:.0f} ms on worker {}, copying it to {}", pick,
                  (now - item.sent_nanos) * 1e-6, workers_[item.worker].address,
                  workers_[idle].address);
    item.hedge = idle;
    ++hedged_;
    SendItem(idle, pick);
  }
}

void Loader::DropWorker(int w, const std::string& why) {
  Worker& worker = workers_[w];
  if (!worker.alive) return;
  worker.alive = false;
  worker.dropped_because = why;
  const std::string& address = worker.address;
  if (worker.granted) failed_nanos_[address] = WallNanos();
  if (!worker.items.empty()) {
    spdlog::warn("worker {} {}; handing its {} outstanding items to others", address, why,
                 worker.items.size());
  } else {
    spdlog::warn("worker {} {}", address, why);
  }
  // Back to the front of the queue, in their original order; an item with a
  // copy on another worker stays with that one.
  for (auto it = worker.items.rbegin(); it != worker.items.rend(); ++it) {
    Item& item = items_.at(*it);
    if (item.hedge == w) {
      item.hedge = -1;
      continue;
    }
    if (item.hedge >= 0) {
      item.worker = std::exchange(item.hedge, -1);
      item.sent_nanos = item.hedge_sent_nanos;
      continue;
    }
    item.worker = -1;
    waiting_.push_front(*it);
    ++reissued_;
  }
  worker.items.clear();
  worker.abandoned.clear();
  if (worker.stream) worker.stream->Cancel();
  last_plan_nanos_ = 0;  // the remote capacity changed: re-plan at the next batch
  Dispatch();
}

void Loader::OnResult(int w, std::shared_ptr<const ReceivedMessage> received) {
  const proto::ItemResult& result = received->message.result();
  Item item;
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    Worker& worker = workers_[w];
    worker.last_heard_nanos = WallNanos();
    auto it = items_.find(result.item_id());
    // Only a worker an item is assigned to (or copied to) may answer it, and
    // only first: anything else is a late answer from a worker given up on,
    // or the slower of a hedged pair, and is dropped.
    if (!worker.alive || it == items_.end() || (it->second.worker != w && it->second.hedge != w)) {
      // The slower copy of a hedged item: dropped, and its credit is free again.
      auto pos = std::find(worker.abandoned.begin(), worker.abandoned.end(), result.item_id());
      if (worker.alive && pos != worker.abandoned.end()) {
        worker.abandoned.erase(pos);
        Dispatch();
      }
      return;
    }
    item = std::move(it->second);
    items_.erase(it);
    const double took =
        (worker.last_heard_nanos - (item.worker == w ? item.sent_nanos : item.hedge_sent_nanos)) *
        1e-9;
    worker.latency = worker.latency == 0 ? took : 0.8 * worker.latency + 0.2 * took;
    if (item.hedge == w) ++hedge_wins_;
    const int other = item.worker == w ? item.hedge : item.worker;
    if (other >= 0) {
      // The loser no longer owes it, but holds its credit until it answers
      // (the worker counts it: sending past that would break the stream).
      Worker& loser = workers_[other];
      auto pos = std::find(loser.items.begin(), loser.items.end(), result.item_id());
      if (pos != loser.items.end()) {
        loser.items.erase(pos);
        loser.abandoned.push_back(result.item_id());
      }
      if (loser.retiring && loser.items.empty()) Retire(other);
    }
    // The measurement window of this worker (see UpdateMeasurements).
    if (worker.window_start_nanos == 0) worker.window_start_nanos = worker.last_heard_nanos;
    worker.window_bytes += static_cast<int64_t>(received->wire_bytes);
    ++worker.window_results;
    if (FreeCredits(worker) <= 0) ++worker.window_saturated;
    for (const proto::SampleResult& r : result.samples()) {
      worker.window_cpu_seconds += r.read_cpu_seconds();
      for (const auto& stage : r.stages()) worker.window_cpu_seconds += stage.cpu_seconds();
    }
    worker.samples += result.samples_size();
    worker.items.erase(std::find(worker.items.begin(), worker.items.end(), result.item_id()));
    address = worker.address;
    if (worker.retiring && worker.items.empty()) Retire(w);  // its last item: close it now
    Dispatch();                                              // its credit is free again
  }
  // The item is ours alone now, and its batch cannot be handed out before
  // every slot is finished: copy and finish without holding the lock.
  const int n = pipeline_->num_stages();
  bool done = false;
  auto fail = [&](int64_t slot, int64_t index, absl::Status status) {
    done |= item.batch->FinishError(slot, SampleError{index, dataset_->SamplePath(index), status});
  };
  for (size_t i = 0; i < item.slots.size(); ++i) {
    const int64_t slot = item.slots[i];
    const int64_t index = item.batch->index_at(slot);
    const proto::SampleResult* r = static_cast<int>(i) < result.samples_size()
                                       ? &result.samples(static_cast<int>(i))
                                       : nullptr;
    if (r == nullptr || r->index() != index) {
      fail(slot, index,
           absl::InternalError(absl::StrCat("worker ", address, " answered item ", result.item_id(),
                                            " with the wrong samples")));
      continue;
    }
    if (r->code() != 0) {
      fail(slot, index,
           absl::Status(static_cast<absl::StatusCode>(r->code()),
                        absl::StrCat("on worker ", address, ": ", r->error())));
      continue;
    }
    remote_profiler_->Record(0, static_cast<int64_t>(r->read_cpu_seconds() * 1e9), 0);
    for (int s = 0; s < r->stages_size(); ++s) {
      remote_profiler_->Record(s + 1, static_cast<int64_t>(r->stages(s).cpu_seconds() * 1e9),
                               r->stages(s).output_bytes());
    }
    if (item.cut == n) {
      // The finished tensor: one copy, from the receive buffer into its slot.
      const size_t size = received->payload_size(i);
      if (size != item.batch->sample_bytes()) {
        fail(slot, index,
             absl::InternalError(absl::StrCat("worker result has ", size, " bytes, expected ",
                                              item.batch->sample_bytes())));
        continue;
      }
      received->CopyPayload(i, item.batch->slot(slot));
      done |= item.batch->FinishOk(slot, r->label(),
                                   SampleHash(index, r->label(), item.batch->slot(slot), size),
                                   /*remote=*/true);
      continue;
    }
    // A sample bigger than its type allows is a worker bug or a forgery:
    // refused before anything is decoded from it.
    const int64_t bound = max_sample_bytes_[item.cut];
    if (static_cast<int64_t>(received->payload_size(i)) > bound) {
      fail(slot, index,
           absl::DataLossError(absl::StrCat("worker ", address, " sent ", received->payload_size(i),
                                            " bytes for one sample at cut ", item.cut, "; at most ",
                                            bound, " are possible")));
      continue;
    }
    const int sample = static_cast<int>(i);
    Batch* batch = item.batch;
    const int cut = item.cut;
    pool_->Submit([this, batch, slot, cut, received, sample](int thread) {
      RunSuffix(thread, batch, slot, cut, received, sample);
    });
  }
  if (done) {
    absl::MutexLock lock(&mu_);
    batch_done_.SignalAll();
  }
}

void Loader::OnClosed(int w, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  Worker& worker = workers_[w];
  if (!worker.alive) return;
  if (status.ok() && worker.items.empty() && end_nanos_ != 0) {
    return;  // our own Close() at the end of the run: a clean goodbye
  }
  if (!status.ok() && IsRefusal(status.code()) && worker.granted) {
    // A worker the scheduler chose, not the job: leave it out for good and
    // carry on with the others (its operator has something to fix).
    spdlog::error("granted worker {} refused the job, leaving it out: {}", worker.address,
                  SafeText(status.ToString()));
    refused_.insert(worker.address);
    DropWorker(w, "refused the job");
    batch_done_.SignalAll();
    return;
  }
  if (!status.ok() && IsRefusal(status.code())) {
    // Not a failure to route around: the job itself is wrong here.
    if (failure_.ok()) failure_ = status;
    spdlog::error("{}", SafeText(status.ToString()));
    worker.alive = false;
    batch_done_.SignalAll();
    return;
  }
  DropWorker(w, status.ok() ? std::string("ended the stream")
                : worker.opened
                    ? absl::StrCat("is gone (", SafeText(status.ToString()), ")")
                    : absl::StrCat("did not open the job (", SafeText(status.ToString()), ")"));
  batch_done_.SignalAll();
}

void Loader::WatchdogLoop() {
  const int64_t timeout = static_cast<int64_t>(options_.worker_timeout_seconds * 1e9);
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
    if (stopping_) break;
    const int64_t now = WallNanos();
    for (size_t w = 0; w < workers_.size(); ++w) {
      Worker& worker = workers_[w];
      if (worker.alive && !worker.items.empty() && now - worker.last_heard_nanos > timeout) {
        DropWorker(static_cast<int>(w), absl::StrFormat("was silent for %.1f s (--worker-timeout)",
                                                        (now - worker.last_heard_nanos) * 1e-9));
      } else if (worker.alive && !worker.opened &&
                 now - worker.added_nanos > options_.connect_timeout_seconds * 1e9) {
        DropWorker(static_cast<int>(w), absl::StrCat("did not open the job within ",
                                                     options_.connect_timeout_seconds, " s"));
      }
    }
    MaybeHedge();  // when no answers arrive, nothing else would look
  }
}

void Loader::SubmitLocal(Batch* batch, int64_t slot) {
  pool_->Submit([this, batch, slot](int thread) { RunSample(thread, batch, slot); });
}

void Loader::RunSample(int thread, Batch* batch, int64_t slot) {
  Workspace& ws = *workspaces_[thread];
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

void Loader::RunSuffix(int thread, Batch* batch, int64_t slot, int cut,
                       std::shared_ptr<const ReceivedMessage> received, int sample) {
  Workspace& ws = *workspaces_[thread];
  const proto::SampleResult& r = received->message.result().samples(sample);
  Sample s;
  s.epoch = batch->epoch();
  s.index = r.index();
  s.label = r.label();
  const int64_t cpu = ThreadCpuNanos();
  absl::Status status = FromWire(r.value(), received->payloads[sample], ws, s);
  wire_copy_cpu_nanos_.fetch_add(ThreadCpuNanos() - cpu, std::memory_order_relaxed);
  if (status.ok()) {
    status = pipeline_->Run(cut, pipeline_->num_stages(), s, ws, stage_profiler_.get(),
                            batch->slot(slot), batch->sample_bytes());
  }
  if (status.ok() && s.size != batch->sample_bytes()) {
    status = absl::InternalError("output size differs from the batch's");
  }
  bool done;
  if (status.ok()) {
    done = batch->FinishOk(slot, s.label, SampleHash(s.index, s.label, s.data, s.size),
                           /*remote=*/true);
  } else {
    done = batch->FinishError(slot, SampleError{s.index, dataset_->SamplePath(s.index), status});
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
      // The run is over: let the workers finish their streams cleanly.
      for (Worker& w : workers_) {
        if (w.alive && w.stream) w.stream->Close();
      }
      if (registration_) registration_->Kick();  // tell the scheduler it wants nothing now
    }
    return BatchPtr();
  }
  Batch* batch = in_flight_.front();
  while (!batch->complete() && failure_.ok()) batch_done_.Wait(&mu_);
  wait_nanos_ += WallNanos() - now;
  if (!failure_.ok()) return failure_;
  in_flight_.pop_front();

  std::vector<SampleError> errors = batch->Compact();
  for (SampleError& e : errors) {
    ++errors_;
    if (options_.on_error == OnError::kFail) {
      failure_ = absl::Status(e.status.code(), absl::StrCat(e.path, ": ", e.status.message()));
      spdlog::error("sample {} failed, stopping (--on-error fail): {}", e.index,
                    SafeText(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      delete batch;
      end_nanos_ = WallNanos();
      end_cpu_nanos_ = ProcessCpuNanos();
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
  for (uint64_t h : batch->hashes()) checksum_.Add(h);
  images_ += batch->size();
  remote_images_ += batch->remote_samples();
  bytes_ += batch->bytes();
  ++batches_;
  MaybeReplan();
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
    st.remote_images = remote_images_;
    st.local_images = images_ - remote_images_;
    st.errors = errors_;
    st.batches = batches_;
    st.bytes = bytes_;
    const int64_t end = end_nanos_ != 0 ? end_nanos_ : WallNanos();
    st.seconds = start_nanos_ != 0 ? (end - start_nanos_) * 1e-9 : 0;
    const int64_t end_cpu = end_cpu_nanos_ != 0 ? end_cpu_nanos_ : ProcessCpuNanos();
    st.cpu_seconds = start_nanos_ != 0 ? (end_cpu - start_cpu_nanos_) * 1e-9 : 0;
    st.wait_seconds = wait_nanos_ * 1e-9;
    st.first_errors = first_errors_;
    st.reissued_items = reissued_;
    st.hedged_items = hedged_;
    st.hedge_wins = hedge_wins_;
    st.offload = OffloadModeString(offload_);
    st.plan = plan_explanation_;
    st.plan_changes = plan_changes_;
    double prev = 0;
    for (double c : placement_cdf_) {
      st.plan_fractions.push_back(c - prev);
      prev = c;
    }
    st.plan_throughput = plan_throughput_;
    st.receive_cpu_per_byte = measured_.receive_cpu_per_byte.value_or(0);
    if (plan_input_ && plan_input_->bandwidth < 1e299) st.ingest_limit = plan_input_->bandwidth;
    // One entry per address: a worker granted again after it was closed has
    // a second stream, and both count.
    std::map<std::string, size_t> by_address;
    for (const Worker& worker : workers_) {
      auto [it, fresh] = by_address.try_emplace(worker.address, st.workers.size());
      if (fresh) st.workers.emplace_back().address = worker.address;
      LoaderStats::WorkerStats& ws = st.workers[it->second];
      const bool alive = worker.alive && worker.opened && !worker.retiring;
      ws.alive = ws.alive || alive;
      ++ws.streams;
      if (alive && worker.granted) ws.granted_cores = worker.granted_cores;
      ws.received_bytes += worker.stream ? worker.stream->received_bytes() : 0;
      ws.samples += worker.samples;
      ws.link_limit = std::max(ws.link_limit, worker.link_limit);
      if (worker.alive) ws.ingest_rate = worker.ingest_rate;
    }
    st.workers_total = static_cast<int>(st.workers.size());
    for (const LoaderStats::WorkerStats& ws : st.workers) {
      st.workers_alive += ws.alive ? 1 : 0;
      st.granted_cores += ws.granted_cores;
    }
    st.scheduler = options_.scheduler;
    st.scheduler_reachable = scheduler_reachable_;
    st.wanted_cores = wanted_cores_;
    st.fair_share_cores = fair_share_cores_;
  }
  st.checksum = checksum_.value();
  st.stages = read_profiler_->Snapshot();
  for (StageStats& s : stage_profiler_->Snapshot()) st.stages.push_back(std::move(s));
  st.remote_stages = remote_profiler_->Snapshot();
  return st;
}

}  // namespace prepflow
