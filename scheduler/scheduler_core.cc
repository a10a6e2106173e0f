#include "scheduler/scheduler_core.h"

#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "net/security.h"
#include "pipeline/text.h"
#include "spdlog/spdlog.h"

namespace prepflow::scheduler {
namespace {

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

constexpr size_t kLeaseHexDigits = 32;

// 128 bits from the kernel's CSPRNG, as hex: a lease is a credential, so it
// must not be predictable from the leases a worker has seen.
std::string NewLease() {
  uint64_t bits[2];
  size_t got = 0;
  while (got < sizeof(bits)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(bits) + got, sizeof(bits) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::StrFormat("%016x%016x", bits[0], bits[1]);
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

}  // namespace

absl::StatusOr<proto::WorkerBeatReply> SchedulerCore::WorkerBeat(const proto::WorkerBeat& beat,
                                                                 int64_t now,
                                                                 const std::string& identity) {
  if (beat.worker_id().empty()) return Invalid("worker beat: worker_id is empty");
  if (beat.address().empty()) {
    return Invalid(absl::StrCat("worker beat from ", beat.worker_id(), ": address is empty"));
  }
  if (!(beat.cores() > 0) || !std::isfinite(beat.cores())) {
    return Invalid(absl::StrCat("worker beat from ", beat.worker_id(), ": cores must be > 0, got ",
                                beat.cores()));
  }
  if (!beat.lease().empty() && !IsLease(beat.lease())) {
    return Invalid(absl::StrCat("worker beat from ", beat.worker_id(), ": lease is not ",
                                kLeaseHexDigits, " hex digits"));
  }
  proto::WorkerBeatReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (first_beat_nanos_ < 0) first_beat_nanos_ = now;
    auto [it, added] = workers_.try_emplace(beat.worker_id());
    WorkerEntry& w = it->second;
    if (added) {
      // A lease the beat brings is one a restarted scheduler gave: keep it,
      // so the worker goes on beating as before.
      w.lease = beat.lease().empty() ? NewLease() : beat.lease();
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
    // Only what the allocation depends on makes it stale; load changes do not.
    if (added || w.beat.address() != beat.address() || w.beat.cores() != beat.cores() ||
        Label(w.beat.labels(), options_.locality_label) !=
            Label(beat.labels(), options_.locality_label)) {
      stale_ = true;
    }
    w.beat = beat;
    w.beat.clear_lease();  // never handed out
    w.last_nanos = now;
  }
  reply.set_heartbeat_seconds(options_.heartbeat_seconds);
  return reply;
}

absl::StatusOr<proto::JobGrant> SchedulerCore::JobBeat(const proto::JobBeat& beat, int64_t now) {
  if (beat.job_id().empty()) return Invalid("job beat: job_id is empty");
  if (!(beat.wanted_cores() >= 0) || !std::isfinite(beat.wanted_cores())) {
    return Invalid(absl::StrCat("job beat from ", beat.job_id(),
                                ": wanted_cores must be >= 0, got ", beat.wanted_cores()));
  }
  if (!(beat.weight() >= 0) || !std::isfinite(beat.weight())) {
    return Invalid(absl::StrCat("job beat from ", beat.job_id(), ": weight must be >= 0, got ",
                                beat.weight()));
  }
  proto::JobGrant grant;
  double took = -1;
  {
    absl::MutexLock lock(&mu_);
    if (first_beat_nanos_ < 0) first_beat_nanos_ = now;
    auto [it, added] = jobs_.try_emplace(beat.job_id());
    JobEntry& j = it->second;
    if (added) {
      spdlog::info("job {} joined, wanting {} cores", beat.job_id(), beat.wanted_cores());
    }
    proto::JobBeat normalized = beat;
    if (normalized.weight() == 0) normalized.set_weight(1);
    if (added || j.beat.wanted_cores() != normalized.wanted_cores() ||
        j.beat.weight() != normalized.weight() ||
        Label(j.beat.labels(), options_.locality_label) !=
            Label(normalized.labels(), options_.locality_label)) {
      stale_ = true;
    }
    j.beat = std::move(normalized);
    j.last_nanos = now;
    took = RebalanceIfStale();
    grant.set_settling(now - first_beat_nanos_ <
                       static_cast<int64_t>(options_.expire_after_seconds * 1e9));
    auto share = allocation_.share.find(beat.job_id());
    grant.set_fair_share_cores(share == allocation_.share.end() ? 0 : share->second);
    auto grants = allocation_.grants.find(beat.job_id());
    if (grants != allocation_.grants.end()) {
      for (const Grant& g : grants->second) {
        proto::WorkerGrant* w = grant.add_workers();
        w->set_worker_id(g.worker_id);
        const WorkerEntry& entry = workers_.at(g.worker_id);
        w->set_address(entry.beat.address());
        w->set_tls_name(entry.identity);
        w->set_cores(g.cores);
      }
    }
  }
  if (took >= 0 && on_rebalance_) on_rebalance_(took);
  grant.set_heartbeat_seconds(options_.heartbeat_seconds);
  return grant;
}

void SchedulerCore::Expire(int64_t now) {
  const int64_t limit = static_cast<int64_t>(options_.expire_after_seconds * 1e9);
  double took = -1;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (now - it->second.last_nanos > limit) {
        spdlog::warn("worker {} ({}) missed its heartbeats for {:.1f} s; dropped", it->first,
                     it->second.beat.address(), (now - it->second.last_nanos) * 1e-9);
        it = workers_.erase(it);
        ++counts_.expired_workers;
        stale_ = true;
      } else {
        ++it;
      }
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (now - it->second.last_nanos > limit) {
        spdlog::info("job {} stopped beating; its grant is released", it->first);
        it = jobs_.erase(it);
        ++counts_.expired_jobs;
        stale_ = true;
      } else {
        ++it;
      }
    }
    took = RebalanceIfStale();
  }
  if (took >= 0 && on_rebalance_) on_rebalance_(took);
}

double SchedulerCore::RebalanceIfStale() {
  if (!stale_) return -1;
  const auto start = std::chrono::steady_clock::now();
  std::vector<PoolWorker> pool;
  pool.reserve(workers_.size());
  for (const auto& [id, w] : workers_) {
    pool.push_back({id, w.beat.cores(), Label(w.beat.labels(), options_.locality_label)});
  }
  std::vector<JobWant> wants;
  wants.reserve(jobs_.size());
  for (const auto& [id, j] : jobs_) {
    wants.push_back({id, j.beat.weight(), j.beat.wanted_cores(),
                     Label(j.beat.labels(), options_.locality_label)});
  }
  // Earlier grants to keep: this scheduler's own, else (after a restart) the
  // workers the job says it streams from.
  std::map<std::string, std::vector<Grant>> previous = allocation_.grants;
  for (const auto& [id, j] : jobs_) {
    if (previous.count(id) != 0 || j.beat.current().empty()) continue;
    std::vector<Grant>& kept = previous[id];
    for (const proto::WorkerGrant& g : j.beat.current()) kept.push_back({g.worker_id(), g.cores()});
  }
  allocation_ = Allocate(pool, wants, previous);
  stale_ = false;
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++counts_.rebalances;
  counts_.last_rebalance_seconds = took;
  return took;
}

SchedulerCounts SchedulerCore::counts() const {
  absl::MutexLock lock(&mu_);
  SchedulerCounts c = counts_;
  c.workers = static_cast<int>(workers_.size());
  c.jobs = static_cast<int>(jobs_.size());
  c.pool_cores = allocation_.pool_cores;
  c.granted_cores = allocation_.granted_cores;
  return c;
}

}  // namespace prepflow::scheduler
