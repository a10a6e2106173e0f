// The planner against hand-solved cases and against a grid search.
#include "policy/planner.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/rng.h"

namespace prepflow::policy {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr double kTol = 1e-6;

// decode 8 ms, crop 2 ms; 600 KB after decode, 150 KB after the crop.
PlanInput TwoStages() {
  PlanInput in;
  in.local_cost = {0.008, 0.002};
  in.boundary_bytes = {600e3, 150e3};
  in.local_cores = 1;
  return in;
}

TEST(Planner, StaysLocalWhenLocalCpuMeetsDemand) {
  PlanInput in = TwoStages();
  in.remote_cores = 4;
  in.demand = 80;  // local alone does 100/s
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear(80, kTol), DoubleNear(0, kTol), DoubleNear(0, kTol)));
  EXPECT_NEAR(plan->remote_cores_used, 0, kTol);
  EXPECT_EQ(plan->workers, 0);
  EXPECT_EQ(plan->remote_fraction, 0);
  EXPECT_THAT(plan->binding, ElementsAre(Binding::kDemand));
}

// Two workers of one core, one behind a 3 MB/s link. All remote sends 150 KB
// for 10 ms of CPU (15 MB per CPU-second), so the far worker can use 0.2 of
// its core: 1 + 1 + 0.2 cores at 10 ms a sample give 220/s, not 300.
TEST(Planner, AWorkerBehindATightLinkCountsOnlyTheCoresItsLinkCarries) {
  PlanInput in = TwoStages();
  in.remote_cores = 2;
  in.worker_links = {{1, 3e6}};
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 220, kTol);
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear(100, kTol), DoubleNear(0, kTol), DoubleNear(120, kTol)));
  EXPECT_NEAR(plan->remote_cores_used, 1.2, kTol);
  EXPECT_THAT(plan->binding,
              UnorderedElementsAre(Binding::kLocalCpu, Binding::kRemoteCpu, Binding::kWorkerLinks));
  EXPECT_THAT(plan->explanation, HasSubstr("workers' links"));
  // A fixed split is scored the same way: a quarter here, the rest remote.
  auto rate = ThroughputOf(in, {0.25, 0, 0.75});
  ASSERT_TRUE(rate.ok());
  EXPECT_NEAR(*rate, 1.2 / 0.0075, kTol);  // 2 / 0.0075 without the link
  // A link that carries more than its worker's cores need takes nothing away.
  in.worker_links = {{1, 100e6}};
  plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 300, kTol);
  EXPECT_THAT(plan->binding, UnorderedElementsAre(Binding::kLocalCpu, Binding::kRemoteCpu));
}

// The cut a plan takes sets what a link-bound worker can give (cut 1 sends
// 75 MB per remote CPU-second, all remote 15), and that can change the cut.
// Over links from far too tight to ample, the plan's rate is what
// ThroughputOf gives its split (scored at its own bytes per CPU-second), and
// no simple split of local and one cut does better.
TEST(Planner, PlansWithLinksAgreeWithTheirOwnScore) {
  for (double link : {0.5e6, 3e6, 20e6, 60e6, 400e6}) {
    PlanInput in = TwoStages();
    in.local_cores = 0.5;
    in.remote_cores = 3;
    in.worker_links = {{1, link}, {1, link / 3}};
    in.bandwidth = 40e6;
    auto plan = MakePlan(in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<double> share = plan->rate;
    for (double& f : share) f /= plan->throughput;
    auto scored = ThroughputOf(in, share);
    ASSERT_TRUE(scored.ok());
    EXPECT_NEAR(plan->throughput, *scored, 1e-6 * *scored) << "link " << link;
    // Never below the best of the two single remote cuts mixed with local.
    for (double f : {0.0, 0.25, 0.5, 0.75, 0.9}) {
      for (size_t k : {1, 2}) {
        std::vector<double> split = {1 - f, 0, 0};
        split[k] = f;
        auto other = ThroughputOf(in, split);
        ASSERT_TRUE(other.ok());
        EXPECT_GE(plan->throughput, *other * (1 - 1e-6)) << "link " << link << " cut " << k;
      }
    }
  }
}

TEST(Planner, RefusesAWorkerLinkWithNegativeOrNaNFigures) {
  PlanInput in = TwoStages();
  in.remote_cores = 2;
  in.worker_links = {{-1, 3e6}};
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("worker link"));
  in.worker_links = {{1, std::nan("")}};
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("worker link"));
}

TEST(Planner, UsesEveryCoreAndSendsTheSmallerBoundary) {
  // Every sample needs 10 ms of CPU wherever it runs, so 3 cores give 300/s
  // whichever paths are mixed; the tie on remote cores (2 in every case) is
  // broken by bytes: cut 2 sends 150 KB a sample, cut 1 600 KB.
  PlanInput in = TwoStages();
  in.remote_cores = 2;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 300, kTol);
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear(100, kTol), DoubleNear(0, kTol), DoubleNear(200, kTol)));
  EXPECT_NEAR(plan->remote_cores_used, 2, kTol);
  EXPECT_NEAR(plan->network_bytes_per_s, 200 * 150e3, 1);
  EXPECT_NEAR(plan->remote_fraction, 2.0 / 3, kTol);
  EXPECT_THAT(plan->binding, UnorderedElementsAre(Binding::kLocalCpu, Binding::kRemoteCpu));
}

// Reading 100 KB a sample from storage that gives the trainer and the
// workers 10 MB/s each: 100 samples/s a side.
PlanInput StorageBound() {
  PlanInput in = TwoStages();
  in.remote_cores = 8;
  in.read_bytes = 100e3;
  in.local_storage_bandwidth = 10e6;
  in.remote_storage_bandwidth = 10e6;
  return in;
}

TEST(Planner, StorageReadsBindAndCachesAndEchoesLiftThem) {
  auto plan = MakePlan(StorageBound());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 200, kTol);  // 100 local (CPU and storage), 100 remote
  EXPECT_THAT(plan->binding, ::testing::Contains(Binding::kRemoteStorage));
  // Half the loads answered by caches: the workers' reads carry twice as
  // many samples; the trainer is CPU-bound at 100/s.
  PlanInput cached = StorageBound();
  cached.cache_hit = 0.5;
  plan = MakePlan(cached);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 300, kTol);
  EXPECT_THAT(plan->explanation, HasSubstr("50% cached"));
  // Two copies a load do the same.
  PlanInput echoed = StorageBound();
  echoed.echo = 2;
  plan = MakePlan(echoed);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 300, kTol);
}

// One store both sides share (S = 10 MB/s together), and neither side seen
// reading alone, so each is taken to get S alone too (the re-planner's
// prudent reading): whichever side reads, 100 samples/s in all, so
// offloading gains nothing and the fewest remote cores win: all local.
TEST(Planner, AStoreBothSidesShareCapsTheirReadsTogether) {
  PlanInput in = StorageBound();
  in.local_storage_bandwidth = in.remote_storage_bandwidth = in.storage_bandwidth = 10e6;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 100, kTol);
  EXPECT_NEAR(plan->remote_fraction, 0, kTol);
  EXPECT_THAT(plan->binding, ::testing::Contains(Binding::kSharedStorage));
  EXPECT_THAT(plan->explanation, HasSubstr("storage reads here and on workers together"));
  EXPECT_NEAR(*ThroughputOf(in, {0.5, 0, 0.5}), 100, kTol);
  EXPECT_NEAR(*ThroughputOf(in, {0, 0, 1}), 100, kTol);
  // The log line names the limit found and says "none" for the sides that
  // have none (not 1e300 B/s written out in full).
  in.local_storage_bandwidth = in.remote_storage_bandwidth = 1e300;
  EXPECT_THAT(DescribeInput(in), HasSubstr(", storage none / none / 10.0 MB/s (here / workers"));
  in.storage_bandwidth = -1;
  EXPECT_THAT(std::string(MakePlan(in).status().message()), HasSubstr("storage_bandwidth"));
}

// S is what the two sides got reading at once (the testbed's store behind
// one link gave 5.8 MB/s so, and 6.1 to the workers alone): it binds only
// placements where both read. The workers alone at 12 MB/s give 120
// samples/s, past the 100 any placement that reads on both sides gets, so
// every sample goes to the workers; all local is held by its CPU (and its
// own 10 MB/s) at 100.
TEST(Planner, WhatBothSidesReadTogetherBindsOnlyPlacementsWhereBothRead) {
  PlanInput in = StorageBound();
  in.storage_bandwidth = 10e6;
  in.remote_storage_bandwidth = 12e6;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 120, kTol);
  EXPECT_NEAR(plan->rate[0], 0, kTol);
  EXPECT_NEAR(plan->remote_fraction, 1, kTol);
  EXPECT_THAT(plan->binding, ::testing::Contains(Binding::kRemoteStorage));
  EXPECT_THAT(plan->binding, ::testing::Not(::testing::Contains(Binding::kSharedStorage)));
  EXPECT_THAT(plan->explanation, ::testing::StartsWith("120.0 samples/s: cut"));
  EXPECT_NEAR(*ThroughputOf(in, {0, 0.5, 0.5}), 120, kTol);  // one side: its own limit
  EXPECT_NEAR(*ThroughputOf(in, {0.1, 0, 0.9}), 100, kTol);  // both: S
  EXPECT_NEAR(*ThroughputOf(in, {1, 0, 0}), 100, kTol);
  // Where the trainer alone gets more than the workers alone, all local
  // wins, at its CPU's 100 samples/s when its storage allows that.
  in.remote_storage_bandwidth = 5e6;
  in.local_storage_bandwidth = 20e6;
  in.storage_bandwidth = 8e6;
  plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 100, kTol);
  EXPECT_NEAR(plan->remote_fraction, 0, kTol);
  // No cut before min_cut: every sample reads on the workers.
  in.min_cut = 1;
  plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 50, kTol);
  EXPECT_NEAR(plan->rate[0], 0, kTol);
  in.max_cut = 0;
  EXPECT_THAT(std::string(MakePlan(in).status().message()), HasSubstr("min_cut 1"));
}

TEST(Planner, OnlyPathsThatReachTheReuseBoundaryReuse) {
  // The decode (stage 0) runs once per load: with half the loads cached, a
  // sample costs 4 + 2 ms on the local path and at cut 2; at cut 1... also
  // (it reaches boundary 1). Boundary 2 instead: cut 1 reuses nothing.
  PlanInput in = TwoStages();
  in.remote_cores = 1;
  in.cache_hit = 0.5;
  in.reuse_at = 1;
  EXPECT_NEAR(*ThroughputOf(in, {1, 0, 0}), 1 / 0.006, 1e-6);
  EXPECT_NEAR(*ThroughputOf(in, {0, 1, 0}), 1 / 0.004, 1e-6);  // 4 ms remote, 2 ms here
  in.reuse_at = 2;
  EXPECT_NEAR(*ThroughputOf(in, {0, 1, 0}), 1 / 0.008, 1e-6);  // 8 ms remote: no reuse
  EXPECT_NEAR(*ThroughputOf(in, {0, 0, 1}), 1 / 0.005, 1e-6);  // (8 + 2) / 2 remote
  in.cache_hit = 1.5;
  EXPECT_THAT(std::string(MakePlan(in).status().message()), HasSubstr("cache_hit in [0, 1]"));
}

TEST(Planner, AutoEchoIsTheSmallestFactorThatMeetsTheDemand) {
  PlanInput in = StorageBound();
  in.demand = 250;
  Plan plan;
  auto echo = ChooseEcho(in, 8, &plan);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(*echo, 2);  // 200/s fresh; 300/s with two copies
  EXPECT_NEAR(plan.throughput, 250, kTol);
  in.demand = 150;
  EXPECT_EQ(*ChooseEcho(in, 8, &plan), 1);  // fresh samples suffice
  in.demand = 10000;                        // storage is not all that binds: CPU does at 900/s
  EXPECT_EQ(*ChooseEcho(in, 3, &plan), 3);
  EXPECT_FALSE(ChooseEcho(in, 0, &plan).ok());
}

TEST(Planner, AutoEchoStopsWhereMoreCopiesGainNothing) {
  // No factor meets an unlimited demand (a CLI run, a trainer that never
  // waits). The workers' storage gives 100 loads/s and their CPU 800
  // samples/s, so echo 8 reaches 900/s with the trainer's 100, and echo 12
  // no more: the fewest copies within 2% of the best win.
  PlanInput in = StorageBound();
  Plan plan;
  std::vector<double> reached;
  for (int e = 1; e <= 12; ++e) {
    in.echo = e;
    reached.push_back(MakePlan(in)->throughput);
  }
  EXPECT_NEAR(reached[7], 900, kTol);
  EXPECT_NEAR(reached[11], 900, kTol);
  EXPECT_LT(reached[6], 0.98 * 900);
  in.demand = 1e300;
  EXPECT_EQ(*ChooseEcho(in, 12, &plan), 8);
  EXPECT_NEAR(plan.throughput, 900, kTol);
  in.demand = 1e6;
  EXPECT_EQ(*ChooseEcho(in, 12, &plan), 8);
  EXPECT_EQ(*ChooseEcho(in, 5, &plan), 5);  // the cap
}

TEST(Planner, NoCutPastALocalOnlyStage) {
  // As above, but stage 1 (the crop, say a plugin's op the workers lack)
  // must run here: cut 2 is out, so cut 1 carries the remote share, with its
  // larger boundary; 300/s is still reached.
  PlanInput in = TwoStages();
  in.remote_cores = 2;
  in.max_cut = 1;
  in.max_cut_why = "stage 1: custom op 'crop' is not loaded on w1";
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 300, kTol);
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear(50, kTol), DoubleNear(250, kTol), DoubleNear(0, kTol)));
  EXPECT_THAT(plan->explanation,
              HasSubstr("no cut past 1 (stage 1: custom op 'crop' is not loaded on w1)"));
  in.max_cut = 0;  // nothing remote at all
  plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 100, kTol);
  EXPECT_EQ(plan->remote_fraction, 0);
  in.max_cut = 3;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("max_cut 3 is outside [-1, 2]"));
}

TEST(Planner, FixedLocalWorkCountsOnEveryPath) {
  // 10 ms of batch ops here per sample, on every path: one local core caps
  // everything at 100/s however many remote cores there are, and the plan
  // sends what it can to them.
  PlanInput in = TwoStages();
  in.remote_cores = 8;
  in.fixed_local_cost = 0.010;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->throughput, 100, kTol);
  EXPECT_NEAR(plan->local_cores_used, 1, kTol);
  EXPECT_NEAR(plan->rate[0], 0, kTol);  // no local stages: the CPU here is the batch ops'
  in.fixed_local_cost = -1;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("fixed_local_cost"));
}

TEST(Planner, ATightNetworkMovesTheCutToFewerBytes) {
  // normalize makes the sample 4x bigger again: all-remote sends 600 KB, cut 2
  // (normalize here) 150 KB. 30 MB/s then allows 200/s through cut 2, using
  // 0.2 local cores; the other 0.8 run 80/s fully local: 280/s.
  PlanInput in;
  in.local_cost = {0.008, 0.001, 0.001};
  in.boundary_bytes = {600e3, 150e3, 600e3};
  in.local_cores = 1;
  in.remote_cores = 4;
  in.bandwidth = 30e6;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 280, kTol);
  EXPECT_THAT(plan->rate, ElementsAre(DoubleNear(80, kTol), DoubleNear(0, kTol),
                                      DoubleNear(200, kTol), DoubleNear(0, kTol)));
  EXPECT_NEAR(plan->remote_cores_used, 1.8, kTol);
  EXPECT_THAT(plan->binding, UnorderedElementsAre(Binding::kLocalCpu, Binding::kNetwork));
  EXPECT_THAT(plan->explanation, HasSubstr("cut 2 71%"));
  EXPECT_THAT(plan->explanation, HasSubstr("bound by local CPU and network"));

  // With bandwidth to spare the plan sends everything remote instead.
  in.bandwidth = 1e12;
  auto wide = MakePlan(in);
  ASSERT_TRUE(wide.ok());
  EXPECT_GT(wide->throughput, 280);
}

TEST(Planner, FewestRemoteCoresThenFewestBytesAtTheDemand) {
  // 150/s wanted, 100/s possible here. Offloading at cut 1 frees 8 ms of local
  // CPU for 8 ms remote, at cut 2 10 ms for 10 ms: both need 0.5 remote cores.
  // Cut 2 sends 7.5 MB/s, cut 1 would send 37.5 MB/s.
  PlanInput in = TwoStages();
  in.remote_cores = 10;
  in.demand = 150;
  in.cores_per_worker = 0.25;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear(100, kTol), DoubleNear(0, kTol), DoubleNear(50, kTol)));
  EXPECT_NEAR(plan->remote_cores_used, 0.5, kTol);
  EXPECT_EQ(plan->workers, 2);
  EXPECT_NEAR(plan->network_bytes_per_s, 7.5e6, 1);
  EXPECT_THAT(plan->binding, UnorderedElementsAre(Binding::kLocalCpu, Binding::kDemand));
}

TEST(Planner, RemoteCostsMayDifferFromLocal) {
  // Workers are twice as slow per core: 2 remote cores are worth 1 local.
  PlanInput in = TwoStages();
  in.remote_cost = {0.016, 0.004};
  in.remote_cores = 2;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(plan->throughput, 200, kTol);
}

TEST(Planner, TransportCostsBreakTheTieTowardsFewerBytes) {
  // decode 6 ms, crop 1 ms, normalize 1 ms; 600/150/600 KB after each. With
  // free transport every mix of paths needs 8 ms a sample: 2 cores give 250/s.
  // Receiving costs 1 ms per MB here: cut 1 now costs 2.6 ms here, cut 2
  // 1.15 ms, all remote 0.6 ms. Best: cut 2 at 1000/7 = 142.86/s on the
  // remote core, and the local core's remaining 835.7 ms run 104.46/s locally.
  PlanInput in;
  in.local_cost = {0.006, 0.001, 0.001};
  in.boundary_bytes = {600e3, 150e3, 600e3};
  in.local_cores = 1;
  in.remote_cores = 1;
  auto free_transport = MakePlan(in);
  ASSERT_TRUE(free_transport.ok());
  EXPECT_NEAR(free_transport->throughput, 250, kTol);

  in.local_cost_per_byte = 1e-9;
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->rate,
              ElementsAre(DoubleNear((1000 - 1.15 * 1000 / 7) / 8, kTol), DoubleNear(0, kTol),
                          DoubleNear(1000.0 / 7, kTol), DoubleNear(0, kTol)));
  EXPECT_NEAR(plan->local_cores_used, 1, kTol);

  // Sending costs the worker 1 ms per MB too: cut 2 takes 7.15 ms there.
  in.remote_cost_per_byte = 1e-9;
  plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  const double y2 = 1000 / 7.15;
  EXPECT_THAT(plan->rate, ElementsAre(DoubleNear((1000 - 1.15 * y2) / 8, kTol), DoubleNear(0, kTol),
                                      DoubleNear(y2, kTol), DoubleNear(0, kTol)));

  in.remote_cost_per_byte = -1;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("transport cost per byte"));
}

TEST(Planner, ThroughputOfAFixedSplit) {
  // A third local (10 ms here), two thirds at cut 2 (10 ms remote, 150 KB):
  // 1 local core and 2 remote cores both give 300/s.
  PlanInput in = TwoStages();
  in.remote_cores = 2;
  auto t = ThroughputOf(in, {1.0 / 3, 0, 2.0 / 3});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(*t, 300, kTol);
  // All local: the local core alone, 100/s. A 15 MB/s link caps cut 2 at 100/s.
  EXPECT_NEAR(*ThroughputOf(in, {1, 0, 0}), 100, kTol);
  in.bandwidth = 15e6;
  EXPECT_NEAR(*ThroughputOf(in, {0, 0, 1}), 100, kTol);
  // The planner's own split scores what the planner predicted.
  auto plan = MakePlan(in);
  ASSERT_TRUE(plan.ok());
  std::vector<double> fractions;
  for (double r : plan->rate) fractions.push_back(r / plan->throughput);
  EXPECT_NEAR(*ThroughputOf(in, fractions), plan->throughput, 1e-6 * plan->throughput);

  EXPECT_THAT(ThroughputOf(in, {0.5, 0.5}).status().message(), HasSubstr("2 given for 3 paths"));
  EXPECT_THAT(ThroughputOf(in, {0.5, 0.2, 0.2}).status().message(), HasSubstr("sum to 0.9"));
  EXPECT_THAT(ThroughputOf(in, {1.5, -0.5, 0}).status().message(), HasSubstr("< 0"));
}

TEST(Planner, InvalidInputsNameTheField) {
  PlanInput in = TwoStages();
  in.boundary_bytes = {1};
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("boundary_bytes 1"));
  in = TwoStages();
  in.local_cost[1] = -1;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("stage 1"));
  in = TwoStages();
  in.local_cores = -1;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("local_cores"));
  in = TwoStages();
  in.local_cost = {0, 0};
  in.remote_cores = 1;
  EXPECT_THAT(MakePlan(in).status().message(), HasSubstr("unbounded"));
  in.demand = 50;
  EXPECT_TRUE(MakePlan(in).ok());
}

// The best mixture of at most two paths found on a 1% grid, as a lower bound
// the exact plan must reach.
double GridBest(const PlanInput& in) {
  const size_t n = in.local_cost.size();
  const std::vector<double>& remote = in.remote_cost.empty() ? in.local_cost : in.remote_cost;
  std::vector<std::array<double, 4>> use(n + 1);
  for (size_t k = 0; k <= n; ++k) {
    double l = 0, r = 0;
    for (size_t i = 0; i < n; ++i) (i >= k ? l : r) += i >= k ? in.local_cost[i] : remote[i];
    use[k] = {l, r, k ? in.boundary_bytes[k - 1] : 0, 1};
  }
  const double cap[4] = {in.local_cores, in.remote_cores, in.bandwidth, in.demand};
  double best = 0;
  for (size_t a = 0; a <= n; ++a) {
    for (size_t b = a; b <= n; ++b) {
      for (int step = 0; step <= 100; ++step) {
        const double alpha = step / 100.0;
        double scale = 1e300;
        for (int r = 0; r < 4; ++r) {
          const double per = alpha * use[a][r] + (1 - alpha) * use[b][r];
          if (per > 0) scale = std::min(scale, cap[r] / per);
        }
        best = std::max(best, scale);
      }
    }
  }
  return best;
}

TEST(Planner, NeverWorseThanAGridSearchAndAlwaysFeasible) {
  SampleRng rng(7, 0, 0, 0);
  for (int trial = 0; trial < 300; ++trial) {
    PlanInput in;
    const int n = 1 + static_cast<int>(rng.UniformInt(0, 5));
    for (int i = 0; i < n; ++i) {
      in.local_cost.push_back(rng.Uniform(1e-4, 1e-2));
      in.boundary_bytes.push_back(rng.Uniform(1e4, 1e6));
    }
    if (trial % 2) {
      for (double c : in.local_cost) in.remote_cost.push_back(c * rng.Uniform(0.5, 2));
    }
    in.local_cores = rng.Uniform(0.25, 4);
    in.remote_cores = rng.Uniform(0, 16);
    in.bandwidth = trial % 3 ? rng.Uniform(1e6, 1e9) : 1e300;
    in.demand = trial % 5 ? 1e300 : rng.Uniform(10, 5000);
    auto plan = MakePlan(in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GE(plan->throughput, GridBest(in) * (1 - 1e-9)) << "trial " << trial;
    EXPECT_LE(plan->local_cores_used, in.local_cores * (1 + 1e-9));
    EXPECT_LE(plan->remote_cores_used, in.remote_cores * (1 + 1e-9) + 1e-12);
    EXPECT_LE(plan->network_bytes_per_s, in.bandwidth * (1 + 1e-9));
    EXPECT_LE(plan->throughput, in.demand * (1 + 1e-9));
    for (double r : plan->rate) EXPECT_GE(r, 0);
  }
}

}  // namespace
}  // namespace prepflow::policy
