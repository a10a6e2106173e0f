// SchedulerCore with a driven clock: registration, grants, rebalancing on
// join and leave, expiry, and refusals that name the field.
#include "scheduler/scheduler_core.h"

#include <cmath>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::scheduler {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000'000;

proto::WorkerBeat Worker(const std::string& id, double cores, const std::string& zone = "") {
  proto::WorkerBeat b;
  b.set_worker_id(id);
  b.set_address(id + ":7000");
  b.set_cores(cores);
  if (!zone.empty()) (*b.mutable_labels())["zone"] = zone;
  return b;
}

proto::JobBeat Job(const std::string& id, double wanted, const std::string& zone = "") {
  proto::JobBeat b;
  b.set_job_id(id);
  b.set_wanted_cores(wanted);
  if (!zone.empty()) (*b.mutable_labels())["zone"] = zone;
  return b;
}

// Beats as a worker does: with the lease its first beat was answered with.
absl::StatusOr<proto::WorkerBeatReply> Beat(SchedulerCore& core, proto::WorkerBeat beat,
                                            int64_t now, const std::string& identity = "") {
  static std::map<std::string, std::string> leases;
  beat.set_lease(leases[beat.worker_id()]);
  auto reply = core.WorkerBeat(beat, now, identity);
  if (reply.ok()) leases[beat.worker_id()] = reply->lease();
  return reply;
}

double Granted(const proto::JobGrant& g) {
  double cores = 0;
  for (const proto::WorkerGrant& w : g.workers()) cores += w.cores();
  return cores;
}

TEST(SchedulerCore, GrantsRegisteredWorkersWithTheirAddresses) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4, "a"), 0).ok());
  ASSERT_TRUE(Beat(core, Worker("w2", 4, "b"), 0).ok());
  auto grant = core.JobBeat(Job("j", 3, "b"), 0);
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(grant->workers_size(), 1);
  EXPECT_EQ(grant->workers(0).worker_id(), "w2");  // its zone
  EXPECT_EQ(grant->workers(0).address(), "w2:7000");
  EXPECT_DOUBLE_EQ(grant->workers(0).cores(), 3);
  EXPECT_DOUBLE_EQ(grant->fair_share_cores(), 3);
  EXPECT_DOUBLE_EQ(grant->heartbeat_seconds(), 2);
}

TEST(SchedulerCore, RebalancesWhenJobsAndWorkersComeAndGo) {
  SchedulerOptions o;
  o.expire_after_seconds = 6;
  SchedulerCore core(o);
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("a", 8), 0)), 4);
  // A second worker joins: a's next beat gets both.
  ASSERT_TRUE(Beat(core, Worker("w2", 4), 1 * kSecond).ok());
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("a", 8), 1 * kSecond)), 8);
  // A second job joins: the pool is split evenly.
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("b", 8), 2 * kSecond)), 4);
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("a", 8), 2 * kSecond)), 4);
  // w2 stops beating; the others keep beating. After the expiry w2 is gone
  // and the two jobs share w1.
  for (int64_t t = 3; t <= 8; ++t) {
    ASSERT_TRUE(Beat(core, Worker("w1", 4), t * kSecond).ok());
    ASSERT_TRUE(core.JobBeat(Job("a", 8), t * kSecond).ok());
    ASSERT_TRUE(core.JobBeat(Job("b", 8), t * kSecond).ok());
  }
  core.Expire(8 * kSecond);
  EXPECT_EQ(core.counts().workers, 1);
  EXPECT_EQ(core.counts().expired_workers, 1);
  auto a = core.JobBeat(Job("a", 8), 8 * kSecond);
  EXPECT_DOUBLE_EQ(Granted(*a), 2);
  for (const proto::WorkerGrant& w : a->workers()) EXPECT_EQ(w.worker_id(), "w1");
  // Job b goes silent: a gets all of w1 after b expires.
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 15 * kSecond).ok());
  core.Expire(15 * kSecond);
  EXPECT_EQ(core.counts().jobs, 0);  // a was silent too
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("a", 8), 15 * kSecond)), 4);
  EXPECT_GE(core.counts().rebalances, 5);
}

// A worker that beats draining (SIGTERM: it is leaving) is granted to no
// one from its next beat on: the job holding it is moved to the others at
// once, without waiting for its beats to stop and expire.
TEST(SchedulerCore, ADrainingWorkersJobsMoveAtOnce) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  ASSERT_TRUE(Beat(core, Worker("w2", 4), 0).ok());
  EXPECT_DOUBLE_EQ(Granted(*core.JobBeat(Job("a", 6), 0)), 6);
  proto::WorkerBeat leaving = Worker("w2", 4);
  leaving.set_draining(true);
  ASSERT_TRUE(Beat(core, leaving, 1 * kSecond).ok());
  auto a = core.JobBeat(Job("a", 6), 1 * kSecond);
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(Granted(*a), 4);
  for (const proto::WorkerGrant& w : a->workers()) EXPECT_EQ(w.worker_id(), "w1");
  EXPECT_EQ(core.counts().workers, 2);  // still beating, but granted to no one
  // A new job gets nothing of it either.
  auto b = core.JobBeat(Job("b", 2), 1 * kSecond);
  ASSERT_TRUE(b.ok());
  for (const proto::WorkerGrant& w : b->workers()) EXPECT_EQ(w.worker_id(), "w1");
  EXPECT_EQ(core.counts().draining_workers, 1);
}

// Demand, for an autoscaler: what the plans want, what of it the pool cannot
// grant, and what it holds idle.
TEST(SchedulerCore, CountsTheCoresThePoolIsShortOfAndHoldsIdle) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  ASSERT_TRUE(Beat(core, Worker("w2", 4), 0).ok());
  ASSERT_TRUE(core.JobBeat(Job("a", 3), 0).ok());
  SchedulerCounts c = core.counts();
  EXPECT_DOUBLE_EQ(c.wanted_cores, 3);
  EXPECT_DOUBLE_EQ(c.short_cores, 0);
  EXPECT_DOUBLE_EQ(c.idle_cores, 5);
  ASSERT_TRUE(core.JobBeat(Job("b", 9), 0).ok());
  ASSERT_TRUE(core.JobBeat(Job("a", 3), 0).ok());
  c = core.counts();
  EXPECT_DOUBLE_EQ(c.wanted_cores, 12);
  EXPECT_DOUBLE_EQ(c.short_cores, 4);  // b gets the 5 a leaves, of its 9
  EXPECT_DOUBLE_EQ(c.idle_cores, 0);
  // w2 drains: its 4 cores leave the pool, and the jobs are short of them.
  proto::WorkerBeat leaving = Worker("w2", 4);
  leaving.set_draining(true);
  ASSERT_TRUE(Beat(core, leaving, 1 * kSecond).ok());
  ASSERT_TRUE(core.JobBeat(Job("a", 3), 1 * kSecond).ok());
  c = core.counts();
  EXPECT_DOUBLE_EQ(c.pool_cores, 4);
  EXPECT_DOUBLE_EQ(c.short_cores, 8);
  EXPECT_DOUBLE_EQ(c.idle_cores, 0);
}

// A rank with no plan yet asks for everything (as much as its share gives);
// as demand, only what it holds counts, or one job starting would ask an
// autoscaler for the largest pool it allows.
TEST(SchedulerCore, AnUnknownWantCountsAsWhatItHolds) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  proto::JobBeat starting = Job("a", 1e6);
  starting.set_want_unknown(true);
  auto grant = core.JobBeat(starting, 0);
  ASSERT_TRUE(grant.ok());
  EXPECT_DOUBLE_EQ(Granted(*grant), 4);  // it gets its share all the same
  const SchedulerCounts c = core.counts();
  EXPECT_DOUBLE_EQ(c.wanted_cores, 4);
  EXPECT_DOUBLE_EQ(c.short_cores, 0);
}

// Classes and prices: the grant says what it costs an hour, the counts give
// each training job's cost and each class's cores; a price that is not a
// finite non-negative number is refused naming the field.
TEST(SchedulerCore, GrantsCarryTheirCostAndClassesAreCounted) {
  SchedulerCore core({});
  proto::WorkerBeat spot = Worker("w-spot", 4);
  spot.set_worker_class("spot");
  spot.set_cost_per_core_hour(0.01);
  proto::WorkerBeat dear = Worker("w-dear", 4);
  dear.set_worker_class("on-demand");
  dear.set_cost_per_core_hour(0.04);
  ASSERT_TRUE(Beat(core, dear, 0).ok());
  ASSERT_TRUE(Beat(core, spot, 0).ok());
  auto grant = core.JobBeat(Job("a", 6), 0);
  ASSERT_TRUE(grant.ok());
  EXPECT_NEAR(grant->cost_per_hour(), 4 * 0.01 + 2 * 0.04, 1e-12);
  const SchedulerCounts c = core.counts();
  EXPECT_NEAR(c.job_cost_per_hour.at("a"), 0.12, 1e-12);
  EXPECT_DOUBLE_EQ(c.class_cores.at("spot").first, 4);
  EXPECT_DOUBLE_EQ(c.class_cores.at("spot").second, 4);
  EXPECT_DOUBLE_EQ(c.class_cores.at("on-demand").second, 2);
  proto::WorkerBeat bad = Worker("w-bad", 4);
  bad.set_cost_per_core_hour(-1);
  EXPECT_THAT(core.WorkerBeat(bad, 0).status().message(), HasSubstr("cost_per_core_hour"));
  bad.set_cost_per_core_hour(std::nan(""));
  EXPECT_THAT(core.WorkerBeat(bad, 0).status().message(), HasSubstr("cost_per_core_hour"));
  bad.set_cost_per_core_hour(0);
  bad.set_worker_class(std::string(64, 'x'));
  EXPECT_THAT(core.WorkerBeat(bad, 0).status().message(), HasSubstr("worker_class"));
}

// A spot worker that starts draining because its capacity is taken back
// (reclaimed) marks its class as being reclaimed (spot capacity goes in
// waves): the job's grant on the other spot worker moves to the on-demand
// one's free cores at once, and its cost says so; after --reclaim-seconds
// the class is priced by its cost again and the grant moves back. A drain
// that is a stop (a scale-down), or of a worker without a class, marks
// nothing.
TEST(SchedulerCore, AJobMovesOffAClassBeingReclaimedAndBackAfterButNotForAStop) {
  SchedulerOptions o;
  o.expire_after_seconds = 1000;  // nothing expires here
  o.reclaim_seconds = 120;
  SchedulerCore core(o);
  auto worker = [](const std::string& id, const std::string& worker_class, double price) {
    proto::WorkerBeat b = Worker(id, 2);
    b.set_worker_class(worker_class);
    b.set_cost_per_core_hour(price);
    return b;
  };
  const proto::WorkerBeat spot1 = worker("spot1", "spot", 0.01);
  proto::WorkerBeat spot2 = worker("spot2", "spot", 0.01);
  const proto::WorkerBeat dear = worker("dear", "on-demand", 0.04);
  for (const proto::WorkerBeat& b : {spot1, spot2, dear}) ASSERT_TRUE(Beat(core, b, 0).ok());
  auto on = [](const proto::JobGrant& g) {
    std::map<std::string, double> cores;
    for (const proto::WorkerGrant& w : g.workers()) cores[w.worker_id()] += w.cores();
    return cores;
  };
  auto grant = core.JobBeat(Job("a", 2), 0);
  ASSERT_TRUE(grant.ok());
  // Spot first, the first of equals: spot1. A spot worker that stops (a
  // scale-down) marks nothing: the job stays on spot1.
  ASSERT_EQ(on(*grant), (std::map<std::string, double>{{"spot1", 2}}));
  proto::WorkerBeat spot3 = worker("spot3", "spot", 0.01);
  ASSERT_TRUE(Beat(core, spot3, 0).ok());
  spot3.set_draining(true);
  ASSERT_TRUE(Beat(core, spot3, 5 * kSecond).ok());
  EXPECT_EQ(on(*core.JobBeat(Job("a", 2), 5 * kSecond)),
            (std::map<std::string, double>{{"spot1", 2}}));
  EXPECT_TRUE(core.counts().reclaimed_classes.empty());
  // Then spot2, which holds none of the job, drains reclaimed: its
  // capacity is being taken back.
  spot2.set_draining(true);
  spot2.set_reclaimed(true);
  ASSERT_TRUE(Beat(core, spot2, 10 * kSecond).ok());
  grant = core.JobBeat(Job("a", 2), 10 * kSecond);
  EXPECT_EQ(on(*grant), (std::map<std::string, double>{{"dear", 2}}));
  EXPECT_NEAR(grant->cost_per_hour(), 2 * 0.04, 1e-12);
  SchedulerCounts c = core.counts();
  EXPECT_EQ(c.reclaimed_classes, std::set<std::string>{"spot"});
  core.Expire(129 * kSecond);  // 119 s after the drain: still reclaimed
  EXPECT_EQ(on(*core.JobBeat(Job("a", 2), 129 * kSecond)).count("dear"), 1u);
  core.Expire(131 * kSecond);
  EXPECT_EQ(on(*core.JobBeat(Job("a", 2), 131 * kSecond)),
            (std::map<std::string, double>{{"spot1", 2}}));
  EXPECT_TRUE(core.counts().reclaimed_classes.empty());
  // Without a class, or with --reclaim-seconds 0, nothing is marked.
  proto::WorkerBeat plain = Worker("plain", 2);
  ASSERT_TRUE(Beat(core, plain, 132 * kSecond).ok());
  plain.set_draining(true);
  plain.set_reclaimed(true);
  ASSERT_TRUE(Beat(core, plain, 133 * kSecond).ok());
  EXPECT_TRUE(core.counts().reclaimed_classes.empty());
}

// Draining is one way. A worker's beats that flap draining and reclaimed
// on and off (a bug, or a credential used to keep cheap capacity from
// every job) leave it draining, granted to no one, and mark its class once:
// the mark ends reclaim_seconds after the first drain, not after the last
// flap.
TEST(SchedulerCore, AWorkerCannotFlapItsDrainToKeepItsClassMarked) {
  SchedulerOptions o;
  o.expire_after_seconds = 1000;  // nothing expires here
  o.reclaim_seconds = 120;
  SchedulerCore core(o);
  proto::WorkerBeat flapper = Worker("flapper", 2), spot = Worker("spot", 2);
  for (proto::WorkerBeat* b : {&flapper, &spot}) {
    b->set_worker_class("spot");
    b->set_cost_per_core_hour(0.01);
    ASSERT_TRUE(Beat(core, *b, 0).ok());
  }
  ASSERT_TRUE(Beat(core, Worker("dear", 2), 0).ok());
  for (int64_t t = 10; t <= 200; t += 10) {
    flapper.set_draining(t % 20 == 10);
    flapper.set_reclaimed(t % 20 == 10);
    ASSERT_TRUE(Beat(core, flapper, t * kSecond).ok());
    core.Expire(t * kSecond);
    const SchedulerCounts c = core.counts();
    EXPECT_EQ(c.draining_workers, 1) << t;
    // The first drain, at 10 s, marks the class until 130 s.
    if (t != 130) {
      EXPECT_EQ(c.reclaimed_classes.count("spot"), t < 130 ? 1u : 0u) << t;
    }
  }
  // The job is granted the spot worker that stays, never the flapper.
  auto grant = core.JobBeat(Job("a", 4), 200 * kSecond);
  ASSERT_TRUE(grant.ok());
  for (const proto::WorkerGrant& g : grant->workers()) EXPECT_NE(g.worker_id(), "flapper");
}

TEST(SchedulerCore, AJobWithNoWorkersGetsAnEmptyGrant) {
  SchedulerCore core({});
  auto grant = core.JobBeat(Job("lonely", 4), 0);
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->workers_size(), 0);
  EXPECT_EQ(grant->fair_share_cores(), 0);
}

TEST(SchedulerCore, LoadChangesDoNotRebalance) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  ASSERT_TRUE(core.JobBeat(Job("a", 2), 0).ok());
  const int64_t before = core.counts().rebalances;
  proto::WorkerBeat busy = Worker("w1", 4);
  busy.set_load(0.9);
  ASSERT_TRUE(Beat(core, busy, kSecond).ok());
  ASSERT_TRUE(core.JobBeat(Job("a", 2), kSecond).ok());
  EXPECT_EQ(core.counts().rebalances, before);
}

TEST(SchedulerCore, SettlesForAnExpiryPeriodAfterItsFirstBeat) {
  SchedulerOptions o;
  o.expire_after_seconds = 6;
  SchedulerCore core(o);
  // The clock starts at the first beat it hears, whatever the wall time.
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 100 * kSecond).ok());
  EXPECT_TRUE(core.JobBeat(Job("a", 2), 100 * kSecond)->settling());
  EXPECT_TRUE(core.JobBeat(Job("a", 2), 105 * kSecond)->settling());
  EXPECT_FALSE(core.JobBeat(Job("a", 2), 106 * kSecond)->settling());
}

TEST(SchedulerCore, ARestartedSchedulerKeepsTheWorkersAJobReports) {
  // Before the restart the job was on w2. The restarted scheduler hears the
  // job first (its grant is empty, and settling), then the workers; the job
  // stays on w2 though w1 comes first in every other order.
  SchedulerCore core({});
  proto::JobBeat job = Job("a", 2);
  proto::WorkerGrant* current = job.add_current();
  current->set_worker_id("w2");
  current->set_address("w2:7000");
  current->set_cores(2);
  auto early = core.JobBeat(job, 0);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->workers_size(), 0);
  EXPECT_TRUE(early->settling());
  ASSERT_TRUE(Beat(core, Worker("w1", 4), kSecond / 10).ok());
  ASSERT_TRUE(Beat(core, Worker("w2", 4), kSecond / 10).ok());
  auto grant = core.JobBeat(job, kSecond / 5);
  ASSERT_TRUE(grant.ok());
  ASSERT_EQ(grant->workers_size(), 1);
  EXPECT_EQ(grant->workers(0).worker_id(), "w2");
  EXPECT_DOUBLE_EQ(grant->workers(0).cores(), 2);

  // Without the report, the same arrival order puts a new job on w1.
  SchedulerCore fresh({});
  ASSERT_TRUE(Beat(fresh, Worker("w1", 4), 0).ok());
  ASSERT_TRUE(Beat(fresh, Worker("w2", 4), 0).ok());
  EXPECT_EQ(fresh.JobBeat(Job("a", 2), 0)->workers(0).worker_id(), "w1");
}

TEST(SchedulerCore, BadBeatsNameTheField) {
  SchedulerCore core({});
  EXPECT_THAT(Beat(core, Worker("", 4), 0).status().message(), HasSubstr("worker_id"));
  proto::WorkerBeat no_address = Worker("w", 4);
  no_address.clear_address();
  EXPECT_THAT(Beat(core, no_address, 0).status().message(), HasSubstr("address"));
  EXPECT_THAT(Beat(core, Worker("w", 0), 0).status().message(), HasSubstr("cores"));
  // A worker's id, address and labels are bounded and printable too: they
  // go into logs, metric labels and every job's grant.
  for (const std::string& id : {std::string("two\nlines"), std::string(1 << 20, 'w')}) {
    EXPECT_THAT(Beat(core, Worker(id, 4), 0).status().message(),
                HasSubstr("worker_id must be at most 256 printable characters"));
  }
  proto::WorkerBeat far = Worker("w3", 4);
  far.set_address(std::string(1 << 20, 'a'));
  EXPECT_THAT(Beat(core, far, 0).status().message(),
              HasSubstr("address must be 1 to 256 printable characters"));
  proto::WorkerBeat labelled = Worker("w3", 4);
  (*labelled.mutable_labels())["zone"] = std::string(3 << 20, 'z');
  EXPECT_THAT(Beat(core, labelled, 0).status().message(),
              HasSubstr("label 'zone': keys are 1 to 63 bytes, values at most 256"));
  proto::WorkerBeat bad_lease = Worker("w2", 4);
  bad_lease.set_lease(std::string(1 << 20, 'z'));  // a megabyte to store as a "lease"
  EXPECT_THAT(core.WorkerBeat(bad_lease, 0).status().message(),
              HasSubstr("lease is not 32 hex digits"));
  EXPECT_THAT(core.JobBeat(Job("", 1), 0).status().message(), HasSubstr("job_id"));
  EXPECT_THAT(core.JobBeat(Job("j", -1), 0).status().message(), HasSubstr("wanted_cores"));
  EXPECT_EQ(core.JobBeat(Job("j", -1), 0).status().code(), absl::StatusCode::kInvalidArgument);
  // What a job's key, logs and metric labels are made of: bounded, printable,
  // and never the separator of (job, rank) keys.
  for (const std::string& id : {std::string("a\x1f"
                                            "0"),
                                std::string("two\nlines"), std::string(1 << 20, 'j')}) {
    EXPECT_THAT(core.JobBeat(Job(id, 1), 0).status().message(),
                HasSubstr("job_id must be at most 256 printable characters"));
  }
  proto::JobBeat big_instance = Job("j", 1);
  big_instance.set_instance(std::string(1 << 20, 'i'));
  EXPECT_THAT(core.JobBeat(big_instance, 0).status().message(),
              HasSubstr("instance must be at most 64 bytes"));
  EXPECT_EQ(core.counts().ranks, 0);
}

// A beat repointing a registered worker_id to another address is refused
// (and counted) unless it carries the registration's lease, and, with mutual
// TLS, comes from the same certificate identity. After the worker expires
// the id is free again.
TEST(SchedulerCore, AWorkerIdCannotBeRepointedByAnotherSender) {
  SchedulerOptions o;
  o.expire_after_seconds = 6;
  SchedulerCore core(o);
  auto first = core.WorkerBeat(Worker("w1", 4), 0, "worker-a");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->lease().size(), 32u);
  EXPECT_NE(core.WorkerBeat(Worker("w2", 4), 0)->lease(), first->lease());

  proto::WorkerBeat hijack = Worker("w1", 4);
  hijack.set_address("evil:7000");
  auto no_lease = core.WorkerBeat(hijack, 1 * kSecond, "worker-a");
  EXPECT_EQ(no_lease.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(no_lease.status().message(), HasSubstr("w1 is registered to another worker"));
  hijack.set_lease(first->lease());
  auto other_identity = core.WorkerBeat(hijack, 1 * kSecond, "worker-b");
  EXPECT_EQ(other_identity.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core.counts().refused_beats, 2);

  auto grant = core.JobBeat(Job("j", 4), 2 * kSecond);
  ASSERT_EQ(grant->workers_size(), 1);
  EXPECT_EQ(grant->workers(0).address(), "w1:7000") << "the grant still names the real worker";
  EXPECT_EQ(grant->workers(0).tls_name(), "worker-a");

  // The owner itself may move (a new port), with its lease and identity.
  proto::WorkerBeat moved = Worker("w1", 4);
  moved.set_address("w1:7001");
  moved.set_lease(first->lease());
  EXPECT_TRUE(core.WorkerBeat(moved, 3 * kSecond, "worker-a").ok());
  // Once it has expired, the id may be registered afresh.
  core.Expire(10 * kSecond);
  EXPECT_TRUE(core.WorkerBeat(hijack, 10 * kSecond, "worker-b").ok());
}

// Round 3: a worker-token holder that beat first after a scheduler restart
// took a real worker's id, and the real worker was refused every 2 s. Leases
// are signed with the scheduler's key: with the same key after the restart,
// the real worker's lease takes its id back from whoever registered it
// without one (or with one the key did not sign).
TEST(SchedulerCore, AWorkersLeaseSurvivesARestartOfTheScheduler) {
  SchedulerOptions o;
  o.expire_after_seconds = 6;
  o.lease_key = "a lease key of at least sixteen bytes";
  std::string lease;
  {
    SchedulerCore before(o);
    auto r = before.WorkerBeat(Worker("w1", 4), 0);
    ASSERT_TRUE(r.ok()) << r.status();
    lease = r->lease();
  }
  proto::WorkerBeat real = Worker("w1", 4);
  real.set_lease(lease);
  for (const std::string made_up : {"", "0123456789abcdef0123456789abcdef"}) {
    SchedulerCore after(o);
    proto::WorkerBeat impostor = Worker("w1", 4);
    impostor.set_address("evil:7000");
    impostor.set_lease(made_up);
    auto taken = after.WorkerBeat(impostor, 0);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_NE(taken->lease(), made_up) << "a lease the key did not sign was kept";
    auto back = after.WorkerBeat(real, 1 * kSecond);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->lease(), lease);
    impostor.set_lease(taken->lease());
    EXPECT_EQ(after.WorkerBeat(impostor, 2 * kSecond).status().code(),
              absl::StatusCode::kPermissionDenied);
    auto grant = after.JobBeat(Job("j", 4), 2 * kSecond);
    ASSERT_EQ(grant->workers_size(), 1);
    EXPECT_EQ(grant->workers(0).address(), "w1:7000");
  }
  // Past the settling period a registration is firm: a new worker process
  // that registered w1 then is not displaced by an old lease.
  SchedulerCore settled(o);
  ASSERT_TRUE(settled.WorkerBeat(Worker("w2", 4), 0).ok());
  ASSERT_TRUE(settled.WorkerBeat(Worker("w1", 4), 7 * kSecond).ok());
  EXPECT_EQ(settled.WorkerBeat(real, 8 * kSecond).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Under another key (none given: one of the process's own) the old lease
  // proves nothing, and the first beat keeps the id.
  SchedulerCore rekeyed({});
  proto::WorkerBeat first = Worker("w1", 4);
  first.set_address("evil:7000");
  ASSERT_TRUE(rekeyed.WorkerBeat(first, 0).ok());
  EXPECT_EQ(rekeyed.WorkerBeat(real, 1 * kSecond).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A training job's ranks share one fair share: a 3-rank job and a 1-rank
// job of equal weight get the same cores per job, the 3-rank job's split
// among its ranks max-min by what each wants; the metrics' counts see both
// levels.
TEST(SchedulerCore, ARanksJobGetsOneFairShareSplitAmongItsRanks) {
  SchedulerCore core({});
  for (const char* w : {"w1", "w2", "w3"}) ASSERT_TRUE(Beat(core, Worker(w, 2), 0).ok());
  auto rank = [](int r, double wanted, const std::string& instance) {
    proto::JobBeat b = Job("big", wanted);
    b.set_rank(r);
    b.set_world_size(3);
    b.set_instance(instance);
    return b;
  };
  // The big job's ranks want 0.5, 2 and 3 cores; the small job 6.
  const double wants[] = {0.5, 2, 3};
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(core.JobBeat(rank(r, wants[r], "i" + std::to_string(r)), 0).ok());
  }
  proto::JobBeat small = Job("small", 6);
  small.set_instance("s");
  auto small_grant = core.JobBeat(small, 0);
  ASSERT_TRUE(small_grant.ok());
  EXPECT_DOUBLE_EQ(small_grant->fair_share_cores(), 3);
  EXPECT_DOUBLE_EQ(small_grant->job_fair_share_cores(), 3);
  EXPECT_DOUBLE_EQ(Granted(*small_grant), 3);
  double big_total = 0;
  for (int r = 0; r < 3; ++r) {
    auto g = core.JobBeat(rank(r, wants[r], "i" + std::to_string(r)), 0);
    ASSERT_TRUE(g.ok());
    EXPECT_DOUBLE_EQ(g->job_fair_share_cores(), 3);
    const double part = r == 0 ? 0.5 : 1.25;  // rank 0 wants less than an equal part
    EXPECT_DOUBLE_EQ(g->fair_share_cores(), part) << "rank " << r;
    EXPECT_NEAR(Granted(*g), part, 1e-9) << "rank " << r;
    big_total += Granted(*g);
  }
  EXPECT_NEAR(big_total, 3, 1e-9);
  const SchedulerCounts c = core.counts();
  EXPECT_EQ(c.jobs, 2);
  EXPECT_EQ(c.ranks, 4);
  EXPECT_DOUBLE_EQ(c.job_shares.at("big"), 3);
  EXPECT_DOUBLE_EQ(c.rank_shares.at({"big", 2}), 1.25);

  // Another process claiming rank 1 is refused while rank 1 beats...
  auto twin = core.JobBeat(rank(1, 2, "impostor"), kSecond);  // wants as rank 1 does
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(twin.status().message(), HasSubstr("job big rank 1 is held by another process"));
  EXPECT_EQ(core.counts().refused_job_beats, 1);
  // ... and its leaving beat does not release rank 1; rank 1's own does, at
  // once, and then a restarted rank 1 is welcome.
  proto::JobBeat leave = rank(1, 0, "impostor");
  leave.set_leaving(true);
  ASSERT_TRUE(core.JobBeat(leave, kSecond).ok());
  EXPECT_EQ(core.counts().ranks, 4);
  leave.set_instance("i1");
  ASSERT_TRUE(core.JobBeat(leave, kSecond).ok());
  EXPECT_EQ(core.counts().ranks, 3);
  EXPECT_TRUE(core.JobBeat(rank(1, 2, "restarted"), kSecond).ok());
  EXPECT_EQ(core.counts().ranks, 4);

  proto::JobBeat bad = rank(3, 1, "x");
  EXPECT_THAT(core.JobBeat(bad, kSecond).status().message(),
              HasSubstr("rank 3 is outside [0, world_size 3)"));
}

// Round 3 of the hostile review: a job-chosen weight of 1e9 took the pool,
// and two of 1.7e308 overflowed the allocator (21 of 32 cores idle). Weights
// count up to --max-job-weight.
TEST(SchedulerCore, AJobsWeightCountsUpToTheOperatorsLimit) {
  for (const double claimed : {1e9, 1.7e308}) {
    SchedulerOptions options;
    options.max_job_weight = 3;
    SchedulerCore core(options);
    ASSERT_TRUE(Beat(core, Worker("w1", 32), 0).ok());
    proto::JobBeat greedy = Job("greedy", 32), other = Job("other", 32), modest = Job("modest", 32);
    greedy.set_weight(claimed);
    other.set_weight(claimed);
    ASSERT_TRUE(core.JobBeat(greedy, 0).ok());
    ASSERT_TRUE(core.JobBeat(other, 0).ok());
    auto g = core.JobBeat(modest, 0);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_DOUBLE_EQ(g->fair_share_cores(), 32.0 / 7) << claimed;  // 1 of 3 + 3 + 1
    EXPECT_NEAR(core.counts().granted_cores, 32, 1e-9) << "cores left idle at " << claimed;
    EXPECT_DOUBLE_EQ(core.counts().job_shares.at("greedy"), 32.0 * 3 / 7);
  }
}

// One client naming many jobs took 30/31 of the pool; a job's ranks count
// once, another host has its own count, and a job that leaves frees a place.
TEST(SchedulerCore, ACredentialHoldsAtMostItsJobs) {
  SchedulerOptions options;
  options.max_jobs_per_credential = 2;
  SchedulerCore core(options);
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  proto::JobBeat a = Job("a", 1), b = Job("b", 1), c = Job("c", 1);
  b.set_world_size(2);
  ASSERT_TRUE(core.JobBeat(a, 0, "", "ipv4:10.0.0.1").ok());
  ASSERT_TRUE(core.JobBeat(b, 0, "", "ipv4:10.0.0.1").ok());
  b.set_rank(1);
  ASSERT_TRUE(core.JobBeat(b, 0, "", "ipv4:10.0.0.1").ok()) << "a job's second rank";
  auto refused = core.JobBeat(c, 0, "", "ipv4:10.0.0.1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("ipv4:10.0.0.1 holds 2 training jobs, this scheduler's "
                        "--max-jobs-per-credential"));
  EXPECT_TRUE(core.JobBeat(c, 0, "", "ipv4:10.0.0.2").ok()) << "another host";
  proto::JobBeat leave = a;
  leave.set_leaving(true);
  ASSERT_TRUE(core.JobBeat(leave, 0, "", "ipv4:10.0.0.1").ok());
  EXPECT_TRUE(core.JobBeat(Job("d", 1), 0, "", "ipv4:10.0.0.1").ok());
}

// With mutual TLS a job_id belongs to the certificate that first beat for
// it: another tenant cannot take a rank of it (or run beside it as one job).
TEST(SchedulerCore, AJobIdIsBoundToTheCertificateThatHoldsIt) {
  SchedulerCore core({});
  ASSERT_TRUE(Beat(core, Worker("w1", 4), 0).ok());
  proto::JobBeat rank0 = Job("train", 1);
  rank0.set_world_size(2);
  ASSERT_TRUE(core.JobBeat(rank0, 0, "tenant-a", "ipv4:10.0.0.1").ok());
  proto::JobBeat rank1 = rank0;
  rank1.set_rank(1);
  auto refused = core.JobBeat(rank1, 0, "tenant-b", "ipv4:10.0.0.9");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("job train is held by another client"));
  EXPECT_TRUE(core.JobBeat(rank1, 0, "tenant-a", "ipv4:10.0.0.2").ok())
      << "its own rank, elsewhere";
}

// A beat's labels are bounded: 100 jobs with 3 MB labels grew the scheduler
// by 300 MB.
TEST(SchedulerCore, LabelsAreBounded) {
  SchedulerCore core({});
  proto::JobBeat many = Job("j", 1);
  for (int i = 0; i < 33; ++i) (*many.mutable_labels())["k" + std::to_string(i)] = "v";
  EXPECT_THAT(core.JobBeat(many, 0).status().message(), HasSubstr("at most 32 labels, got 33"));
  proto::JobBeat big = Job("j", 1);
  (*big.mutable_labels())["zone"] = std::string(3 << 20, 'x');
  EXPECT_EQ(core.JobBeat(big, 0).status().code(), absl::StatusCode::kInvalidArgument);
  (*big.mutable_labels())["zone"] = std::string(256, 'x');
  EXPECT_TRUE(core.JobBeat(big, 0).ok());
}

}  // namespace
}  // namespace prepflow::scheduler
