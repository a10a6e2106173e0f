#include "scheduler/scheduler_core.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/text.h"
#include "net/security.h"
#include "spdlog/spdlog.h"

namespace prepflow::scheduler {
namespace {

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

constexpr size_t kLeaseHexDigits = 32;

// `n` bytes from the kernel's CSPRNG: leases and keys are credentials, so
// they must not be predictable from what a worker has seen.
std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return bytes;
}

// The first 64 bits of HMAC-SHA256(key, worker_id NUL nonce), as hex.
std::string LeaseMac(const std::string& key, const std::string& worker_id,
                     absl::string_view nonce) {
  const std::string message = absl::StrCat(worker_id, std::string(1, '\0'), nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), std::min<unsigned int>(size, 8)));
}

// What a beat makes the scheduler keep is bounded: labels as Kubernetes
// bounds its own (a megabyte label was kept per rank). `who` names the beat.
absl::Status CheckLabels(const std::string& who,
                         const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > 32) {
    return Invalid(absl::StrCat(who, ": at most 32 labels, got ", labels.size()));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > 63 || value.size() > 256) {
      return Invalid(absl::StrCat(who, ": label '", SafeText(key.substr(0, 63)),
                                  "': keys are 1 to 63 bytes, values at most 256"));
    }
  }
  return absl::OkStatus();
}

// A worker's beat: an id and an address of at most 256 printable bytes (they
// go into logs, metric labels and every job's grant), bounded labels, cores.
absl::Status CheckWorkerBeat(const proto::WorkerBeat& beat) {
  if (beat.worker_id().empty()) return Invalid("worker beat: worker_id is empty");
  const std::string who = absl::StrCat("worker beat from ", SafeText(beat.worker_id()));
  if (beat.worker_id().size() > 256 || SafeText(beat.worker_id()) != beat.worker_id()) {
    return Invalid(absl::StrCat(who, ": worker_id must be at most 256 printable characters"));
  }
  if (beat.address().empty() || beat.address().size() > 256 ||
      SafeText(beat.address()) != beat.address()) {
    return Invalid(absl::StrCat(who, ": address must be 1 to 256 printable characters"));
  }
  if (!(beat.cores() > 0) || !std::isfinite(beat.cores())) {
    return Invalid(absl::StrCat(who, ": cores must be > 0, got ", beat.cores()));
  }
  if (!(beat.cost_per_core_hour() >= 0) || !std::isfinite(beat.cost_per_core_hour())) {
    return Invalid(absl::StrCat(who, ": cost_per_core_hour must be finite and >= 0, got ",
                                beat.cost_per_core_hour()));
  }
  if (beat.worker_class().size() > 63 || SafeText(beat.worker_class()) != beat.worker_class()) {
    return Invalid(absl::StrCat(who, ": worker_class must be at most 63 printable characters"));
  }
  return CheckLabels(who, beat.labels());
}

bool IsLease(const std::string& s) {
  return s.size() == kLeaseHexDigits &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

std::string Label(const google::protobuf::Map<std::string, std::string>& labels,
                  const std::string& key) {
  auto it = labels.find(key);
  return it == labels.end() ? "" : it->second;
}

// `options` with a lease key: its own, else one of this process's.
SchedulerOptions WithLeaseKey(SchedulerOptions options) {
  if (options.lease_key.empty()) options.lease_key = RandomBytes(32);
  return options;
}

}  // namespace

SchedulerCore::SchedulerCore(SchedulerOptions options)
    : options_(WithLeaseKey(std::move(options))), allocation_(std::make_shared<Allocation>()) {}

std::string SchedulerCore::NewLease(const std::string& worker_id) const {
  const std::string nonce = absl::BytesToHexString(RandomBytes(kLeaseHexDigits / 4));
  return absl::StrCat(nonce, LeaseMac(options_.lease_key, worker_id, nonce));
}

bool SchedulerCore::Signed(const std::string& worker_id, const std::string& lease) const {
  if (!IsLease(lease)) return false;
  const absl::string_view nonce = absl::string_view(lease).substr(0, kLeaseHexDigits / 2);
  return ConstantTimeEquals(absl::AsciiStrToLower(lease.substr(kLeaseHexDigits / 2)),
                            LeaseMac(options_.lease_key, worker_id, nonce));
}

absl::StatusOr<proto::WorkerBeatReply> SchedulerCore::WorkerBeat(const proto::WorkerBeat& beat,
                                                                 int64_t now,
                                                                 const std::string& identity) {
  if (absl::Status s = CheckWorkerBeat(beat); !s.ok()) return s;
  if (!beat.lease().empty() && !IsLease(beat.lease())) {
    return Invalid(absl::StrCat("worker beat from ", SafeText(beat.worker_id()), ": lease is not ",
                                kLeaseHexDigits, " hex digits"));
  }
  proto::WorkerBeatReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (first_beat_nanos_ < 0) first_beat_nanos_ = now;
    auto [it, added] = workers_.try_emplace(beat.worker_id());
    WorkerEntry& w = it->second;
    const bool settling =
        now - first_beat_nanos_ < static_cast<int64_t>(options_.expire_after_seconds * 1e9);
    // Only a registration, or a provisional one while settling, asks
    // whether the lease is signed (an HMAC: not for every beat).
    const bool signed_lease =
        (added || (w.provisional && settling)) && Signed(beat.worker_id(), beat.lease());
    if (added ||
        (w.provisional && settling && signed_lease && !ConstantTimeEquals(beat.lease(), w.lease))) {
      if (!added) {
        spdlog::warn(
            "worker {}: its lease takes the id back from {}, which registered it "
            "without one after the restart",
            SafeText(beat.worker_id()), SafeText(w.beat.address()));
      }
      // A signed lease is one this key gave before a restart: keep it, so
      // the worker goes on beating as before. Any other beat gets a new one.
      w.lease = signed_lease ? beat.lease() : NewLease(beat.worker_id());
      w.provisional = !signed_lease && settling;
      w.identity = identity;
      spdlog::info("worker {} joined: {} with {} cores{}", SafeText(beat.worker_id()),
                   SafeText(beat.address()), beat.cores(),
                   identity.empty() ? "" : absl::StrCat(", identity ", SafeText(identity)));
    } else if (!ConstantTimeEquals(beat.lease(), w.lease) || identity != w.identity) {
      ++counts_.refused_beats;
      spdlog::warn("refused a beat for worker {} (registered at {}) naming {}: {}",
                   SafeText(beat.worker_id()), SafeText(w.beat.address()), SafeText(beat.address()),
                   identity != w.identity ? "another identity" : "not its lease");
      return absl::PermissionDeniedError(
          absl::StrCat("worker beat: worker_id ", SafeText(beat.worker_id()),
                       " is registered to another worker until its beats stop for ",
                       options_.expire_after_seconds, " s"));
    }
    reply.set_lease(w.lease);
    Keep(beat, added, now, &w);
  }
  reply.set_heartbeat_seconds(options_.heartbeat_seconds);
  return reply;
}

namespace {

// The allocator's key of one rank: the job and the rank, apart (a job_id
// holds no control characters).
std::string RankId(const std::pair<std::string, int>& key) {
  return absl::StrCat(key.first, "\x1f", key.second);
}

// "job X" or "job X rank R", for logs.
std::string RankName(const std::pair<std::string, int>& key, int world_size) {
  return world_size > 1 ? absl::StrCat("job ", SafeText(key.first), " rank ", key.second)
                        : absl::StrCat("job ", SafeText(key.first));
}

absl::Status CheckJobBeat(const proto::JobBeat& beat) {
  if (beat.job_id().empty()) return Invalid("job beat: job_id is empty");
  const std::string who = absl::StrCat("job beat from ", SafeText(beat.job_id()));
  if (beat.job_id().size() > 256 || SafeText(beat.job_id()) != beat.job_id() ||
      absl::StrContains(beat.job_id(), '\x1f')) {
    return Invalid(absl::StrCat(who, ": job_id must be at most 256 printable characters"));
  }
  if (!(beat.wanted_cores() >= 0) || !std::isfinite(beat.wanted_cores())) {
    return Invalid(absl::StrCat(who, ": wanted_cores must be >= 0, got ", beat.wanted_cores()));
  }
  if (!(beat.weight() >= 0) || !std::isfinite(beat.weight())) {
    return Invalid(absl::StrCat(who, ": weight must be >= 0, got ", beat.weight()));
  }
  if (beat.instance().size() > 64) {
    return Invalid(
        absl::StrCat(who, ": instance must be at most 64 bytes, got ", beat.instance().size()));
  }
  if (absl::Status s = CheckLabels(who, beat.labels()); !s.ok()) return s;
  if (beat.world_size() < 0 || beat.rank() < 0 || beat.rank() >= std::max(1, beat.world_size())) {
    return Invalid(absl::StrCat(who, ": rank ", beat.rank(), " is outside [0, world_size ",
                                beat.world_size(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SchedulerCore::AdmitRank(const proto::JobBeat& beat, const std::string& identity,
                                      const std::string& credential) const {
  std::set<std::string> jobs;  // the credential's, this one aside
  for (const auto& [key, j] : jobs_) {
    if (key.first == beat.job_id()) {
      if (!identity.empty() && !j.identity.empty() && j.identity != identity) {
        return absl::PermissionDeniedError(
            absl::StrCat("job beat: job ", SafeText(beat.job_id()),
                         " is held by another client certificate; choose another --job"));
      }
      continue;
    }
    if (j.credential == credential) jobs.insert(key.first);
  }
  if (static_cast<int>(jobs.size()) >= options_.max_jobs_per_credential) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job beat: ", SafeText(credential), " holds ", jobs.size(),
                     " training jobs, this scheduler's --max-jobs-per-credential; end one first"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SchedulerCore::Recorded> SchedulerCore::RecordJobBeat(const proto::JobBeat& beat,
                                                                     int64_t now,
                                                                     const std::string& identity,
                                                                     const std::string& host) {
  if (absl::Status s = CheckJobBeat(beat); !s.ok()) return s;
  Recorded r{{beat.job_id(), beat.rank()}, false};
  const std::string name = RankName(r.key, beat.world_size());
  if (first_beat_nanos_ < 0) first_beat_nanos_ = now;
  auto it = jobs_.find(r.key);
  if (it != jobs_.end() && it->second.beat.instance() != beat.instance()) {
    if (!beat.leaving()) {
      ++counts_.refused_job_beats;
      spdlog::warn("refused a beat for {}: another process holds it", name);
      return absl::AlreadyExistsError(absl::StrCat(
          "job beat: ", name, " is held by another process until it leaves or its beats stop for ",
          options_.expire_after_seconds, " s (two processes with one --job and --rank?)"));
    }
    return r;  // another instance's last beat: not this one's to release
  }
  if (beat.leaving()) {
    if (it != jobs_.end()) {
      spdlog::info("{} left; its grant is released", name);
      jobs_.erase(it);
      Changed(/*pool=*/false);
      r.changed = true;
    }
    return r;
  }
  const bool added = it == jobs_.end();
  if (added) {
    const std::string credential = identity.empty() ? host : identity;
    if (absl::Status s = AdmitRank(beat, identity, credential); !s.ok()) {
      ++counts_.refused_job_beats;
      spdlog::warn("refused {}: {}", name, std::string(s.message()));
      return s;
    }
    it = jobs_.try_emplace(r.key).first;
    it->second.identity = identity;
    it->second.credential = credential;
    spdlog::info("{} joined, wanting {} cores", name, beat.wanted_cores());
  }
  JobEntry& j = it->second;
  proto::JobBeat normalized = beat;
  if (normalized.weight() == 0) normalized.set_weight(1);
  if (normalized.weight() > options_.max_job_weight) {
    if (added) {
      spdlog::warn("{} asks for weight {}; counted as --max-job-weight {}", name,
                   normalized.weight(), options_.max_job_weight);
    }
    normalized.set_weight(options_.max_job_weight);
  }
  r.changed = added || j.beat.wanted_cores() != normalized.wanted_cores() ||
              j.beat.weight() != normalized.weight() ||
              Label(j.beat.labels(), options_.locality_label) !=
                  Label(normalized.labels(), options_.locality_label);
  if (r.changed) Changed(/*pool=*/false);
  j.beat = std::move(normalized);
  j.last_nanos = now;
  return r;
}

bool SchedulerCore::Settling(int64_t now) const {
  return now - first_beat_nanos_ < static_cast<int64_t>(options_.expire_after_seconds * 1e9);
}

proto::JobGrant SchedulerCore::Answer(const std::pair<std::string, int>& key, bool leaving,
                                      bool settling) {
  proto::JobGrant grant;
  if (!leaving) FillGrant(key, &grant);
  grant.set_settling(settling);
  grant.set_heartbeat_seconds(options_.heartbeat_seconds);
  return grant;
}

absl::StatusOr<proto::JobGrant> SchedulerCore::JobBeat(const proto::JobBeat& beat, int64_t now,
                                                       const std::string& identity,
                                                       const std::string& host) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Recorded> r = RecordJobBeat(beat, now, identity, host);
  if (!r.ok()) return r.status();
  // A beat that changed what the allocation depends on waits for an
  // allocation that includes it; any other is answered from the one there
  // is (after starting a rebalance when one is due and none runs).
  Rebalance(/*wait=*/r->changed);
  return Answer(r->key, beat.leaving(), Settling(now));
}

void SchedulerCore::JobBeatAsync(const proto::JobBeat& beat, int64_t now,
                                 const std::string& identity, const std::string& host,
                                 JobReply reply) {
  absl::StatusOr<proto::JobGrant> answer;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Recorded> r = RecordJobBeat(beat, now, identity, host);
    const bool background = rebalancer_started_ && !stopping_;
    if (!r.ok()) {
      answer = r.status();
    } else if (r->changed && !beat.leaving() && allocated_ < changes_ && background) {
      pending_.push_back({r->key, changes_, Settling(now), std::move(reply)});
      work_cv_.Signal();
      return;
    } else {
      if (!background) Rebalance(/*wait=*/r->changed);
      answer = Answer(r->key, beat.leaving(), Settling(now));
    }
  }
  reply(std::move(answer));
}

void SchedulerCore::FillGrant(const std::pair<std::string, int>& key, proto::JobGrant* grant) {
  const Allocation& allocation = *allocation_;
  const std::string id = RankId(key);
  auto share = allocation.share.find(id);
  grant->set_fair_share_cores(share == allocation.share.end() ? 0 : share->second);
  auto job_share = allocation.job_share.find(key.first);
  grant->set_job_fair_share_cores(job_share == allocation.job_share.end() ? 0 : job_share->second);
  auto grants = allocation.grants.find(id);
  if (grants == allocation.grants.end()) return;
  for (const Grant& g : grants->second) {
    // A worker dropped since the allocation was made is not granted (the
    // next allocation, already due, leaves it out).
    auto entry = workers_.find(g.worker_id);
    if (entry == workers_.end()) continue;
    proto::WorkerGrant* w = grant->add_workers();
    w->set_worker_id(g.worker_id);
    w->set_address(entry->second.beat.address());
    w->set_tls_name(entry->second.identity);
    w->set_cores(g.cores);
    grant->set_cost_per_hour(grant->cost_per_hour() +
                             g.cores * entry->second.beat.cost_per_core_hour());
  }
}

void SchedulerCore::Expire(int64_t now) {
  const int64_t limit = static_cast<int64_t>(options_.expire_after_seconds * 1e9);
  absl::MutexLock lock(&mu_);
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_nanos > limit) {
      spdlog::warn("worker {} ({}) missed its heartbeats for {:.1f} s; dropped", it->first,
                   it->second.beat.address(), (now - it->second.last_nanos) * 1e-9);
      it = workers_.erase(it);
      ++counts_.expired_workers;
      Changed(/*pool=*/true);
    } else {
      ++it;
    }
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (now - it->second.last_nanos > limit) {
      spdlog::info("{} stopped beating; its grant is released",
                   RankName(it->first, it->second.beat.world_size()));
      it = jobs_.erase(it);
      ++counts_.expired_jobs;
      Changed(/*pool=*/false);
    } else {
      ++it;
    }
  }
  for (auto it = reclaimed_until_.begin(); it != reclaimed_until_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    spdlog::info("class {} is no longer being reclaimed: its cores are granted by their cost",
                 SafeText(it->first));
    it = reclaimed_until_.erase(it);
    Changed(/*pool=*/true);
  }
  // The rebalancer picks the changes up within its gap; without it the
  // ticker's thread rebalances (no beat waits on it).
  if (!rebalancer_started_ || stopping_) Rebalance(/*wait=*/true);
}

void SchedulerCore::Keep(const proto::WorkerBeat& sent, bool added, int64_t now, WorkerEntry* w) {
  proto::WorkerBeat beat = sent;
  beat.clear_lease();  // never handed out
  if (w->beat.draining() && !added) {
    // Draining is one way: a worker that drains leaves, and only its next
    // registration (once this one's beats stop) counts it again. Beats
    // that flap draining (and reclaimed) on and off would otherwise churn
    // the allocation and keep its class marked as reclaimed for good.
    if (!beat.draining() && !w->undrain_refused) {
      w->undrain_refused = true;
      spdlog::warn(
          "worker {} says it no longer drains: draining is one way, so it stays "
          "draining until its beats stop",
          SafeText(beat.worker_id()));
    }
    beat.set_draining(true);
    beat.set_reclaimed(w->beat.reclaimed());
  }
  // Only what the allocation depends on makes it stale; load changes do
  // not, nor does an address (grants read it as they are sent).
  if (added || w->beat.cores() != beat.cores() || w->beat.draining() != beat.draining() ||
      w->beat.cost_per_core_hour() != beat.cost_per_core_hour() ||
      Label(w->beat.labels(), options_.locality_label) !=
          Label(beat.labels(), options_.locality_label)) {
    Changed(/*pool=*/true);
  }
  if (beat.draining() && !w->beat.draining() && !added) {
    spdlog::info("worker {} is draining ({}): its jobs move elsewhere", SafeText(beat.worker_id()),
                 beat.reclaimed() ? "reclaimed: its capacity is being taken back" : "stop");
    if (beat.reclaimed()) Reclaiming(beat.worker_class(), beat.worker_id(), now);
  }
  w->beat = std::move(beat);
  w->last_nanos = now;
}

void SchedulerCore::Reclaiming(const std::string& worker_class, const std::string& worker_id,
                               int64_t now) {
  if (worker_class.empty() || !(options_.reclaim_seconds > 0)) return;
  int64_t& until = reclaimed_until_[worker_class];
  if (until == 0) {
    spdlog::info(
        "class {} is being reclaimed (worker {} is draining): its cores are granted after "
        "every other class's for {} s, and jobs move off them where other cores are free",
        SafeText(worker_class), SafeText(worker_id), options_.reclaim_seconds);
  }
  until = now + static_cast<int64_t>(options_.reclaim_seconds * 1e9);
}

void SchedulerCore::Changed(bool pool) {
  ++changes_;
  if (pool) pool_.reset();
}

void SchedulerCore::Rebalance(bool wait) {
  const uint64_t target = changes_;
  while (allocated_ < target) {
    if (rebalancing_) {
      if (!wait) return;
      allocated_cv_.Wait(&mu_);
      continue;
    }
    RunRebalance();
    if (!wait) return;
  }
}

std::shared_ptr<const std::vector<PoolWorker>> SchedulerCore::Pool() {
  if (pool_ != nullptr) return pool_;
  auto pool = std::make_shared<std::vector<PoolWorker>>();
  pool->reserve(workers_.size());
  for (const auto& [id, w] : workers_) {
    if (w.beat.draining()) continue;  // leaving: granted to no one
    pool->push_back({id, w.beat.cores(), Label(w.beat.labels(), options_.locality_label),
                     w.beat.cost_per_core_hour(),
                     reclaimed_until_.count(w.beat.worker_class()) != 0});
  }
  pool_ = std::move(pool);
  return pool_;
}

std::vector<JobWant> SchedulerCore::Wants() const {
  std::vector<JobWant> wants;
  wants.reserve(jobs_.size());
  for (const auto& [key, j] : jobs_) {
    wants.push_back({RankId(key), j.beat.weight(), j.beat.wanted_cores(),
                     Label(j.beat.labels(), options_.locality_label), key.first});
  }
  return wants;
}

std::map<std::string, std::vector<Grant>> SchedulerCore::ReportedGrants() const {
  std::map<std::string, std::vector<Grant>> reported;
  for (const auto& [key, j] : jobs_) {
    if (j.beat.current().empty()) continue;
    const std::string id = RankId(key);
    if (allocation_->grants.count(id) != 0) continue;
    std::vector<Grant>& kept = reported[id];
    for (const proto::WorkerGrant& g : j.beat.current()) kept.push_back({g.worker_id(), g.cores()});
  }
  return reported;
}

void SchedulerCore::RunRebalance() {
  rebalancing_ = true;
  const uint64_t covers = changes_;
  const std::shared_ptr<const std::vector<PoolWorker>> pool = Pool();
  const std::vector<JobWant> wants = Wants();
  std::shared_ptr<const Allocation> before = allocation_;
  // Earlier grants to keep: this scheduler's own, else (after a restart) the
  // workers the job says it streams from.
  std::map<std::string, std::vector<Grant>> reported = ReportedGrants();
  mu_.Unlock();
  const auto start = std::chrono::steady_clock::now();
  if (!reported.empty()) reported.insert(before->grants.begin(), before->grants.end());
  auto next = std::make_shared<const Allocation>(
      Allocate(*pool, wants, reported.empty() ? before->grants : reported));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  before.reset();
  if (on_rebalance_) on_rebalance_(took);
  mu_.Lock();
  allocation_ = std::move(next);
  allocated_ = covers;
  rebalancing_ = false;
  ++counts_.rebalances;
  counts_.last_rebalance_seconds = took;
  allocated_cv_.SignalAll();
}

void SchedulerCore::StartRebalancer(double min_gap_seconds) {
  absl::MutexLock lock(&mu_);
  if (rebalancer_started_ || stopping_) return;
  rebalancer_started_ = true;
  rebalancer_ = std::thread([this, min_gap_seconds] { RebalancerLoop(min_gap_seconds); });
}

void SchedulerCore::StopRebalancer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_cv_.Signal();
  }
  if (rebalancer_.joinable()) rebalancer_.join();
}

SchedulerCore::~SchedulerCore() { StopRebalancer(); }

void SchedulerCore::RebalancerLoop(double min_gap_seconds) {
  const absl::Duration min_gap = absl::Seconds(min_gap_seconds);
  absl::Time last = absl::InfinitePast();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // Beats waiting wake it and are answered at once; changes no beat
    // waits for (the pool's) wake no one: it looks for them every gap, so
    // a ramp of thousands of joins costs no wake-up each.
    const bool due = allocated_ < changes_;
    const absl::Duration wait =
        pending_.empty() ? last + min_gap - absl::Now() : absl::ZeroDuration();
    if (!due || wait > absl::ZeroDuration()) {
      work_cv_.WaitWithTimeout(&mu_, due ? wait : std::max(min_gap, absl::Milliseconds(10)));
      continue;
    }
    RunRebalance();
    last = absl::Now();
    AnswerPending(/*stopping=*/false);
  }
  AnswerPending(/*stopping=*/true);
}

void SchedulerCore::AnswerPending(bool stopping) {
  std::vector<std::pair<JobReply, absl::StatusOr<proto::JobGrant>>> answers;
  std::vector<Pending> waiting;
  for (Pending& p : pending_) {
    if (stopping) {
      answers.emplace_back(std::move(p.reply),
                           absl::UnavailableError("job beat: the scheduler is stopping"));
    } else if (p.change <= allocated_) {
      answers.emplace_back(std::move(p.reply), Answer(p.key, /*leaving=*/false, p.settling));
    } else {
      waiting.push_back(std::move(p));
    }
  }
  pending_ = std::move(waiting);
  if (answers.empty()) return;
  mu_.Unlock();
  for (auto& [reply, answer] : answers) reply(std::move(answer));
  mu_.Lock();
}

SchedulerCounts SchedulerCore::counts() const {
  absl::MutexLock lock(&mu_);
  SchedulerCounts c = counts_;
  c.workers = static_cast<int>(workers_.size());
  c.ranks = static_cast<int>(jobs_.size());
  std::set<std::string> jobs;
  for (const auto& [key, j] : jobs_) {
    jobs.insert(key.first);
    auto share = allocation_->share.find(RankId(key));
    if (share != allocation_->share.end()) c.rank_shares[key] = share->second;
  }
  c.jobs = static_cast<int>(jobs.size());
  c.job_shares = allocation_->job_share;
  c.pool_cores = allocation_->pool_cores;
  c.granted_cores = allocation_->granted_cores;
  AddDemand(&c);
  return c;
}

void SchedulerCore::AddDemand(SchedulerCounts* c) const {
  for (const auto& [key, j] : jobs_) {
    double granted = 0;
    auto grants = allocation_->grants.find(RankId(key));
    if (grants != allocation_->grants.end()) {
      for (const Grant& g : grants->second) granted += g.cores;
    }
    // A rank with no measure of its want asks for the whole share: count
    // what it holds, not that.
    const double wanted = j.beat.want_unknown() ? granted : j.beat.wanted_cores();
    c->wanted_cores += wanted;
    c->short_cores += std::max(0.0, wanted - granted);
  }
  c->idle_cores = std::max(0.0, c->pool_cores - c->granted_cores);
  for (const auto& [worker_class, until] : reclaimed_until_)
    c->reclaimed_classes.insert(worker_class);
  for (const auto& [id, w] : workers_) {
    c->draining_workers += w.beat.draining() ? 1 : 0;
    if (!w.beat.draining()) c->class_cores[w.beat.worker_class()].first += w.beat.cores();
  }
  for (const auto& [rank, grants] : allocation_->grants) {
    for (const Grant& g : grants) {
      auto w = workers_.find(g.worker_id);
      if (w != workers_.end()) c->class_cores[w->second.beat.worker_class()].second += g.cores;
    }
  }
  for (const auto& [key, j] : jobs_) {
    auto cost = allocation_->cost_per_hour.find(RankId(key));
    if (cost != allocation_->cost_per_hour.end()) c->job_cost_per_hour[key.first] += cost->second;
  }
}

}  // namespace prepflow::scheduler
