#include "client/remote/remote_pool.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"
#include "pipeline/core/rng.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

bool IsRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kPermissionDenied ||
         code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnauthenticated ||
         code == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

RemotePool::RemotePool(const RemotePoolOptions& options, proto::JobOpen open, StreamFactory factory,
                       Callbacks callbacks, Clock clock)
    : options_(options),
      open_(std::move(open)),
      factory_(std::move(factory)),
      callbacks_(std::move(callbacks)),
      clock_(std::move(clock)),
      steal_(options.steal_from_busy_homes),
      redial_(options.static_redial_seconds, options.static_redial_max_seconds) {}

RemotePool::~RemotePool() { Stop(); }

int RemotePool::Add(const std::string& address, const std::string& worker_id, double granted_cores,
                    const std::string& tls_name) {
  absl::MutexLock lock(&mu_);
  return AddLocked(address, worker_id, granted_cores, tls_name);
}

int RemotePool::AddLocked(const std::string& address, const std::string& worker_id,
                          double granted_cores, const std::string& tls_name) {
  if (stopping_) return -1;
  const int id = static_cast<int>(workers_.size());
  WorkerStream::Handlers handlers;
  handlers.opened = [this, id](const proto::JobOpened& opened) { OnOpened(id, opened); };
  handlers.result = [this, id](std::shared_ptr<const ReceivedMessage> answer) {
    OnResult(id, std::move(answer));
  };
  handlers.draining = [this, id](double seconds) { OnDraining(id, seconds); };
  handlers.probe = [this, id](int64_t bytes, int count) { OnProbe(id, bytes, count); };
  handlers.closed = [this, id](const absl::Status& status) { OnClosed(id, status); };
  Worker& worker = workers_.emplace_back();
  worker.member.id = id;
  worker.member.address = address;
  worker.key = Mix64(std::hash<std::string>()(address));
  worker.member.worker_id = worker_id;
  worker.member.alive = true;
  worker.member.granted_cores = granted_cores;
  worker.added_nanos = clock_();
  worker.stream = factory_(address, tls_name, std::move(handlers));
  // Started under the lock: Stop() cannot take the stream away meanwhile,
  // and its handlers (which take the lock) run only once this returns.
  if (probing_) {
    worker.stream->Start(open_);
  } else {  // see AwaitOpened
    proto::JobOpen open = open_;
    open.clear_probe_bytes();
    worker.stream->Start(open);
  }
  return id;
}

absl::Status RemotePool::AwaitOpened(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!refusal_.ok()) return true;
    for (const Worker& w : workers_) {
      if (w.member.alive && !w.member.opened) return false;
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (!refusal_.ok()) return refusal_;
  // The probes cross the links while nothing else does and this process is
  // idle, so their chunks are timed as they arrive (a busy process takes
  // them late and together, and times a rate above its link's).
  auto probed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ProbedLocked(); };
  if (open_.probe_bytes() > 0) {
    mu_.AwaitWithDeadline(absl::Condition(&probed),
                          std::min(deadline, absl::Now() + absl::Seconds(kProbeWaitSeconds)));
  }
  // A worker that joins later would be probed while this process is busy:
  // its chunks would be timed late and together.
  probing_ = false;
  int credits = 0;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].member.alive && !workers_[w].member.opened) {
      Drop(static_cast<int>(w),
           absl::StrCat("did not open the job within ", options_.connect_timeout_seconds, " s"));
    }
    if (workers_[w].member.usable()) credits += workers_[w].credits;
  }
  // The caller says how the job runs without workers.
  if (credits == 0) all_gone_logged_ = true;
  return absl::OkStatus();
}

double RemotePool::UsableCores(const Worker& w) const {
  return w.member.worker_id.empty() ? w.cores * options_.static_share
                                    : std::min(w.cores, w.member.granted_cores);
}

int RemotePool::CreditsFor(const Worker& w) const {
  // A grant of part of a worker: ask for that part of its credits, so that
  // jobs sharing it get its cores in proportion to their grants.
  if (w.member.worker_id.empty() || w.cores <= 0) return w.max_credits;
  return std::max(1, static_cast<int>(std::ceil(w.max_credits * UsableCores(w) / w.cores)));
}

void RemotePool::OnOpened(int w, const proto::JobOpened& opened) {
  absl::MutexLock lock(&mu_);
  Worker& worker = workers_[w];
  if (stopping_ || !worker.member.alive) return;
  worker.member.opened = true;
  worker.max_credits = std::max(1, opened.max_items_in_flight());
  if (opened.max_item_bytes() > 0) {
    item_bytes_limit_ = std::min(item_bytes_limit_, opened.max_item_bytes());
  }
  worker.cores = opened.cores() > 0 ? opened.cores() : opened.threads();
  worker.cache_bytes = std::max<int64_t>(0, opened.cache_bytes());
  if (!opened.unavailable().empty()) {
    worker.stages = std::max(0, opened.num_stages());
    worker.unavailable = SafeText(opened.unavailable());
    spdlog::warn("worker {} runs stages [0, {}) of job {} only ({}): the stages after run here",
                 worker.member.address, worker.stages, open_.job_id(), worker.unavailable);
  }
  worker.credits = CreditsFor(worker);
  worker.last_heard_nanos = clock_();
  const bool granted = !worker.member.worker_id.empty();
  spdlog::info("worker {} ({}) opened job {}: {} threads, {} of its {} items in flight{}",
               worker.member.address, SafeText(opened.worker_id()), open_.job_id(),
               opened.threads(), worker.credits, worker.max_credits,
               granted ? absl::StrFormat(" (granted %.2f cores)", worker.member.granted_cores)
                       : std::string());
  // A worker that joins mid-run: its credits are usable at once.
  all_gone_logged_ = false;
  if (callbacks_.changed) callbacks_.changed();
  Dispatch();
}

void RemotePool::OnProbe(int w, int64_t bytes, int count) {
  absl::MutexLock lock(&mu_);
  Worker& worker = workers_[w];
  if (worker.probe.done()) return;
  worker.probe.Arrived(clock_(), static_cast<double>(bytes), count);
  if (!worker.probe.done()) return;
  spdlog::info("worker {}: its link probe came at {:.1f} MB/s ({})", worker.member.address,
               worker.probe.rate() / 1e6,
               worker.probe.steady() ? "steady: the link's rate"
                                     : "unsteady: what the link carries at least");
}

void RemotePool::Submit(RemoteItem item) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_item_id_++;
  items_.emplace(id, Pending{std::move(item)});
  queued_.push_back(id);
  Dispatch();
}

void RemotePool::RunHere(std::map<uint64_t, Pending>::iterator it) {
  if (callbacks_.run_locally) callbacks_.run_locally(std::move(it->second.item));
  items_.erase(it);
}

bool RemotePool::AnyWorkerCaches() const {
  absl::MutexLock lock(&mu_);
  return AnyCachesLocked();
}

void RemotePool::StopStealing() {
  absl::MutexLock lock(&mu_);
  steal_ = false;
}

bool RemotePool::AnyCachesLocked() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const Worker& w) { return w.member.usable() && w.cache_bytes > 0; });
}

bool RemotePool::Locality() const {
  // Echoed copies of a sample go where its first copy's value is kept.
  return open_.echo() > 1 || AnyCachesLocked();
}

int RemotePool::HomeLocked(int64_t index, int cut) const {
  // Weighted rendezvous hashing: every worker draws a score for the sample
  // from (its key, the index), scaled by its cores; the highest wins.
  int home = -1;
  double best = 0;
  const uint64_t sample = Mix64(static_cast<uint64_t>(index));
  for (size_t w = 0; w < workers_.size(); ++w) {
    const Worker& worker = workers_[w];
    if (!worker.member.usable() || worker.stages < cut) continue;
    const double u = (static_cast<double>(Mix64(worker.key ^ sample) >> 11) + 0.5) * 0x1.0p-53;
    const double score = -std::max(UsableCores(worker), 1e-3) / std::log(u);
    if (home < 0 || score > best) {
      home = static_cast<int>(w);
      best = score;
    }
  }
  return home;
}

int RemotePool::HomeOf(int64_t index, int cut) const {
  absl::MutexLock lock(&mu_);
  return Locality() ? HomeLocked(index, cut) : -1;
}

int RemotePool::TargetOf(RemoteItem& item, bool locality, bool* capable) {
  if (locality) {
    const bool home_ok = item.home >= 0 && item.home < static_cast<int>(workers_.size()) &&
                         workers_[item.home].member.usable() &&
                         workers_[item.home].stages >= item.cut;
    // A lost home: its samples move to theirs among the rest.
    if (!home_ok) item.home = HomeLocked(item.batch->index_at(item.slots.front()), item.cut);
    *capable = item.home >= 0;
    return item.home >= 0 && FreeCredits(workers_[item.home]) > 0 ? item.home : -1;
  }
  int best = -1, best_free = 0;
  *capable = false;
  for (size_t w = 0; w < workers_.size(); ++w) {
    const Worker& worker = workers_[w];
    // A worker that lacks a stage's op (JobOpened.unavailable) takes no
    // item cut past it.
    if (!worker.member.usable() || worker.stages < item.cut) continue;
    *capable = true;
    const int free = FreeCredits(worker);
    if (free > best_free) {
      best = static_cast<int>(w);
      best_free = free;
    }
  }
  return best;
}

void RemotePool::Dispatch() {
  const bool any_usable = std::any_of(workers_.begin(), workers_.end(),
                                      [](const Worker& w) { return w.member.usable(); });
  if (!any_usable && !queued_.empty()) {
    // Nobody left to ask: everything queued runs here.
    if (!all_gone_logged_ && !workers_.empty()) {
      spdlog::warn("all workers are gone; continuing locally");
      all_gone_logged_ = true;
    }
    for (uint64_t queued : queued_) RunHere(items_.find(queued));
    queued_.clear();
    return;
  }
  const bool locality = Locality();
  for (auto q = queued_.begin(); q != queued_.end();) {
    const uint64_t id = *q;
    const auto it = items_.find(id);
    bool capable = false;
    const int target = TargetOf(it->second.item, locality, &capable);
    if (!capable) {
      // Cut past what every worker left can run (the loader cuts new items
      // at StageLimit(); this one was cut before such a worker came): here.
      q = queued_.erase(q);
      RunHere(it);
      continue;
    }
    if (target < 0) {
      if (!locality) return;  // every worker is at its credit limit
      ++q;                    // waits for its home; items of other homes may go
      continue;
    }
    q = queued_.erase(q);
    it->second.worker = target;
    Send(target, id);
  }
  if (locality && steal_ && !queued_.empty()) Steal();
  MaybeHedge();  // nothing is queued: an idle worker may back up a slow one
}

void RemotePool::Steal() {
  // Every worker with a free credit now has nothing of its own queued (the
  // pass above sent it), while items wait for a busy home: it takes them.
  // Homes give way only where reads are cheap
  // (options.steal_from_busy_homes): an item run away from its home loads
  // its value again (a read and the stages before the echo or cache
  // boundary), which costs less than a worker idle while its peer's queue
  // grows (a sample's hash makes its home, so any batch deals the workers
  // unequal shares). Send marks it away (WorkItem.away), so the thief's
  // cache keeps none of it: those values belong in their home's.
  for (auto q = queued_.begin(); q != queued_.end();) {
    const uint64_t id = *q;
    const auto it = items_.find(id);
    bool capable = false;
    const int target = TargetOf(it->second.item, /*locality=*/false, &capable);
    if (target < 0) {
      ++q;
      continue;
    }
    q = queued_.erase(q);
    it->second.worker = target;
    ++counters_.stolen_items;
    Send(target, id);
  }
}

bool RemotePool::ProbedLocked() const {
  if (open_.probe_bytes() <= 0) return false;
  bool any = false;
  for (const Worker& w : workers_) {
    if (!w.member.usable()) continue;
    if (!w.probe.done()) return false;
    any = true;
  }
  return any;
}

bool RemotePool::Probed() const {
  absl::MutexLock lock(&mu_);
  return ProbedLocked();
}

int64_t RemotePool::ReclaimQueued() {
  absl::MutexLock lock(&mu_);
  int64_t reclaimed = 0;
  for (auto q = queued_.begin(); q != queued_.end();) {
    const auto it = items_.find(*q);
    if (it->second.item.home >= 0) {  // its samples' values are kept there
      ++q;
      continue;
    }
    q = queued_.erase(q);
    RunHere(it);
    ++reclaimed;
  }
  return reclaimed;
}

void RemotePool::Send(int w, uint64_t id) {
  Pending& p = items_.at(id);
  Worker& worker = workers_[w];
  const int64_t now = clock_();
  (p.worker == w ? p.sent_nanos : p.hedge_sent_nanos) = now;
  if (worker.items.empty()) worker.last_heard_nanos = now;  // the clock starts now
  worker.items.push_back(id);
  proto::WorkItem msg;
  msg.set_item_id(id);
  msg.set_epoch(p.item.batch->epoch());
  msg.set_cut(p.item.cut);
  // Stolen or hedged: its samples' values are kept at their home, not here.
  if (p.item.home >= 0 && p.item.home != w) msg.set_away(true);
  bool echoed = false;
  for (int64_t slot : p.item.slots) {
    msg.add_indices(p.item.batch->index_at(slot));
    msg.add_copies(p.item.batch->copy_at(slot));
    echoed |= p.item.batch->copy_at(slot) != 0;
  }
  if (!echoed) msg.clear_copies();
  // The epoch's echo factor (with --echo auto, below the job's cap): how
  // many copies the worker keeps a loaded value for.
  if (open_.echo() > 1) msg.set_echo(static_cast<uint32_t>(p.item.batch->echo()));
  worker.stream->Send(std::move(msg));
}

void RemotePool::MaybeHedge() {
  if (options_.hedge_after <= 0 || !queued_.empty()) return;
  // What an item should take: the fastest worker's smoothed latency.
  double typical = 0;
  for (const Worker& w : workers_) {
    if (w.member.usable() && w.latency > 0)
      typical = typical == 0 ? w.latency : std::min(typical, w.latency);
  }
  if (typical == 0) return;
  const int64_t now = clock_();
  const int64_t due = now - std::max<int64_t>(20'000'000, options_.hedge_after * typical * 1e9);
  while (true) {
    int idle = -1, most_free = 0;
    for (size_t w = 0; w < workers_.size(); ++w) {
      const int free = FreeCredits(workers_[w]);
      if (workers_[w].member.usable() && free > most_free) {
        idle = static_cast<int>(w);
        most_free = free;
      }
    }
    if (idle < 0) return;
    uint64_t pick = 0;
    int64_t oldest = due;
    for (const auto& [id, p] : items_) {
      if (p.worker >= 0 && p.worker != idle && p.hedge < 0 && p.sent_nanos <= oldest &&
          p.item.cut <= workers_[idle].stages) {
        oldest = p.sent_nanos;
        pick = id;
      }
    }
    if (pick == 0) return;
    Pending& p = items_.at(pick);
    spdlog::debug("hedging item {}: {:.0f} ms on worker {}, copying it to {}", pick,
                  (now - p.sent_nanos) * 1e-6, workers_[p.worker].member.address,
                  workers_[idle].member.address);
    p.hedge = idle;
    ++counters_.hedged_items;
    Send(idle, pick);
  }
}

void RemotePool::Drop(int w, const std::string& why) {
  Worker& worker = workers_[w];
  if (!worker.member.alive) return;
  worker.member.alive = false;
  worker.member.dropped_because = why;
  worker.member.dropped_nanos = clock_();
  const std::string& address = worker.member.address;
  std::string again;
  if (worker.member.worker_id.empty() && !finished_) {
    again =
        absl::StrFormat("; dialling it again in %.0f s",
                        redial_.Failed(address, worker.member.opened, worker.member.dropped_nanos));
  }
  if (!worker.items.empty()) {
    spdlog::warn("worker {} {}; handing its {} outstanding items to others{}", address, why,
                 worker.items.size(), again);
  } else {
    spdlog::warn("worker {} {}{}", address, why, again);
  }
  // Back to the front of the queue, in their original order; an item with a
  // copy on another worker stays with that one.
  for (auto it = worker.items.rbegin(); it != worker.items.rend(); ++it) {
    Pending& p = items_.at(*it);
    if (p.hedge == w) {
      p.hedge = -1;
      continue;
    }
    if (p.hedge >= 0) {
      p.worker = std::exchange(p.hedge, -1);
      p.sent_nanos = p.hedge_sent_nanos;
      continue;
    }
    p.worker = -1;
    queued_.push_front(*it);
    ++counters_.reissued_items;
  }
  worker.items.clear();
  worker.abandoned.clear();
  if (worker.stream) worker.stream->Cancel();
  if (callbacks_.changed) callbacks_.changed();
  Dispatch();
}

void RemotePool::CountAnswer(Worker& worker, const ReceivedMessage& answer) {
  ++worker.results;
  if (FreeCredits(worker) <= 0) ++worker.saturated_results;
  const double busy = answer.message.result().worker_busy();
  worker.worker_busy = std::isfinite(busy) ? std::clamp(busy, 0.0, 1.0) : 0;
  worker.answer_bytes += static_cast<double>(answer.wire_bytes);
  const double run = answer.message.result().run_seconds();
  if (std::isfinite(run) && run > 0) worker.run_seconds += std::min(run, 3600.0);
  for (const proto::SampleResult& r : answer.message.result().samples()) {
    worker.cpu_seconds += r.read_cpu_seconds();
    for (const auto& stage : r.stages()) worker.cpu_seconds += stage.cpu_seconds();
  }
}

bool RemotePool::TakeAnswer(int w, const ReceivedMessage& answer, Pending* out) {
  const uint64_t id = answer.message.result().item_id();
  Worker& worker = workers_[w];
  const int64_t now = clock_();
  worker.last_heard_nanos = now;
  auto it = items_.find(id);
  // Only a worker an item is assigned to (or copied to) may answer it, and
  // only first: anything else is a late answer from a worker given up on,
  // or the slower of a hedged pair, and is dropped.
  if (!worker.member.alive || it == items_.end() ||
      (it->second.worker != w && it->second.hedge != w)) {
    // The slower copy of a hedged item: its credit is free again.
    auto pos = std::find(worker.abandoned.begin(), worker.abandoned.end(), id);
    if (worker.member.alive && pos != worker.abandoned.end()) {
      CountAnswer(worker, answer);
      worker.abandoned.erase(pos);
      Dispatch();
    }
    return false;
  }
  *out = std::move(it->second);
  items_.erase(it);
  const double took = (now - (out->worker == w ? out->sent_nanos : out->hedge_sent_nanos)) * 1e-9;
  worker.latency = worker.latency == 0 ? took : 0.8 * worker.latency + 0.2 * took;
  if (out->hedge == w) ++counters_.hedge_wins;
  const int other = out->worker == w ? out->hedge : out->worker;
  if (other >= 0) {
    // The loser no longer owes it, but holds its credit until it answers
    // (the worker counts it: sending past that would break the stream).
    Worker& loser = workers_[other];
    auto pos = std::find(loser.items.begin(), loser.items.end(), id);
    if (pos != loser.items.end()) {
      loser.items.erase(pos);
      loser.abandoned.push_back(id);
    }
    if (loser.member.retiring && loser.items.empty())
      RetireLocked(other, "has answered its last item");
  }
  CountAnswer(worker, answer);
  worker.member.samples += answer.message.result().samples_size();
  worker.items.erase(std::find(worker.items.begin(), worker.items.end(), id));
  if (worker.member.retiring && worker.items.empty()) {
    RetireLocked(w, "has answered its last item");
  }
  Dispatch();  // its credit is free again
  return true;
}

void RemotePool::OnResult(int w, std::shared_ptr<const ReceivedMessage> answer) {
  Pending taken;
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    if (!TakeAnswer(w, *answer, &taken)) return;
    address = workers_[w].member.address;
    delivering_.fetch_add(1, std::memory_order_relaxed);
  }
  // The item is the caller's alone now.
  if (callbacks_.result) callbacks_.result(std::move(taken.item), std::move(answer), address);
  delivering_.fetch_sub(1, std::memory_order_release);
}

int64_t RemotePool::owed_items() const {
  absl::MutexLock lock(&mu_);
  // Only what someone holds: an item in items_ that is neither queued nor
  // out at a live worker is lost, and must not count.
  int64_t owed = static_cast<int64_t>(queued_.size()) + delivering_.load(std::memory_order_acquire);
  for (const Worker& w : workers_) {
    if (w.member.alive) owed += static_cast<int64_t>(w.items.size());
  }
  return owed;
}

void RemotePool::OnClosed(int w, const absl::Status& status) {
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    Worker& worker = workers_[w];
    if (!worker.member.alive) return;
    if (status.ok() && worker.items.empty() && finished_) {
      return;  // our own Close() at the end of the run: a clean goodbye
    }
    const bool granted = !worker.member.worker_id.empty();
    if (!status.ok() && IsRefusal(status.code()) && granted) {
      // A worker the scheduler chose, not the job: leave it out for good and
      // carry on with the others (its operator has something to fix).
      spdlog::error("granted worker {} refused the job, leaving it out: {}", worker.member.address,
                    SafeText(status.ToString()));
      worker.member.refused = true;
      Drop(w, "refused the job");
      return;
    }
    if (!status.ok() && IsRefusal(status.code())) {
      // Not a failure to route around: the job itself is wrong here.
      spdlog::error("{}", SafeText(status.ToString()));
      worker.member.alive = false;
      worker.member.dropped_because = "refused the job";
      if (refusal_.ok()) refusal_ = status;
      refusal = status;
    } else {
      Drop(w, status.ok() ? std::string("ended the stream")
              : worker.member.opened
                  ? absl::StrCat("is gone (", SafeText(status.ToString()), ")")
                  : absl::StrCat("did not open the job (", SafeText(status.ToString()), ")"));
    }
  }
  if (!refusal.ok() && callbacks_.failed) callbacks_.failed(refusal);
}

void RemotePool::Tick() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const int64_t timeout = static_cast<int64_t>(options_.worker_timeout_seconds * 1e9);
  const int64_t now = clock_();
  for (size_t w = 0; w < workers_.size(); ++w) {
    Worker& worker = workers_[w];
    if (worker.member.alive && !worker.items.empty() && now - worker.last_heard_nanos > timeout) {
      Drop(static_cast<int>(w), absl::StrFormat("was silent for %.1f s (--worker-timeout)",
                                                (now - worker.last_heard_nanos) * 1e-9));
    } else if (worker.member.alive && !worker.member.opened &&
               now - worker.added_nanos > options_.connect_timeout_seconds * 1e9) {
      Drop(static_cast<int>(w),
           absl::StrCat("did not open the job within ", options_.connect_timeout_seconds, " s"));
    }
  }
  if (!finished_) {
    for (const std::string& address : redial_.Due(now)) {
      spdlog::info("dialling worker {} again", address);
      AddLocked(address, "", 0, "");
    }
  }
  MaybeHedge();  // when no answers arrive, nothing else would look
}

void RemotePool::StartWatchdog() {
  watchdog_ = std::thread([this] {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
        if (stopping_) return;
      }
      Tick();
    }
  });
}

void RemotePool::Finish() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
  for (Worker& w : workers_) {
    if (w.member.alive && w.stream) w.stream->Close();
  }
}

void RemotePool::Stop() {
  std::vector<std::unique_ptr<WorkerStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (Worker& w : workers_) {
      w.member.alive = false;  // handlers still running drop what they get
      if (!w.stream) continue;
      w.member.received_bytes = w.stream->received_bytes();
      streams.push_back(std::move(w.stream));
    }
  }
  if (watchdog_.joinable()) watchdog_.join();
  // Cancelling joins each stream's threads; their handlers take mu_ and see
  // the pool stopping.
  for (auto& s : streams) s->Cancel();
  streams.clear();
}

std::vector<RemotePool::Member> RemotePool::Members() const {
  absl::MutexLock lock(&mu_);
  std::vector<Member> out;
  for (const Worker& w : workers_) {
    out.push_back(w.member);
    if (w.stream) out.back().received_bytes = w.stream->received_bytes();
  }
  return out;
}

bool RemotePool::MayDial(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_();
  for (const Worker& w : workers_) {
    if (w.member.address != address) continue;
    if (w.member.refused) return false;
    if (w.member.dropped_nanos != 0 && !w.member.worker_id.empty() &&
        now - w.member.dropped_nanos < options_.redial_after_seconds * 1e9) {
      return false;
    }
  }
  return true;
}

void RemotePool::SetGrantedCores(int id, double cores) {
  absl::MutexLock lock(&mu_);
  Worker& worker = workers_[id];
  if (worker.member.granted_cores == cores) return;
  worker.member.granted_cores = cores;
  if (worker.member.opened) worker.credits = CreditsFor(worker);
  if (callbacks_.changed) callbacks_.changed();
  Dispatch();
}

void RemotePool::Retire(int id) {
  absl::MutexLock lock(&mu_);
  if (workers_[id].member.alive && !workers_[id].member.retiring) {
    RetireLocked(id, "is no longer granted");
  }
}

void RemotePool::OnDraining(int w, double seconds) {
  absl::MutexLock lock(&mu_);
  Worker& worker = workers_[w];
  if (worker.member.draining) return;
  worker.member.draining = true;
  ++counters_.drained_workers;
  if (!worker.member.alive || worker.member.retiring) return;
  RetireLocked(w, absl::StrFormat("is draining (it stays %.0f s)", seconds));
}

void RemotePool::RetireLocked(int w, const std::string& why) {
  Worker& worker = workers_[w];
  if (callbacks_.changed) callbacks_.changed();
  if (!worker.items.empty()) {
    spdlog::info("worker {} {}; it finishes its {} items and is closed", worker.member.address, why,
                 worker.items.size());
    worker.member.retiring = true;
    return;
  }
  spdlog::info("worker {} {}; closing its stream", worker.member.address, why);
  worker.member.alive = false;
  if (worker.stream) worker.stream->Close();
  // A static worker that drained was a process leaving: one started again
  // at its address rejoins.
  if (worker.member.draining && worker.member.worker_id.empty() && !finished_) {
    redial_.Failed(worker.member.address, /*opened=*/true, clock_());
  }
}

void RemotePool::Keep(int id) {
  absl::MutexLock lock(&mu_);
  Worker& worker = workers_[id];
  if (!worker.member.retiring || worker.member.draining) return;  // a leaving worker stays gone
  spdlog::info("worker {} is granted again; keeping it", worker.member.address);
  worker.member.retiring = false;
  Dispatch();
}

int RemotePool::UsableCredits() const {
  absl::MutexLock lock(&mu_);
  int credits = 0;
  for (const Worker& w : workers_) credits += w.member.usable() ? w.credits : 0;
  return credits;
}

double RemotePool::UsableCores() const {
  absl::MutexLock lock(&mu_);
  double cores = 0;
  for (const Worker& w : workers_) cores += w.member.usable() ? UsableCores(w) : 0;
  return cores;
}

int RemotePool::StageLimit() const {
  absl::MutexLock lock(&mu_);
  int limit = std::numeric_limits<int>::max();
  for (const Worker& w : workers_) {
    if (w.member.usable()) limit = std::min(limit, w.stages);
  }
  return limit;
}

int64_t RemotePool::item_bytes_limit() const {
  absl::MutexLock lock(&mu_);
  return item_bytes_limit_;
}

void RemotePool::FillSnapshot(policy::Snapshot* snapshot) const {
  absl::MutexLock lock(&mu_);
  for (const Worker& w : workers_) {
    policy::WorkerTotals& t = snapshot->workers.emplace_back();
    t.id = w.member.id;
    t.name = w.member.address;
    t.usable = w.member.usable();
    t.cores = UsableCores(w);
    t.received_bytes = w.answer_bytes;
    t.cpu_seconds = w.cpu_seconds;
    t.results = w.results;
    t.saturated_results = w.saturated_results;
    t.run_seconds = w.run_seconds;
    t.credits = w.credits;
    t.worker_busy = w.worker_busy;
    t.probe = w.probe;
    if (t.usable && w.stages < std::numeric_limits<int>::max() &&
        (snapshot->max_cut < 0 || w.stages < snapshot->max_cut)) {
      snapshot->max_cut = w.stages;
      snapshot->max_cut_why = absl::StrCat(w.member.address, ": ", w.unavailable);
    }
    if (!w.stream) continue;
    snapshot->received_bytes += static_cast<double>(w.stream->received_bytes());
    snapshot->receive_cpu_seconds += w.stream->receive_cpu_nanos() * 1e-9;
  }
}

RemotePool::Counters RemotePool::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace prepflow
