#include "client/remote/scheduler_grants.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/text.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// What a job asks the scheduler for when it has no measure of what it
// would use: as much as its fair share gives.
constexpr double kWantAllCores = 1e6;

// Who beats: the job, this rank, and this process (a random instance, so
// that the scheduler can tell a second process claiming the rank).
proto::JobBeat Identity(const SchedulerGrants::Options& options) {
  proto::JobBeat beat;
  beat.set_job_id(options.job_id);
  beat.set_rank(options.rank);
  beat.set_world_size(options.world_size);
  std::random_device random;
  beat.set_instance(absl::StrFormat("%08x%08x", random(), random()));
  return beat;
}

}  // namespace

SchedulerGrants::SchedulerGrants(const Options& options, const Security& security, RemotePool* pool,
                                 std::function<std::optional<double>()> want)
    : options_(options), pool_(pool), want_(std::move(want)) {
  registration_ = std::make_unique<JobRegistration>(
      options_.scheduler, security, Identity(options_),
      [this](proto::JobBeat* beat) { FillBeat(beat); },
      [this](const proto::JobGrant& grant) { Apply(grant); },
      [this](const grpc::Status& status) {
        absl::MutexLock lock(&mu_);
        answered_ = true;
        state_.reachable = false;
        state_.error = SafeText(status.error_message());
      });
}

SchedulerGrants::~SchedulerGrants() { Stop(); }

void SchedulerGrants::Start() { registration_->Start(); }

void SchedulerGrants::AwaitFirstAnswer(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&answered_), deadline);
}

void SchedulerGrants::Finish() {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    AddCost(absl::Now());
    finished_ = true;
  }
  registration_->Kick();
}

void SchedulerGrants::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    AddCost(absl::Now());
    stopped_ = true;
  }
  registration_->Stop();
  if (state().reachable) registration_->Release();  // else it would only wait out its deadline
}

SchedulerGrants::State SchedulerGrants::state() const {
  absl::MutexLock lock(&mu_);
  State s = state_;
  s.cost = CostUntil(absl::Now());
  return s;
}

double SchedulerGrants::CostUntil(absl::Time now) const {
  if (cost_since_ == absl::InfinitePast() || finished_ || stopped_) return state_.cost;
  return state_.cost + state_.cost_per_hour * absl::ToDoubleHours(now - cost_since_);
}

void SchedulerGrants::AddCost(absl::Time now) {
  state_.cost = CostUntil(now);
  cost_since_ = now;
}

void SchedulerGrants::FillBeat(proto::JobBeat* beat) {
  bool finished;
  {
    absl::MutexLock lock(&mu_);
    finished = finished_;
  }
  const std::optional<double> measured = finished ? 0 : want_();
  const double want = measured.value_or(kWantAllCores);
  {
    absl::MutexLock lock(&mu_);
    state_.wanted_cores = want;
  }
  beat->set_want_unknown(!measured.has_value());
  beat->set_weight(options_.weight);
  beat->mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  beat->set_wanted_cores(want);
  for (const RemotePool::Member& m : pool_->Members()) {
    if (m.worker_id.empty() || !m.alive || m.retiring) continue;
    proto::WorkerGrant* current = beat->add_current();
    current->set_worker_id(m.worker_id);
    current->set_address(m.address);
    current->set_cores(m.granted_cores);
  }
}

void SchedulerGrants::Apply(const proto::JobGrant& grant) {
  absl::MutexLock lock(&mu_);
  state_.reachable = true;
  state_.error.clear();
  // After the run the job wants nothing (and gets a zero share): the stats
  // keep the share it ran with.
  if (finished_ || stopped_) {
    answered_ = true;
    return;
  }
  state_.fair_share_cores = grant.fair_share_cores();
  state_.job_fair_share_cores = grant.job_fair_share_cores();
  AddCost(absl::Now());
  const double rate = grant.cost_per_hour();
  state_.cost_per_hour = std::isfinite(rate) && rate > 0 ? rate : 0;
  const std::vector<RemotePool::Member> members = pool_->Members();
  std::vector<bool> named(members.size());
  for (const proto::WorkerGrant& g : grant.workers()) {
    int found = -1;
    for (const RemotePool::Member& m : members) {
      if (m.alive && m.address == g.address()) found = m.id;
    }
    if (found < 0) {
      if (!pool_->MayDial(g.address())) continue;
      spdlog::info("scheduler granted worker {} ({}, {:.2f} cores); opening the job there",
                   g.worker_id(), g.address(), g.cores());
      pool_->Add(g.address(), g.worker_id(), g.cores(), g.tls_name());
      continue;
    }
    named[found] = true;
    const RemotePool::Member& m = members[found];
    if (m.worker_id.empty()) continue;  // named in --workers too: it stays a static worker
    if (m.retiring) pool_->Keep(found);
    pool_->SetGrantedCores(found, g.cores());
  }
  // A settling scheduler (just restarted) may not know every worker yet:
  // only add until it has heard from the whole pool.
  if (!grant.settling()) {
    for (const RemotePool::Member& m : members) {
      if (!named[m.id] && !m.worker_id.empty() && m.alive && !m.retiring) pool_->Retire(m.id);
    }
  }
  answered_ = true;
}

}  // namespace prepflow
