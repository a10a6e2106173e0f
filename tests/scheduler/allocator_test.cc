// The allocator against hand-computed shares and placements.
#include "scheduler/allocator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::scheduler {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pair;

Grant G(const std::string& worker, double cores) { return {worker, cores}; }

TEST(FairShares, SmallWantsAreMetAndTheRestSplitByWeight) {
  // 10 cores; wants 1, 6, 8 with equal weights: A gets 1, the level then is
  // 4.5 for B and C.
  const std::vector<JobWant> jobs = {{"a", 1, 1, ""}, {"b", 1, 6, ""}, {"c", 1, 8, ""}};
  EXPECT_THAT(FairShares(10, jobs),
              ElementsAre(DoubleNear(1, 1e-12), DoubleNear(4.5, 1e-12), DoubleNear(4.5, 1e-12)));
  // Weights 1 and 3 for B and C: 9 left splits 2.25 / 6.75.
  const std::vector<JobWant> weighted = {{"a", 1, 1, ""}, {"b", 1, 6, ""}, {"c", 3, 8, ""}};
  EXPECT_THAT(FairShares(10, weighted),
              ElementsAre(DoubleNear(1, 1e-12), DoubleNear(2.25, 1e-12), DoubleNear(6.75, 1e-12)));
  // Enough for everyone: each gets its want; no want or weight: nothing.
  EXPECT_THAT(FairShares(100, jobs), ElementsAre(1, 6, 8));
  EXPECT_THAT(FairShares(10, {{"z", 0, 5, ""}, {"y", 1, 0, ""}}), ElementsAre(0, 0));
}

TEST(Allocate, FillsLocalWorkersFirstThenAny) {
  const std::vector<PoolWorker> workers = {
      {"w1", 4, "zone-a"}, {"w2", 4, "zone-b"}, {"w3", 4, "zone-b"}};
  // 12 cores, wants 5 (zone-b) and 6 (zone-a): both met. Locality first for
  // every job, the larger share first: ja takes w1's 4 (all of zone-a), jb
  // w2's 4 and 1 of w3's; then ja's other 2 come from the first worker with
  // free cores, w3.
  const Allocation a = Allocate(workers, {{"jb", 1, 5, "zone-b"}, {"ja", 1, 6, "zone-a"}});
  EXPECT_DOUBLE_EQ(a.pool_cores, 12);
  EXPECT_DOUBLE_EQ(a.granted_cores, 11);
  EXPECT_THAT(a.grants.at("ja"), ElementsAre(G("w1", 4), G("w3", 2)));
  EXPECT_THAT(a.grants.at("jb"), ElementsAre(G("w2", 4), G("w3", 1)));
}

// Spot cores at a quarter of on-demand's price: a job is granted spot first
// (whatever the workers' order), on-demand only for what spot cannot give,
// and its cost an hour is its cores times their prices.
TEST(Allocate, GrantsTheCheapestCoresFirstAndPricesEachJob) {
  const std::vector<PoolWorker> workers = {
      {"a-dear", 4, "", 0.04}, {"b-dear", 4, "", 0.04}, {"c-cheap", 4, "", 0.01}};
  Allocation a = Allocate(workers, {{"j", 1, 3, ""}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("c-cheap", 3)));
  EXPECT_DOUBLE_EQ(a.cost_per_hour.at("j"), 3 * 0.01);
  a = Allocate(workers, {{"j", 1, 6, ""}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("a-dear", 2), G("c-cheap", 4)));
  EXPECT_DOUBLE_EQ(a.cost_per_hour.at("j"), 4 * 0.01 + 2 * 0.04);
  // Locality still comes first: a zone-b job takes its zone's dear worker.
  const std::vector<PoolWorker> zoned = {{"a-dear", 4, "zone-b", 0.04},
                                         {"c-cheap", 4, "zone-a", 0.01}};
  a = Allocate(zoned, {{"j", 1, 2, "zone-b"}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("a-dear", 2)));
  // Unpriced workers cost nothing: no cost is reported.
  a = Allocate({{"w", 4, ""}}, {{"j", 1, 2, ""}});
  EXPECT_EQ(a.cost_per_hour.count("j"), 0u);
}

// A job granted dear cores before cheap ones were free moves to the cheap
// ones; where too few are free, only as many move; a job whose locality the
// dear worker serves stays on it.
TEST(Allocate, EarlierGrantsOnDearCoresMoveToFreeCheaperOnes) {
  const std::vector<PoolWorker> workers = {{"a-dear", 4, "zone-b", 0.04},
                                           {"c-cheap", 4, "zone-a", 0.01}};
  const std::map<std::string, std::vector<Grant>> before = {{"j", {G("a-dear", 3)}}};
  Allocation a = Allocate(workers, {{"j", 1, 3, ""}}, before);
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("c-cheap", 3)));
  EXPECT_DOUBLE_EQ(a.cost_per_hour.at("j"), 0.03);
  // Another job keeps 2.5 of the cheap cores: 1.5 move, 1.5 stay.
  a = Allocate(workers, {{"j", 1, 3, ""}, {"k", 1, 2.5, ""}},
               {{"j", {G("a-dear", 3)}}, {"k", {G("c-cheap", 2.5)}}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("a-dear", 1.5), G("c-cheap", 1.5)));
  EXPECT_THAT(a.grants.at("k"), ElementsAre(G("c-cheap", 2.5)));
  // A zone-b job stays on its zone's dear worker.
  a = Allocate(workers, {{"j", 1, 3, "zone-b"}}, before);
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("a-dear", 3)));
  // Never a sliver left behind: 3.98 wanted, 3.95 cheap free -> 3.93 move.
  const std::vector<PoolWorker> tight = {{"a-dear", 4, "", 0.04}, {"c-cheap", 3.95, "", 0.01}};
  a = Allocate(tight, {{"j", 1, 3.98, ""}}, {{"j", {G("a-dear", 3.98)}}});
  ASSERT_EQ(a.grants.at("j").size(), 2u);
  EXPECT_NEAR(a.grants.at("j")[0].cores, kMinGrantCores, 1e-9);
  EXPECT_NEAR(a.grants.at("j")[1].cores, 3.93, 1e-9);
}

// A worker of a class being reclaimed is granted after every other, cheap
// as it is, and a grant on it moves to free cores elsewhere; its cost is
// still its own price. With no other cores free it is granted all the same.
TEST(Allocate, AReclaimedWorkerIsGrantedLastWhateverItCosts) {
  const std::vector<PoolWorker> workers = {{"dear", 4, "", 0.04},
                                           {"spot", 4, "", 0.01, /*reclaimed=*/true}};
  Allocation a = Allocate(workers, {{"j", 1, 3, ""}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("dear", 3)));
  a = Allocate(workers, {{"j", 1, 3, ""}}, {{"j", {G("spot", 3)}}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("dear", 3)));
  a = Allocate(workers, {{"j", 1, 6, ""}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("dear", 4), G("spot", 2)));
  EXPECT_DOUBLE_EQ(a.cost_per_hour.at("j"), 4 * 0.04 + 2 * 0.01);
  // Equal prices: reclaimed alone orders them.
  a = Allocate({{"a", 4, "", 0, true}, {"b", 4, "", 0}}, {{"j", 1, 2, ""}});
  EXPECT_THAT(a.grants.at("j"), ElementsAre(G("b", 2)));
}

TEST(Allocate, ContendedPoolIsSharedFairlyAndCoversEveryCore) {
  std::vector<PoolWorker> workers;
  for (int i = 0; i < 5; ++i) workers.push_back({"w" + std::to_string(i), 2, ""});
  const Allocation a = Allocate(workers, {{"a", 1, 100, ""}, {"b", 1, 100, ""}});
  EXPECT_THAT(a.share, ElementsAre(Pair("a", 5), Pair("b", 5)));
  double a_cores = 0, b_cores = 0;
  for (const Grant& g : a.grants.at("a")) a_cores += g.cores;
  for (const Grant& g : a.grants.at("b")) b_cores += g.cores;
  EXPECT_DOUBLE_EQ(a_cores, 5);
  EXPECT_DOUBLE_EQ(b_cores, 5);
  EXPECT_DOUBLE_EQ(a.granted_cores, 10);
}

TEST(Allocate, KeepsEarlierGrantsWhenItCanAndRebalancesOnJoin) {
  const std::vector<PoolWorker> workers = {{"w1", 4, ""}, {"w2", 4, ""}};
  const Allocation first = Allocate(workers, {{"a", 1, 8, ""}});
  EXPECT_THAT(first.grants.at("a"), ElementsAre(G("w1", 4), G("w2", 4)));
  // Job b joins: a shrinks to 4 and keeps w1 (its first earlier grant); b
  // gets w2.
  const Allocation second = Allocate(workers, {{"a", 1, 8, ""}, {"b", 1, 8, ""}}, first.grants);
  EXPECT_THAT(second.grants.at("a"), ElementsAre(G("w1", 4)));
  EXPECT_THAT(second.grants.at("b"), ElementsAre(G("w2", 4)));
  // w1 leaves: both jobs split w2, and b keeps what it had there first.
  const Allocation third =
      Allocate({{"w2", 4, ""}}, {{"a", 1, 8, ""}, {"b", 1, 8, ""}}, second.grants);
  EXPECT_THAT(third.grants.at("b"), ElementsAre(G("w2", 2)));
  EXPECT_THAT(third.grants.at("a"), ElementsAre(G("w2", 2)));
}

TEST(Allocate, AContendedPoolIsGrantedInFull) {
  // Many jobs wanting more than there is, with fractional shares: every
  // worker core is granted (less at most one sliver per worker).
  std::vector<PoolWorker> workers;
  double pool = 0;
  for (int w = 0; w < 50; ++w) {
    workers.push_back({"w" + std::to_string(w), 1.0 + w % 7, "z" + std::to_string(w % 3)});
    pool += workers.back().cores;
  }
  std::vector<JobWant> jobs;
  for (int j = 0; j < 37; ++j) {
    jobs.push_back(
        {"j" + std::to_string(j), 1.0 + j % 3, 6.3 + j % 5, "z" + std::to_string(j % 4)});
  }
  const Allocation a = Allocate(workers, jobs);
  EXPECT_NEAR(a.granted_cores, pool, 50 * kMinGrantCores);
  for (const auto& [job, grants] : a.grants) {
    double cores = 0;
    for (const Grant& g : grants) cores += g.cores;
    EXPECT_LE(cores, a.share.at(job) + 1e-9) << job;
  }
}

TEST(Allocate, NoWorkersMeansNoGrants) {
  const Allocation a = Allocate({}, {{"a", 1, 4, ""}});
  EXPECT_TRUE(a.grants.empty());
  EXPECT_TRUE(a.share.empty());
}

TEST(Allocate, SliversAreNotGranted) {
  // Two jobs on a 1-core worker and a 0.02-core worker: the last 0.02 cores
  // b is due are not worth a stream.
  const Allocation a =
      Allocate({{"big", 1, ""}, {"tiny", 0.02, ""}}, {{"a", 1, 0.51, ""}, {"b", 1, 0.51, ""}});
  EXPECT_DOUBLE_EQ(a.granted_cores, 1);
  for (const auto& [job, grants] : a.grants) {
    for (const Grant& g : grants) EXPECT_NE(g.worker_id, "tiny") << job;
  }
}

// Ranks of one training job (`job`) share one fair share: the job wants
// what they want together and weighs as one job; its ranks split it max-min.
TEST(RankShares, AJobsRanksShareOneShareSplitMaxMin) {
  const std::vector<JobWant> ranks = {{"big/0", 1, 4, "", "big"},
                                      {"big/1", 1, 4, "", "big"},
                                      {"big/2", 1, 8, "", "big"},
                                      {"small", 1, 16, ""}};
  EXPECT_THAT(RankShares(12, ranks), ElementsAre(2, 2, 2, 6));
  // A rank wanting less than an equal part gets its want; the rest split
  // what is left.
  EXPECT_THAT(RankShares(12, {{"big/0", 1, 1, "", "big"},
                              {"big/1", 1, 4, "", "big"},
                              {"big/2", 1, 8, "", "big"},
                              {"small", 1, 16, ""}}),
              ElementsAre(1, 2.5, 2.5, 6));
  // Per rank, as if each were a job, the 3-rank job would get 3 times more.
  EXPECT_THAT(FairShares(12, ranks), ElementsAre(3, 3, 3, 3));
  // A job that wants less than its share gets what it wants, as before.
  EXPECT_THAT(RankShares(12, {{"a/0", 1, 1, "", "a"}, {"a/1", 1, 1, "", "a"}, {"b", 1, 20, ""}}),
              ElementsAre(1, 1, 10));
  const Allocation a = Allocate({{"w1", 6, ""}, {"w2", 6, ""}}, ranks);
  EXPECT_DOUBLE_EQ(a.job_share.at("big"), 6);
  EXPECT_DOUBLE_EQ(a.job_share.at("small"), 6);
  EXPECT_DOUBLE_EQ(a.share.at("big/2"), 2);
}

}  // namespace
}  // namespace prepflow::scheduler
