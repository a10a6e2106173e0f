// The re-planner with hand-made snapshots: warm-up, the first plan, the
// period, drift, hysteresis, invalidation, and the link heuristic.
#include "policy/replanner.h"

#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::policy {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A two-stage pipeline (decode 10 ms -> 150 KB, crop 1 ms -> 600 KB), run
// with `samples` samples measured on each side so far.
struct Job {
  double decode_cost = 0.010, crop_cost = 0.001;
  double remote_cores = 8;
  double process_cpu_seconds = 0;  // this process's CPU so far
  // One worker's counters (the whole remote pool is this one worker).
  double worker_bytes = 0, worker_cpu = 0;
  int64_t worker_results = 0, worker_saturated = 0;
  double worker_reported_busy = 0;  // the worker's own report, for all its jobs
  // Wall seconds its answers spent on the worker (ItemResult.run_seconds),
  // and its credits.
  double worker_run_seconds = 0;
  int worker_credits = 4;
  // Its link probe at stream open (WorkerTotals::probe).
  ProbeTimer worker_probe;
  // What the workers reported of their transport CPU, and for how many bytes.
  double worker_transport_cpu = 0, worker_transport_bytes = 0;
  // Reads: bytes per read (here and on the workers), the wall seconds the
  // threads reading here and the workers waited for bytes, and this
  // process's receive CPU.
  double read_bytes = 100e3;
  double read_wait = 0, remote_read_wait = 0, receive_cpu = 0, received = 0;

  Snapshot At(double seconds, double samples) const {
    Snapshot s;
    s.now_nanos = static_cast<int64_t>(seconds * kSecond);
    s.process_cpu_nanos = static_cast<int64_t>(process_cpu_seconds * kSecond);
    s.local_cores = 2;
    s.read = {0, read_bytes * samples, samples};
    s.read_wait_seconds = read_wait;
    s.read_threads = 2;
    s.remote_read_wait_seconds = remote_read_wait;
    s.remote_read_bytes = read_bytes * samples;
    s.receive_cpu_seconds = receive_cpu;
    s.received_bytes = received;
    s.local_stages = {{decode_cost * samples, 150e3 * samples, samples},
                      {crop_cost * samples, 600e3 * samples, samples}};
    s.remote_stages = {{0, 0, samples},
                       {decode_cost * samples, 150e3 * samples, samples},
                       {crop_cost * samples, 600e3 * samples, samples}};
    s.delivered_samples = samples;
    s.busy_seconds = seconds;
    s.worker_transport = {worker_transport_cpu, worker_transport_bytes};
    WorkerTotals w;
    w.id = 7;
    w.name = "w:1";
    w.usable = true;
    w.cores = remote_cores;
    w.received_bytes = worker_bytes;
    w.cpu_seconds = worker_cpu;
    w.results = worker_results;
    w.saturated_results = worker_saturated;
    w.worker_busy = worker_reported_busy;
    w.run_seconds = worker_run_seconds;
    w.credits = worker_credits;
    w.probe = worker_probe;
    s.workers.push_back(w);
    return s;
  }
};

// A link probe of four chunks that came at `rate` bytes/s from `start`
// seconds on: evenly (steady), or with each gap half the last (a window
// still opening).
ProbeTimer Probe(double rate, bool steady, double start = 0.05) {
  const std::vector<double> gaps =
      steady ? std::vector<double>{0.01, 0.01, 0.01} : std::vector<double>{0.04, 0.02, 0.01};
  const double chunk = rate * (gaps[0] + gaps[1] + gaps[2]) / 3;
  ProbeTimer p;
  double t = start;
  p.Arrived(static_cast<int64_t>(t * kSecond), chunk, 4);
  for (double gap : gaps) p.Arrived(static_cast<int64_t>((t += gap) * kSecond), chunk, 4);
  return p;
}

ReplanOptions Options() {
  ReplanOptions o;
  o.period_seconds = 2;
  o.drift = 0.25;
  o.gain = 0.03;
  o.demand = 1e4;  // fixed, so only the costs and capacities move
  return o;
}

TEST(WarmUp, SendsTheRemoteShareUpToTheProbeShareToTheCutWithTheFewestBytes) {
  int cut = -1;
  // Stages' outputs: 150 KB, 600 KB, 600 KB (the last must be known).
  auto p = WarmUp({-1, 150'000, 600'000, 600'000}, /*local=*/2, /*remote=*/6, kProbeShare, &cut);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(cut, 1);
  const std::vector<double> f = p->Fractions();  // local, cut 0, 1, 2, 3
  ASSERT_EQ(f.size(), 5u);
  EXPECT_DOUBLE_EQ(f[0], 0.25);  // by default, the remote cores' share
  EXPECT_DOUBLE_EQ(f[2], 0.75);
  // At most the probe share, where one is set.
  EXPECT_DOUBLE_EQ(WarmUp({-1, 150'000}, 2, 6, 0.1, &cut)->Fractions()[0], 0.9);
  EXPECT_DOUBLE_EQ(WarmUp({-1, 150'000}, 19, 1, 0.5, &cut)->Fractions()[0], 0.95);
  // A tie goes to the latest cut; an unfixed size is never chosen.
  WarmUp({-1, 600'000, -1, 600'000}, 1, 1, kProbeShare, &cut);
  EXPECT_EQ(cut, 3);
  EXPECT_FALSE(WarmUp({-1, 10, 20}, 2, 0, kProbeShare, &cut).has_value());  // no remote cores
  EXPECT_FALSE(WarmUp({-1, 10, 20}, 2, 4, 0, &cut).has_value());            // no probe
}

TEST(Replanner, TheWarmUpIsTheReasonUntilTheFirstPlan) {
  ReplanOptions o = Options();
  o.probe_share = 0.1;
  Replanner r(o, Placement::Cut(2, 0, 0));
  const std::optional<Placement> warm = r.StartWarmUp({-1, 150'000, 600'000}, 2, 8);
  ASSERT_TRUE(warm.has_value());
  EXPECT_DOUBLE_EQ(warm->Fractions()[0], 0.9);
  EXPECT_EQ(r.State().reason,
            "warm-up: 10% of samples go to the workers at cut 1 (8.00 remote cores, 2.00 here) "
            "until every stage is measured");
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  EXPECT_THAT(r.State().reason, ::testing::StartsWith("offloading predicts +"));
}

TEST(Placement, DrawsEachPathInProportion) {
  const Placement p = Placement::Cut(/*stages=*/3, /*cut=*/2, /*remote_fraction=*/0.25);
  EXPECT_FALSE(p.all_local());
  EXPECT_EQ(p.Draw(0.0), -1);
  EXPECT_EQ(p.Draw(0.74), -1);
  EXPECT_EQ(p.Draw(0.76), 2);
  EXPECT_TRUE(Placement::Cut(3, 0, 0).all_local());
  EXPECT_EQ(Placement::Cut(3, 3, 1).Draw(0.0), 3);
  const Placement r = Placement::FromRates({10, 0, 30, 0});  // local 25%, cut 2 75%
  EXPECT_EQ(r.Draw(0.2), -1);
  EXPECT_EQ(r.Draw(0.3), 2);
  EXPECT_EQ(r.PathShares(), (std::vector<double>{0.25, 0, 0.75, 0}));
}

TEST(Placement, DistanceIsTheShareOfSamplesOnAnotherPath) {
  const Placement a = Placement::Cut(3, 3, 0.16);
  EXPECT_NEAR(a.Distance(Placement::Cut(3, 3, 0.13)), 0.03, 1e-9);
  EXPECT_NEAR(a.Distance(Placement::Cut(3, 2, 0.16)), 0.16, 1e-9);  // the same share, another cut
  EXPECT_NEAR(a.Distance(Placement::Cut(3, 0, 0)), 0.16, 1e-9);
  EXPECT_EQ(a.Distance(a), 0);
  EXPECT_EQ(a.Distance(Placement::Cut(4, 3, 0.16)), 1);
}

TEST(Replanner, NoPlanUntilEveryStageIsMeasured) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  std::vector<std::string> notes;
  EXPECT_FALSE(r.Update(job.At(1, 8), &notes).has_value());  // under the first window
  EXPECT_FALSE(r.WantedRemoteCores().has_value());
  EXPECT_EQ(r.State().changes, 0);
  EXPECT_TRUE(notes.empty());
}

TEST(Replanner, TheFirstPlanOffloadsAndIsExplained) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  std::vector<std::string> notes;
  const std::optional<Placement> p = r.Update(job.At(1, 100), &notes);
  ASSERT_TRUE(p.has_value());
  EXPECT_LT(p->Fractions()[0], 0.5);  // most samples go to the 8 remote cores
  const ReplanState st = r.State();
  EXPECT_EQ(st.changes, 1);
  EXPECT_GT(st.throughput, 2 / 0.011);  // more than the 2 local cores reach
  EXPECT_FALSE(st.explanation.empty());
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].rfind("plan 1: ", 0), 0u) << notes[0];
  // The model's inputs follow: each stage's cost here and on workers.
  EXPECT_THAT(notes[1], ::testing::StartsWith("plan 1's inputs: stages (µs here / on workers, "
                                              "bytes out): 10000.0/10000.0 150000 "
                                              "1000.0/1000.0 600000; trainer "));
  EXPECT_THAT(notes[1], ::testing::HasSubstr("2.00 cores here, 8.00 on workers"));
  // 2 + 8 cores against 2: the reason gives the gain, and so does the log.
  EXPECT_THAT(st.reason, ::testing::MatchesRegex("offloading predicts \\+[0-9]+% over all local"));
  EXPECT_THAT(notes[0], ::testing::EndsWith("(" + st.reason + ")"));
  ASSERT_TRUE(r.WantedRemoteCores().has_value());
  EXPECT_GT(*r.WantedRemoteCores(), 0);
}

TEST(Replanner, BatchOpsHereCountOnEveryPath) {
  // MixUp/CutMix cost 5 ms a sample here, wherever its stages ran: the plan
  // must leave room for them on the 2 local cores, so it promises less than
  // without them and keeps more of this machine's CPU free.
  Job job;
  job.remote_cores = 1;
  Replanner plain(Options(), Placement::Cut(2, 0, 0));
  ASSERT_TRUE(plain.Update(job.At(1, 100), nullptr).has_value());
  Replanner mixing(Options(), Placement::Cut(2, 0, 0));
  Snapshot s = job.At(1, 100);
  s.trainer_work = {0.005 * 100, 0, 100};
  ASSERT_TRUE(mixing.Update(s, nullptr).has_value());
  // 2 cores / (11 ms + 5 ms) locally, plus 1 remote core's worth.
  EXPECT_LT(mixing.State().throughput, plain.State().throughput);
  EXPECT_LE(mixing.State().throughput, 2 / 0.005 + 1e-6);  // the batch ops alone bind
}

TEST(Replanner, CacheHitsAndEchoedCopiesAmortiseTheStagesBeforeTheirBoundary) {
  // Decoded images cached after the decode (boundary 1), 3 loads in 4
  // answered by a cache: the 10 ms decode costs 2.5 ms a sample on average,
  // and the plan promises more for the same cores; two echoed copies a load
  // halve it again.
  Job job;
  job.remote_cores = 1;
  Replanner plain(Options(), Placement::Cut(2, 0, 0));
  ASSERT_TRUE(plain.Update(job.At(1, 100), nullptr).has_value());
  Replanner cached(Options(), Placement::Cut(2, 0, 0));
  Snapshot s = job.At(1, 100);
  s.reuse_at = 1;
  s.cache_hits = 300;
  s.cache_misses = 100;
  ASSERT_TRUE(cached.Update(s, nullptr).has_value());
  // 3 cores at 1 ms (crop) + 2.5 ms (a quarter of the decode), less the
  // transport's CPU (within 2%).
  EXPECT_NEAR(cached.State().throughput, 3 / 0.0035, 0.02 * 3 / 0.0035);
  EXPECT_GT(cached.State().throughput, 2.5 * plain.State().throughput);
  EXPECT_NE(cached.State().explanation.find("75% cached"), std::string::npos)
      << cached.State().explanation;
  Replanner echoed(Options(), Placement::Cut(2, 0, 0));
  s.echo = 2;
  ASSERT_TRUE(echoed.Update(s, nullptr).has_value());
  EXPECT_NEAR(echoed.State().throughput, 3 / 0.00225, 0.02 * 3 / 0.00225);
}

// A cache fills over a run: the plan takes the share of lookups it answers
// now, not since the start (the first epoch missed every lookup).
TEST(Replanner, TheCacheHitShareIsTheRecentOne) {
  Job job;
  job.remote_cores = 1;
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Snapshot s = job.At(1, 1000);
  s.reuse_at = 1;
  s.cache_misses = 1000;
  ASSERT_TRUE(r.Update(s, nullptr).has_value());
  EXPECT_EQ(r.State().explanation.find("cached"), std::string::npos) << r.State().explanation;
  s = job.At(10, 2000);
  s.reuse_at = 1;
  s.cache_hits = 900;  // 45% since the start, 90% of the last 1000
  s.cache_misses = 1100;
  r.Invalidate();  // plan now, whatever the gain
  ASSERT_TRUE(r.Update(s, nullptr).has_value());
  EXPECT_NE(r.State().explanation.find("90% cached"), std::string::npos) << r.State().explanation;
}

TEST(Replanner, CpuNoCounterSawCountsOnEveryPath) {
  // The process spends 3 ms a sample outside every stage it measures (the
  // consumer's loop, batching, gRPC's threads), after 5 s of set-up before
  // the first snapshot: the plan charges the 3 ms, not the set-up, to every
  // sample, as it does batch ops. `plain` spends nothing unseen.
  Job plain_job, job;
  plain_job.remote_cores = job.remote_cores = 1;
  Replanner plain(Options(), Placement::Cut(2, 0, 0));
  Replanner loaded(Options(), Placement::Cut(2, 0, 0));
  plain_job.process_cpu_seconds = 0.011 * 100;
  job.process_cpu_seconds = 5 + 0.011 * 100;
  ASSERT_TRUE(plain.Update(plain_job.At(1, 100), nullptr).has_value());
  ASSERT_TRUE(loaded.Update(job.At(1, 100), nullptr).has_value());
  EXPECT_EQ(loaded.State().unseen_cost_per_sample, 0);  // nothing unseen since the first
  plain_job.process_cpu_seconds += 0.011 * 300;
  job.process_cpu_seconds += (0.011 + 0.003) * 300;
  plain.Update(plain_job.At(3.5, 400), nullptr);
  loaded.Update(job.At(3.5, 400), nullptr);
  EXPECT_NEAR(loaded.State().unseen_cost_per_sample, 0.003, 1e-9);
  EXPECT_EQ(plain.State().unseen_cost_per_sample, 0);
  EXPECT_LT(loaded.State().throughput, plain.State().throughput);
  EXPECT_LE(loaded.State().throughput, 2 / 0.003 + 1e-6);  // the 3 ms alone bind the 2 cores
}

// A first plan comes before this process has measured its receive cost or
// its own CPU per sample (it takes the prior and none). Once both are
// measured, a quarter period on, it is made again: here both are dearer
// than guessed (2 ns a byte, 1 ms a sample), and the plan puts fewer
// samples here, where each now costs more.
TEST(Replanner, WhatTheFirstPlanGuessedIsReplannedOnceMeasured) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.process_cpu_seconds = 0.011 * 100;
  const std::optional<Placement> first = r.Update(job.At(1, 100), nullptr);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(r.State().receive_cost_per_byte, 0);
  const auto measure = [&job](double samples) {
    job.received = 150e3 * samples;
    job.receive_cpu = 2e-9 * job.received;
    job.process_cpu_seconds = 0.011 * samples + job.receive_cpu + 0.001 * (samples - 100);
  };
  std::vector<std::string> notes;
  measure(400);
  EXPECT_FALSE(r.Update(job.At(1.3, 400), &notes).has_value());  // 0.3 s < 0.5 s
  EXPECT_TRUE(notes.empty()) << absl::StrJoin(notes, "; ");
  EXPECT_NEAR(r.State().unseen_cost_per_sample, 0.001, 1e-9);
  measure(500);
  const std::optional<Placement> next = r.Update(job.At(1.6, 500), &notes);
  ASSERT_TRUE(next.has_value());
  EXPECT_LT(next->Fractions()[0], first->Fractions()[0]);
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0],
            "re-planning: the receive cost is 2.000 ns a byte and the trainer's own cost is "
            "1000.0 µs a sample, measured since the last plan guessed it");
  // Measured, they are no longer guesses: nothing more until the period.
  notes.clear();
  measure(600);
  EXPECT_FALSE(r.Update(job.At(2.3, 600), &notes).has_value());
  EXPECT_TRUE(notes.empty()) << absl::StrJoin(notes, "; ");
}

TEST(Replanner, TheWorkersMeasuredSendCostReplacesTheAssumedOne) {
  // The workers spend 5 ns per byte sent outside their samples' costs
  // (copying, encoding, gRPC): 0.75 ms more per 150 KB decoded sample on the
  // one remote core than the assumed one copy into the kernel.
  Job plain_job, job;
  plain_job.remote_cores = job.remote_cores = 1;
  job.worker_transport_bytes = 20e6;
  job.worker_transport_cpu = 5e-9 * 20e6;
  Replanner plain(Options(), Placement::Cut(2, 0, 0));
  Replanner measured(Options(), Placement::Cut(2, 0, 0));
  ASSERT_TRUE(plain.Update(plain_job.At(1, 100), nullptr).has_value());
  ASSERT_TRUE(measured.Update(job.At(1, 100), nullptr).has_value());
  EXPECT_EQ(plain.State().send_cost_per_byte, 0);  // not measured: the assumed one
  EXPECT_NEAR(measured.State().send_cost_per_byte, 5e-9, 1e-18);
  EXPECT_LT(measured.State().throughput, plain.State().throughput);
}

TEST(Replanner, KeepsTheRunningPlanWhenNothingBetterComes) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  // After the period, the same measurements: the same plan, not re-applied.
  EXPECT_FALSE(r.Update(job.At(3.5, 200), nullptr).has_value());
  EXPECT_EQ(r.State().changes, 1);
}

TEST(Replanner, ABetterPlanReplacesTheRunningOneAfterThePeriod) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  const Placement first = *r.Update(job.At(1, 100), nullptr);
  job.remote_cores = 1;  // most of the pool went away
  const std::optional<Placement> next = r.Update(job.At(3.5, 200), nullptr);
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(next->Fractions()[0], first.Fractions()[0]);  // more runs here now
  EXPECT_EQ(r.State().changes, 2);
}

TEST(Replanner, DriftBringsTheNextPlanForwardButNotBeforeAQuarterPeriod) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  job.remote_cores = 1;
  std::vector<std::string> notes;
  EXPECT_FALSE(r.Update(job.At(1.3, 200), &notes).has_value());  // 0.3 s < 0.5 s
  EXPECT_TRUE(notes.empty());
  EXPECT_TRUE(r.Update(job.At(1.6, 300), &notes).has_value());
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0], "re-planning: the remote cores moved 88%");
}

// A trainer that takes samples far faster than any placement gives them (a
// consumer that only counts them) limits no plan: its demand swinging by
// 38% brings no plan forward. The same swing where the demand is near what
// is delivered does.
TEST(Replanner, ADemandFarAboveTheDeliveryMovesNoPlan) {
  for (const double first : {40000.0, 1200.0}) {
    ReplanOptions o = Options();
    o.demand = 0;  // measured: delivered samples over the trainer's busy seconds
    Replanner r(o, Placement::Cut(2, 0, 0));
    Job job;
    Snapshot s = job.At(1, first * 0.25);
    s.busy_seconds = 0.25;
    ASSERT_TRUE(r.Update(s, nullptr).has_value());
    // The far demand stays over twice the plan's throughput; the near one
    // is under it.
    const double twice = 2 * r.State().throughput;
    ASSERT_TRUE(first < 10000 ? first < twice : first / 4 > twice) << first << " " << twice;
    // A second second of the trainer's at a quarter of the rate: the
    // smoothed demand falls by 38%.
    s = job.At(1.6, first * 0.25 + first / 4);
    s.busy_seconds = 1.25;
    std::vector<std::string> notes;
    const bool replanned =
        r.Update(s, &notes).has_value() || absl::c_any_of(notes, [](const std::string& n) {
          return absl::StartsWith(n, "re-planning: the demand moved");
        });
    EXPECT_EQ(replanned, first < 10000) << first << ": " << absl::StrJoin(notes, "; ");
  }
}

// The trainer's own cost per sample is noisy (one batch's CPU at a time).
// Tripling when it is a small part of a sample's cost here (0.5 ms of 11.5)
// brings no plan forward, though it moved over half; the same when it is
// most of that cost does, and says by how much of the whole.
TEST(Replanner, TheTrainersOwnCostDriftsByItsPartOfTheCostHere) {
  for (const double own : {0.0005, 0.02}) {
    Replanner r(Options(), Placement::Cut(2, 0, 0));
    Job job;
    Snapshot s = job.At(1, 100);
    s.trainer_work = {own * 100, 0, 100};
    ASSERT_TRUE(r.Update(s, nullptr).has_value());
    std::vector<std::string> notes;
    double samples = 100, work = own * 100;
    for (int k = 1; k <= 6; ++k) {  // every window at three times the cost
      samples += 100;
      work += 3 * own * 100;
      s = job.At(1 + 0.1 * k, samples);
      s.trainer_work = {work, 0, samples};
      r.Update(s, &notes);
    }
    const bool moved = absl::c_any_of(notes, [](const std::string& n) {
      return absl::StartsWith(n, "re-planning: the trainer's own cost per sample moved");
    });
    EXPECT_EQ(moved, own > 0.001) << "own cost " << own << ": " << absl::StrJoin(notes, "; ");
  }
}

// The bytes a read takes vary from file to file; where no storage limit is
// known they change no plan, so their moving brings none forward.
TEST(Replanner, ReadSizesMovingBringNoPlanForwardWithoutAStorageLimit) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  std::vector<std::string> notes;
  job.read_bytes = 300e3;  // three times the size
  for (int k = 1; k <= 8; ++k) r.Update(job.At(1 + 0.1 * k, 100 + 100 * k), &notes);
  EXPECT_TRUE(notes.empty()) << absl::StrJoin(notes, "; ");
}

TEST(Replanner, SmallDriftWaitsForThePeriod) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  job.remote_cores = 7;  // 12.5% < 25%
  EXPECT_FALSE(r.Update(job.At(1.6, 200), nullptr).has_value());
}

TEST(Replanner, InvalidateReplansAtTheNextSnapshot) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  job.remote_cores = 1;
  r.Invalidate();  // a worker left
  EXPECT_TRUE(r.Update(job.At(1.1, 200), nullptr).has_value());
}

// A worker leaving changes the resources the running placement was made
// for: the plan made then replaces it even when its gain is under the
// hysteresis, which only filters noise (under load, a replan after a worker
// left kept the old placement, and its explanation still named two workers).
TEST(Replanner, APlanAfterInvalidateReplacesTheRunningOneWhateverTheGain) {
  for (const bool invalidated : {false, true}) {
    Replanner r(Options(), Placement::Cut(2, 0, 0));
    Job job;
    ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
    job.remote_cores *= 0.99;  // a near-tie: within the 3% gain
    if (invalidated) r.Invalidate();
    const std::optional<Placement> next = r.Update(job.At(3.5, 200), nullptr);
    EXPECT_EQ(next.has_value(), invalidated);
    EXPECT_EQ(r.State().changes, invalidated ? 2 : 1);
  }
}

// Three snapshots 1.5 s apart: no answers yet, the worker's first (its
// window opens), and 1.5 s of answers (it closes).
ReplanState LinkAfterWindows(double process_busy, double worker_busy, double saturated_share,
                             std::vector<std::string>* notes, double receive_cpu_per_byte = 0,
                             double worker_reported_busy = 0, double held_share = 0,
                             double probe_rate = 0) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_reported_busy = worker_reported_busy;
  if (probe_rate > 0) job.worker_probe = Probe(probe_rate, /*steady=*/false);
  // Measured from the start: 16 MB received (a full window) at this cost.
  job.received = 16e6;
  job.receive_cpu = 16e6 * receive_cpu_per_byte;
  r.Update(job.At(1, 100), notes);  // no answers yet
  job.worker_results = 10;
  r.Update(job.At(2.5, 200), notes);  // the first: the worker's window opens
  // Over 1.5 s: 20 results, 30 MB, the given CPU shares.
  job.worker_results += 20;
  job.worker_saturated += static_cast<int64_t>(20 * saturated_share);
  job.worker_bytes += 30e6;
  job.worker_cpu += worker_busy * 1.5 * job.remote_cores;
  job.worker_run_seconds += held_share * 1.5 * job.worker_credits;
  job.process_cpu_seconds += process_busy * 1.5 * 2;
  r.Update(job.At(4, 300), notes);
  return r.State();
}

TEST(Replanner, ALinkBindsWhenEveryCreditIsOutAndBothSidesIdle) {
  std::vector<std::string> notes;
  const ReplanState st = LinkAfterWindows(0.3, 0.2, 1.0, &notes);
  ASSERT_EQ(st.links.count(7), 1u);
  EXPECT_DOUBLE_EQ(st.links.at(7).limit, 20e6);  // 30 MB in 1.5 s
  EXPECT_DOUBLE_EQ(st.links.at(7).ingest_rate, 20e6);
  bool noted = false;
  for (const std::string& n : notes) noted |= n.find("w:1: its link binds at 20.0 MB/s") != n.npos;
  EXPECT_TRUE(noted);
}

TEST(Replanner, NoLinkLimitWhenTheWorkerIsBusyOrCreditsAreFreeOrReceivingIsWork) {
  std::vector<std::string> notes;
  // This process busy, and receiving 20 MB/s at 20 ns a byte takes 0.4 core:
  // the results may be late because this process is.
  EXPECT_EQ(LinkAfterWindows(0.9, 0.2, 1.0, &notes, 20e-9).links.at(7).limit, 0);
  EXPECT_EQ(LinkAfterWindows(0.3, 0.9, 1.0, &notes).links.at(7).limit, 0);  // worker busy
  EXPECT_EQ(LinkAfterWindows(0.3, 0.2, 0.5, &notes).links.at(7).limit, 0);  // credits free
  EXPECT_DOUBLE_EQ(LinkAfterWindows(0.3, 0.2, 0.5, &notes).links.at(7).ingest_rate, 20e6);
}

// Every credit out and the worker's CPU idle by its own count, but its
// answers spent most of the credits' time on the worker (queued for its
// threads, or running slowly): a worker whose CPU another process starves
// reports little CPU and answers late, and that is not its link. (On a
// loaded machine, each plan took the worker's slow answers for a link, cut
// the remote share to it, and the next window found a slower "link": down
// to all local.)
TEST(Replanner, NoLinkLimitWhenTheWorkerHeldTheItems) {
  std::vector<std::string> notes;
  EXPECT_EQ(LinkAfterWindows(0.3, 0.2, 1.0, &notes, 0, 0, /*held_share=*/0.8).links.at(7).limit, 0);
  // Items held a fifth of the time and waiting on the wire the rest: the link.
  EXPECT_DOUBLE_EQ(
      LinkAfterWindows(0.3, 0.2, 1.0, &notes, 0, 0, /*held_share=*/0.2).links.at(7).limit, 20e6);
}

// This job's items used a fifth of the worker, every credit out, but the
// worker says its cores were 90% busy: another rank's items (or another
// job's) took them. The results came slowly for want of its CPU, not of the
// link. (Ranks sharing a worker were each taking that for a link of a few
// MB/s and offloading little.)
TEST(Replanner, NoLinkLimitWhenTheWorkerIsBusyWithOthersWork) {
  std::vector<std::string> notes;
  EXPECT_EQ(LinkAfterWindows(0.3, 0.2, 1.0, &notes, 0, 0.9).links.at(7).limit, 0);
  EXPECT_DOUBLE_EQ(LinkAfterWindows(0.3, 0.2, 1.0, &notes, 0, 0.5).links.at(7).limit, 20e6);
}

TEST(Replanner, ALinkBindsWhileThisProcessIsBusyWhenReceivingIsCheap) {
  // --offload auto keeps the trainer's cores busy with its own share; at the
  // measured 0.17 ns a byte, 20 MB/s takes 0.003 core to receive, and the
  // link's probe came at 22 MB/s, so a busy trainer is not why the results
  // came slowly: the link is. (This is the case in which the inference never
  // fired in a real run.)
  std::vector<std::string> notes;
  EXPECT_DOUBLE_EQ(LinkAfterWindows(0.95, 0.2, 1.0, &notes, 0.17e-9, 0, 0, 22e6).links.at(7).limit,
                   20e6);
}

// A worker that joined mid-run has no probe (probes are timed while this
// process is idle): a busy process cannot tell its link from its own late
// taking, and takes no verdict; an idle one does. (On the testbed, a worker
// opened after another was lost "bound" at 56 MB/s on a bridge with no
// limit, and the plan kept to that for the rest of the run.)
TEST(Replanner, NoLinkLimitForAWorkerWithoutAProbeWhileThisProcessIsBusy) {
  std::vector<std::string> notes;
  EXPECT_EQ(LinkAfterWindows(0.95, 0.2, 1.0, &notes, 0.17e-9).links.at(7).limit, 0);
  EXPECT_DOUBLE_EQ(LinkAfterWindows(0.3, 0.2, 1.0, &notes, 0.17e-9).links.at(7).limit, 20e6);
}

// The same busy process and cheap receiving, but the worker's link probe
// passed 2 GB/s (unsteady: what the link carries at least): 20 MB/s is this
// process at its CPU quota taking answers late, not the link. (On the
// testbed's bridge, with no limit, a 0.5-core trainer's echo and far runs
// planned workers' links of 55-68 MB/s and cut their cores to 0.7-0.85.) A
// probe near the window's rate (the link scenario: 10-12 MB/s probes, 11
// MB/s windows) keeps the verdict, and so does an idle process: a link
// slower than its probe's burst is found then.
TEST(Replanner, NoLinkLimitWhileThisProcessIsBusyFarBelowWhatTheProbeCarried) {
  std::vector<std::string> notes;
  auto limit = [&](double process_busy, double probe_rate) {
    return LinkAfterWindows(process_busy, 0.2, 1.0, &notes, 0.17e-9, 0, 0, probe_rate)
        .links.at(7)
        .limit;
  };
  EXPECT_EQ(limit(0.95, 2e9), 0);
  EXPECT_EQ(limit(0.95, 41e6), 0);
  EXPECT_DOUBLE_EQ(limit(0.95, 25e6), 20e6);
  EXPECT_DOUBLE_EQ(limit(0.3, 2e9), 20e6);
}

// Snapshots 1.5 s apart, 100 reads each, 10 MB read here over each; the
// threads reading here waited `wait_share` of their time.
// On the workers instead (`remote`): their 8 cores waited that share.
ReplanState StorageAfterWindows(double wait_share, std::vector<std::string>* notes,
                                bool remote = false) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  for (int i = 0; i < 4; ++i) {
    r.Update(job.At(1 + 1.5 * i, 100 * (i + 1)), notes);
    if (remote) {
      job.remote_read_wait += wait_share * 1.5 * job.remote_cores;
    } else {
      job.read_wait += wait_share * 1.5 * 2;  // two threads
    }
  }
  return r.State();
}

TEST(Replanner, StorageBindsWhenTheReadersMostlyWait) {
  std::vector<std::string> notes;
  const ReplanState st = StorageAfterWindows(0.8, &notes);
  // 100 reads of 100 KB in 1.5 s.
  EXPECT_NEAR(st.storage_limit_here, 10e6 / 1.5, 1);
  EXPECT_EQ(st.storage_limit_workers, 0);
  bool noted = false;
  for (const std::string& n : notes)
    noted |= n.find("storage binds the reads here at 6.7") != n.npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(StorageAfterWindows(0.3, &notes).storage_limit_here, 0);
  const ReplanState workers = StorageAfterWindows(0.6, &notes, /*remote=*/true);
  EXPECT_NEAR(workers.storage_limit_workers, 10e6 / 1.5, 1);
  EXPECT_EQ(workers.storage_limit_here, 0);
  EXPECT_EQ(StorageAfterWindows(0.4, &notes, /*remote=*/true).storage_limit_workers, 0);
}

TEST(Replanner, BindingStorageCapsThePlanAndAutoEchoMeetsTheDemand) {
  // Storage here gives 6.7 MB/s, 67 reads/s of 100 KB: all-local would be
  // held to 67 samples/s, so the plan reads on the workers (whose storage is
  // not seen binding). With no workers, echo is what helps: the fewest
  // copies that meet the demand of 150 samples/s are 3 (67 · 3 = 200).
  ReplanOptions o = Options();
  o.demand = 150;
  Replanner r(o, Placement::Cut(2, 0, 0));
  Job job;
  job.remote_cores = 0;
  for (int i = 0; i < 5; ++i) {
    if (i == 4) r.Invalidate();  // a plan on the last window's inputs
    r.Update(job.At(1 + 1.5 * i, 100 * (i + 1)), nullptr);
    job.read_wait += 0.8 * 1.5 * 2;
  }
  EXPECT_NEAR(r.State().throughput, 10e6 / 1.5 / 100e3, 0.5);
  std::string why;
  EXPECT_EQ(r.EchoFactor(8, &why), 3);
  EXPECT_NE(why.find("3 copies each"), std::string::npos) << why;
  EXPECT_EQ(r.EchoFactor(2, nullptr), 2);  // the most allowed
  // Demand 50/s: fresh samples suffice.
  o.demand = 50;
  Replanner fresh(o, Placement::Cut(2, 0, 0));
  job.read_wait = 0;
  for (int i = 0; i < 4; ++i) {
    fresh.Update(job.At(1 + 1.5 * i, 100 * (i + 1)), nullptr);
    job.read_wait += 0.8 * 1.5 * 2;
  }
  EXPECT_EQ(fresh.EchoFactor(8, nullptr), 1);
  EXPECT_FALSE(Replanner(o, Placement::Cut(2, 0, 0)).EchoFactor(8, nullptr).has_value());
}

// The storage scenario's counters, 1.5 s a window: each side reads 100 KB
// per sample at its rate (samples/s), its readers (two here, eight worker
// cores) waiting 80% of the time while it reads. The worker's answers (150
// KB each) come with every credit out, its CPU idle, and each item held on
// it 80% of the time (waiting for storage): not a link.
struct StoreRun {
  Job job;
  double t = 1, here = 0, workers = 0;
  Snapshot Window(double here_rate, double workers_rate) {
    t += 1.5;
    here += here_rate * 1.5;
    workers += workers_rate * 1.5;
    if (here_rate > 0) job.read_wait += 0.8 * 1.5 * 2;
    if (workers_rate > 0) {
      job.remote_read_wait += 0.8 * 1.5 * 8;
      job.worker_results += static_cast<int64_t>(workers_rate * 1.5);
      job.worker_saturated = job.worker_results;
      job.worker_bytes += workers_rate * 1.5 * 150e3;
      job.worker_run_seconds += 0.8 * 1.5 * job.worker_credits;
    }
    Snapshot s = job.At(t, here + workers);
    s.read = {0, job.read_bytes * here, here};
    s.remote_read_bytes = job.read_bytes * workers;
    s.remote_stages[0].samples = workers;
    return s;
  }
};

bool Noted(const std::vector<std::string>& notes, const std::string& text) {
  return absl::c_any_of(notes, [&](const std::string& n) { return absl::StrContains(n, text); });
}

// The storage scenario on the testbed: trainer and workers read one store
// behind one link, and each side's readers wait. Each side's window rate is
// only its share of the store: what both read together (S) limits every
// placement where both read, and neither side alone is known, so each is
// taken at S and every placement ties (the store's 133 samples/s). Each side
// is then probed alone: the workers alone get 15 MB/s, the trainer 12, and
// the plan puts every sample on the workers (150 samples/s).
TEST(Replanner, EachSideOfASharedStoreIsProbedAloneAndTheBetterOneKept) {
  ReplanOptions o = Options();
  o.bandwidth = 1e12;  // told: the first plan need not wait for the links
  Replanner r(o, Placement::Cut(2, 0, 0));
  StoreRun run;
  std::vector<std::string> notes;
  r.Update(run.job.At(1, 0), &notes);
  std::optional<Placement> placed;
  for (int i = 0; i < 3; ++i) placed = r.Update(run.Window(67, 67), &notes);
  EXPECT_TRUE(Noted(notes, "a limit on every placement where both read"));
  ReplanState st = r.State();
  EXPECT_NEAR(st.storage_limit_shared, 13.4e6, 1);
  // The third window's plan is due: the workers alone promise the most.
  ASSERT_TRUE(placed.has_value());
  EXPECT_DOUBLE_EQ(placed->remote_share(), 1);
  EXPECT_THAT(st.reason, ::testing::StartsWith("storage probe: the workers' reads alone"));
  // No plan while it runs. The window across the switch (the workers still
  // ramping up, 5 MB/s) counts for nothing; two windows of the workers
  // alone end it, and the plan after it keeps every sample on them.
  EXPECT_FALSE(r.Update(run.Window(0, 50), &notes).has_value());
  EXPECT_FALSE(r.Update(run.Window(0, 150), &notes).has_value());
  placed = r.Update(run.Window(0, 150), &notes);
  EXPECT_TRUE(Noted(notes, "storage gives the workers' reads alone 15.0 MB/s"));
  ASSERT_TRUE(placed.has_value());
  EXPECT_DOUBLE_EQ(placed->remote_share(), 1);
  EXPECT_NEAR(r.State().throughput, 150, 0.5);
  // The state says each side's limit as planned: the workers' alone rate,
  // and S for the trainer, never seen alone (its own windows saw its share).
  EXPECT_NEAR(r.State().storage_limit_workers, 15e6, 1);
  EXPECT_NEAR(r.State().storage_limit_here, 13.4e6, 1);
  // At the next due plan the trainer alone (its CPU gives 182/s) is probed.
  r.Update(run.Window(0, 150), &notes);
  placed = r.Update(run.Window(0, 150), &notes);
  ASSERT_TRUE(placed.has_value());
  EXPECT_TRUE(placed->all_local());
  EXPECT_THAT(r.State().reason, ::testing::StartsWith("storage probe: the reads here alone"));
  r.Update(run.Window(40, 50), &notes);  // the switch: the workers' last reads
  r.Update(run.Window(120, 0), &notes);
  placed = r.Update(run.Window(120, 0), &notes);
  EXPECT_TRUE(Noted(notes, "storage gives the reads here alone 12.0 MB/s"));
  EXPECT_NEAR(r.State().storage_limit_here, 12e6, 1);
  ASSERT_TRUE(placed.has_value());
  EXPECT_DOUBLE_EQ(placed->remote_share(), 1);
  EXPECT_NEAR(r.State().throughput, 150, 0.5);
  // Each side once: no probe after that. Nor is the worker's link taken to
  // bind: its window reopened when it was sent work again, where one open
  // over the probe's idle seconds found its items held for under half of
  // them, every credit out and its CPU idle: a link, by LinkBound's rule.
  for (int i = 0; i < 4; ++i) r.Update(run.Window(0, 150), &notes);
  EXPECT_THAT(r.State().reason, ::testing::Not(::testing::HasSubstr("probe")));
  EXPECT_FALSE(Noted(notes, "its link binds")) << absl::StrJoin(notes, "\n");
  EXPECT_EQ(r.State().links.at(7).limit, 0);
}

// A worker that comes or goes during a probe ends it unfinished: the next
// plan is for the new resources.
TEST(Replanner, AProbeEndsUnfinishedWhenAWorkerComesOrGoes) {
  ReplanOptions o = Options();
  o.bandwidth = 1e12;
  Replanner r(o, Placement::Cut(2, 0, 0));
  StoreRun run;
  r.Update(run.job.At(1, 0), nullptr);
  for (int i = 0; i < 3; ++i) r.Update(run.Window(67, 67), nullptr);
  ASSERT_THAT(r.State().reason, ::testing::StartsWith("storage probe"));
  r.Invalidate();
  std::vector<std::string> notes;
  ASSERT_TRUE(r.Update(run.Window(0, 150), &notes).has_value());
  EXPECT_THAT(r.State().reason, ::testing::Not(::testing::StartsWith("storage probe")));
  EXPECT_FALSE(Noted(notes, "storage probe:"));
}

TEST(Replanner, TheFirstPlanWaitsForTheLinksUnlessTold) {
  // Answers have come, but no link window has closed: no plan yet. Once it
  // closes (1.5 s, 20 results, every credit out, 20 MB/s), the first plan
  // already knows the link.
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_results = 10;
  EXPECT_FALSE(r.Update(job.At(1, 100), nullptr).has_value());
  job.worker_results += 20;
  job.worker_saturated += 20;
  job.worker_bytes += 30e6;
  ASSERT_TRUE(r.Update(job.At(2.5, 200), nullptr).has_value());
  EXPECT_DOUBLE_EQ(r.State().ingest_limit, 20e6);
  // A worker whose window never closes (no more answers) holds the first
  // plan back for kLinkWaitSeconds at most.
  Replanner stuck(Options(), Placement::Cut(2, 0, 0));
  Job quiet;
  quiet.worker_results = 10;
  EXPECT_FALSE(stuck.Update(quiet.At(1, 100), nullptr).has_value());
  EXPECT_FALSE(stuck.Update(quiet.At(2.9, 200), nullptr).has_value());
  EXPECT_TRUE(stuck.Update(quiet.At(3.1, 300), nullptr).has_value());
  // Told the bandwidth, it plans at once.
  ReplanOptions told = Options();
  told.bandwidth = 50e6;
  Replanner now(told, Placement::Cut(2, 0, 0));
  EXPECT_TRUE(now.Update(quiet.At(1, 100), nullptr).has_value());
}

TEST(Replanner, ASharedIngestLinkIsNotOverCountedWhenOneWorkerGoesQuiet) {
  // Two workers behind the trainer's one 20 MB/s link: both bind at 10 MB/s,
  // then the plan uses one, which gets the whole 20 MB/s. Its own link now
  // looks like 20 MB/s and the other's still 10: Σ = 30. The ingest window
  // of both saw 20, and B stays there.
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  auto at = [&](double t, double samples, double a_bytes, int64_t a_results, double b_bytes,
                int64_t b_results) {
    Snapshot s = job.At(t, samples);
    s.workers[0].received_bytes = a_bytes;
    s.workers[0].results = s.workers[0].saturated_results = a_results;
    WorkerTotals b = s.workers[0];
    b.id = 8;
    b.name = "w:2";
    b.received_bytes = b_bytes;
    b.results = b.saturated_results = b_results;
    s.workers.push_back(b);
    return s;
  };
  r.Update(at(1, 100, 0, 0, 0, 0), nullptr);
  r.Update(at(2, 200, 1e6, 1, 1e6, 1), nullptr);        // the windows open
  r.Update(at(3.5, 300, 16e6, 11, 16e6, 11), nullptr);  // both at 10 MB/s
  EXPECT_DOUBLE_EQ(r.State().links.at(7).limit, 10e6);
  EXPECT_DOUBLE_EQ(r.State().links.at(8).limit, 10e6);
  r.Invalidate();
  r.Update(at(5, 400, 46e6, 31, 16e6, 11), nullptr);    // only w:1, at 20 MB/s
  EXPECT_DOUBLE_EQ(r.State().links.at(7).limit, 15e6);  // averaged with 20
  r.Invalidate();
  r.Update(at(6.5, 500, 76e6, 51, 16e6, 11), nullptr);
  EXPECT_GT(r.State().links.at(7).limit + r.State().links.at(8).limit, 25e6);
  EXPECT_DOUBLE_EQ(r.State().ingest_limit, 20e6);
}

// Two workers of 4 cores: w:1 near, its answers back with credits to spare;
// w:2 far, every credit out and its CPU idle at 2 MB/s. The plan counts
// w:2's cores only as far as 2 MB/s carries (cut 1 sends 15 MB per remote
// CPU-second: 0.13 of its 4 cores), and says so.
TEST(Replanner, AFarWorkersLinkCutsItsCoresInThePlan) {
  std::vector<std::string> notes;
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.remote_cores = 4;
  auto at = [&](double t, double samples, int64_t near_results, int64_t far_results) {
    Snapshot s = job.At(t, samples);
    s.workers[0].results = near_results;
    s.workers[0].received_bytes = 150e3 * near_results;
    WorkerTotals far = s.workers[0];
    far.id = 8;
    far.name = "w:2";
    far.results = far.saturated_results = far_results;
    far.received_bytes = 150e3 * far_results;
    s.workers.push_back(far);
    return s;
  };
  r.Update(at(1, 100, 0, 0), &notes);
  r.Update(at(2, 200, 10, 1), &notes);       // the windows open
  r.Update(at(3.5, 300, 1010, 21), &notes);  // far: 20 results, 2 MB/s
  ASSERT_DOUBLE_EQ(r.State().links.at(8).limit, 2e6);
  EXPECT_EQ(r.State().links.at(7).limit, 0);  // near: never bound
  r.Invalidate();
  ASSERT_TRUE(r.Update(at(4, 400, 1400, 27), &notes).has_value());
  EXPECT_THAT(r.State().explanation, ::testing::HasSubstr("workers' links"));
  // What the same input plans with both workers' cores in full, and with
  // w:2 cut to its link: the state is the second.
  PlanInput in;
  in.local_cost = {0.010, 0.001};
  in.boundary_bytes = {150e3, 600e3};
  in.local_cores = 2;
  in.remote_cores = 8;
  in.local_cost_per_byte = kPriorReceiveCpuPerByte;
  in.remote_cost_per_byte = kAssumedSendCpuPerByte;
  const double full = MakePlan(in)->throughput;
  in.worker_links = {{4, 2e6}};
  const double cut = MakePlan(in)->throughput;
  EXPECT_LT(cut, 0.8 * full);
  EXPECT_NEAR(r.State().throughput, cut, 0.05 * cut);
}

// Up to 4 s into `job`: the worker's first answers at 2.5 s, then 1.5 s of
// answers at 20 MB/s with every credit out, its CPU idle: its link binds.
void BindTheLinkAt20MBps(Replanner& r, Job& job, std::vector<std::string>* notes) {
  r.Update(job.At(1, 100), notes);
  job.worker_results = 10;
  r.Update(job.At(2.5, 200), notes);
  job.worker_results += 20;
  job.worker_saturated += 20;
  job.worker_bytes += 30e6;
  r.Update(job.At(4, 300), notes);  // a full period since the first plan
}

TEST(Replanner, ABindingLinkBecomesThePlansBandwidth) {
  std::vector<std::string> notes;
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  BindTheLinkAt20MBps(r, job, &notes);
  EXPECT_DOUBLE_EQ(r.State().ingest_limit, 20e6);
}

// A link estimate is probed up while answers come with credits to spare
// (nothing holds them back: the estimate may have been taken while this
// process was slow to take results), and pulled back when the link binds.
TEST(Replanner, ALinkEstimateIsProbedUpWhileNothingHoldsTheAnswers) {
  std::vector<std::string> notes;
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  BindTheLinkAt20MBps(r, job, &notes);
  ASSERT_DOUBLE_EQ(r.State().links.at(7).limit, 20e6);
  // Two windows at the same 20 MB/s, but with free credits: +10% each.
  double t = 4;
  for (int k = 0; k < 2; ++k) {
    t += 1.5;
    job.worker_results += 20;
    job.worker_bytes += 30e6;
    r.Update(job.At(t, 300 + 100 * (k + 1)), &notes);
  }
  EXPECT_NEAR(r.State().links.at(7).limit, 20e6 * 1.1 * 1.1, 1);
  // Bound again at 20 MB/s: averaged back down.
  t += 1.5;
  job.worker_results += 20;
  job.worker_saturated += 20;
  job.worker_bytes += 30e6;
  r.Update(job.At(t, 700), &notes);
  EXPECT_NEAR(r.State().links.at(7).limit, 0.5 * (20e6 * 1.21 + 20e6), 1);
}

}  // namespace
}  // namespace prepflow::policy

namespace prepflow::policy {
namespace {

// A plan that delivers less than predicted and no more than all local is
// predicted to (the model missed something) is tried against all local; all
// local delivering more is kept and explained, and no plan is made while it
// holds.
TEST(Replanner, APlanThatDoesNotDeliverIsTriedAgainstAllLocalAndGivenUp) {
  ReplanOptions o = Options();
  o.delivery.min_samples = 100;
  Replanner r(o, Placement::Cut(2, 0, 0));
  Job job;
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  const double predicted = r.State().throughput;
  ASSERT_GT(predicted, 200);  // all local: 2 cores / 11 ms = 182 samples/s
  double t = 1, delivered = 100, busy = 1;
  std::vector<std::string> notes;
  const auto run = [&](double seconds, double rate) -> std::optional<Placement> {
    for (double end = t + seconds; t < end - 1e-9;) {
      t += 0.25;
      delivered += 0.25 * rate;
      busy += 0.25 * 0.5;  // the trainer waits half the time: data-bound
      Snapshot s = job.At(t, delivered);
      s.busy_seconds = busy;
      if (auto p = r.Update(s, &notes)) return p;
    }
    return std::nullopt;
  };
  const std::optional<Placement> local = run(6, 150);
  ASSERT_TRUE(local.has_value());
  EXPECT_TRUE(local->all_local());
  EXPECT_THAT(notes.back(), ::testing::HasSubstr("trying all local"));
  // The ledger judged the plan's span: 150 delivered against its prediction,
  // told before what replaced it.
  ASSERT_GE(notes.size(), 2u);
  EXPECT_THAT(notes[notes.size() - 2],
              ::testing::HasSubstr("the placement before delivered 150.0 samples/s over"));
  EXPECT_NEAR(r.State().prediction_error, 1 - 150 / predicted, 0.01);
  EXPECT_GE(r.State().prediction_seconds, 2);
  // The run's summary names the inputs the prediction was last revised with.
  EXPECT_THAT(r.LedgerSummary(), ::testing::HasSubstr("; inputs at the end: stages (µs here"));
  EXPECT_FALSE(run(6, 180).has_value());     // better: kept, no placement to switch to
  EXPECT_NEAR(r.State().delivered, 180, 1);  // all local's span, since it settled
  EXPECT_THAT(r.State().explanation, ::testing::HasSubstr("all local: it delivered 180.0"));
  EXPECT_EQ(r.State().backoffs, 1);
  EXPECT_FALSE(run(10, 180).has_value());  // held: no offload plan meanwhile
}

}  // namespace
}  // namespace prepflow::policy

namespace prepflow::policy {
namespace {

// Offloading that predicts less than min_gain over all local is within the
// model's error: all local is planned, and says why. Two workers' 0.1 core
// against 2 here predict +5%; with min_gain 10% the plan stays local.
TEST(Replanner, APlanGainingUnderMinGainStaysLocal) {
  for (const double min_gain : {0.0, 0.1}) {
    ReplanOptions o = Options();
    o.min_gain = min_gain;
    Replanner r(o, Placement::Cut(2, 0, 0));
    Job job;
    job.remote_cores = 0.1;
    const std::optional<Placement> p = r.Update(job.At(1, 100), nullptr);
    ASSERT_TRUE(p.has_value());
    const ReplanState st = r.State();
    if (min_gain == 0) {
      EXPECT_FALSE(p->all_local());
      EXPECT_THAT(st.reason, ::testing::StartsWith("offloading predicts +5%"));
    } else {
      EXPECT_TRUE(p->all_local());
      EXPECT_EQ(st.reason, "all local: offloading predicts +5.0%, under the 10% it must gain");
      EXPECT_THAT(st.explanation, ::testing::HasSubstr("(offloading gains under 10%)"));
      EXPECT_NEAR(st.throughput, 2 / 0.011, 0.01);
    }
  }
}

// No link has bound and none was given: plans go no further than
// link_growth x the fastest ingest seen (slow start), and grow as more is
// seen to pass; once the link binds, its rate is B and the cap is gone.
TEST(Replanner, PlansGrowIntoALinkNotYetSeenBinding) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_results = 10;
  EXPECT_FALSE(r.Update(job.At(1, 100), nullptr).has_value());  // the windows open
  // 1.5 s at 2 MB/s with credits to spare: nothing binds.
  job.worker_results += 20;
  job.worker_bytes += 3e6;
  ASSERT_TRUE(r.Update(job.At(2.5, 200), nullptr).has_value());
  const ReplanState st = r.State();
  EXPECT_DOUBLE_EQ(st.ingest_limit, 8e6);  // 4 x 2 MB/s
  EXPECT_THAT(st.reason, ::testing::MatchesRegex(
                             "offloading predicts \\+[0-9]+% over all local; \\+[0-9]+% within the "
                             "network's cap, 4x the 2.0 MB/s seen until a link binds"));
  // 1.5 s at 8 MB/s, still free: the cap grows to 32 MB/s, and the plan with it.
  job.worker_results += 20;
  job.worker_bytes += 12e6;
  const std::optional<Placement> grown = r.Update(job.At(4, 300), nullptr);
  ASSERT_TRUE(grown.has_value());
  EXPECT_DOUBLE_EQ(r.State().ingest_limit, 32e6);
  // 1.5 s at 20 MB/s with every credit out: the link binds, and B is its rate.
  job.worker_results += 20;
  job.worker_saturated += 20;
  job.worker_bytes += 30e6;
  r.Update(job.At(5.5, 400), nullptr);
  EXPECT_DOUBLE_EQ(r.State().ingest_limit, 20e6);
  // Without the cap the first plan sends what 8 cores make, blind.
  ReplanOptions uncapped = Options();
  uncapped.link_growth = 0;
  Replanner blind(uncapped, Placement::Cut(2, 0, 0));
  Job again;
  again.worker_results = 10;
  blind.Update(again.At(1, 100), nullptr);
  again.worker_results += 20;
  again.worker_bytes += 3e6;
  ASSERT_TRUE(blind.Update(again.At(2.5, 200), nullptr).has_value());
  EXPECT_EQ(blind.State().ingest_limit, 0);
}

// Judged under the cap, a plan held to what a small probe passed could gain
// too little to offload at all, and then nothing would pass to lift the cap:
// the gain is the uncapped plan's, and the capped plan is the step towards it.
TEST(Replanner, ACappedPlanIsJudgedByItsUncappedGain) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_results = 10;
  r.Update(job.At(1, 100), nullptr);
  job.worker_results += 20;
  job.worker_bytes += 0.15e6;  // 0.1 MB/s: a sample a second
  const std::optional<Placement> p = r.Update(job.At(2.5, 200), nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->all_local());  // +1.5% under the cap, +300% without
  const ReplanState st = r.State();
  EXPECT_DOUBLE_EQ(st.ingest_limit, 0.4e6);
  EXPECT_THAT(st.reason, ::testing::ContainsRegex("; \\+1% within the network's cap"));
}

// A quarter second of answers with credits to spare shows the links carry
// at least that much: slow start can pace the first plan from it, which then
// need not wait for the link windows to close. Answers with every credit out
// may be a link binding already: the plan waits for the window to say.
TEST(Replanner, SlowStartPacesAFirstPlanBeforeTheLinksAreWatched) {
  for (const bool saturated : {false, true}) {
    Replanner r(Options(), Placement::Cut(2, 0, 0));
    Job job;
    job.worker_results = 10;
    EXPECT_FALSE(r.Update(job.At(1, 100), nullptr).has_value());  // the windows open
    job.worker_results += 4;
    job.worker_saturated += saturated ? 4 : 0;
    job.worker_bytes += 0.6e6;  // 2 MB/s over 0.3 s
    const std::optional<Placement> p = r.Update(job.At(1.3, 130), nullptr);
    EXPECT_EQ(p.has_value(), !saturated);
    if (p) {
      EXPECT_DOUBLE_EQ(r.State().ingest_limit, 8e6);
    }
  }
}

// A steady link probe is the worker's link until a window measures it: the
// first plan comes at once, within what the probe carried (20 MB/s: 133
// samples/s of 150 KB beside 182 here), where without it the plan waits for
// the link and then sends 5x that. The first window's verdict (10 MB/s)
// replaces the probe's, not averaged with it.
TEST(Replanner, ASteadyLinkProbeIsTheFirstPlansLinkUntilAWindowMeasuresIt) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_results = 10;
  job.worker_probe = Probe(20e6, /*steady=*/true);
  std::vector<std::string> notes;
  ASSERT_TRUE(r.Update(job.At(1, 100), &notes).has_value());
  ReplanState st = r.State();
  EXPECT_DOUBLE_EQ(st.links.at(7).limit, 20e6);
  EXPECT_DOUBLE_EQ(st.links.at(7).probe, 20e6);
  EXPECT_GT(st.throughput, 2 / 0.011);
  EXPECT_LT(st.throughput, 2 / 0.011 + 20e6 / 150e3 + 1);
  EXPECT_THAT(notes, ::testing::Contains(
                         ::testing::HasSubstr("w:1: its link probe came steadily at 20.0 MB/s")));
  Job unprobed;
  unprobed.worker_results = 10;
  Replanner waits(Options(), Placement::Cut(2, 0, 0));
  EXPECT_FALSE(waits.Update(unprobed.At(1, 100), nullptr).has_value());
  ASSERT_TRUE(waits.Update(unprobed.At(3.1, 100), nullptr).has_value());
  const double here = 2 / 0.011;
  EXPECT_GT(waits.State().throughput - here, 5 * (st.throughput - here));
  // A window: 15 MB in 1.5 s with every credit out, both sides idle.
  job.worker_results += 20;
  job.worker_saturated += 20;
  job.worker_bytes += 15e6;
  r.Update(job.At(2.5, 200), nullptr);
  EXPECT_DOUBLE_EQ(r.State().links.at(7).limit, 10e6);
}

// A probe whose chunks came unevenly (a window still opening, a stalled
// receiver) says only what the link carried at least: no limit, but the
// first plan comes at once, paced by slow start from it.
TEST(Replanner, AnUnsteadyLinkProbeOnlyPacesTheFirstPlan) {
  Replanner r(Options(), Placement::Cut(2, 0, 0));
  Job job;
  job.worker_results = 10;
  job.worker_probe = Probe(5e6, /*steady=*/false);
  ASSERT_TRUE(r.Update(job.At(1, 100), nullptr).has_value());
  const ReplanState st = r.State();
  EXPECT_EQ(st.links.at(7).limit, 0);
  EXPECT_DOUBLE_EQ(st.links.at(7).probe, 5e6);
  EXPECT_DOUBLE_EQ(st.ingest_limit, kLinkGrowth * 5e6);
}

// Two workers' steady probes that came together no faster than the fastest
// alone shared the link into this machine: what they came at together is
// the first plan's B, not the sum of their rates. Probes that ran one after
// the other are not counted as together; a worker whose own probe came far
// faster than both together has a link of its own, and B is left unknown.
TEST(Replanner, ProbesThatSharedOneLinkGiveTheIngestLimit) {
  auto first_plan_b = [](const ProbeTimer& a, const ProbeTimer& b) {
    Replanner r(Options(), Placement::Cut(2, 0, 0));
    Job job;
    job.worker_results = 10;
    job.worker_probe = a;
    Snapshot s = job.At(1, 100);
    WorkerTotals other = s.workers[0];
    other.id = 8;
    other.name = "w:2";
    other.probe = b;
    s.workers.push_back(other);
    EXPECT_TRUE(r.Update(s, nullptr).has_value());
    return r.State().ingest_limit;
  };
  // Side by side, each at 6 MB/s over the same 30 ms: 12 MB/s together.
  EXPECT_NEAR(first_plan_b(Probe(6e6, true), Probe(6e6, true)), 12e6, 1);
  // One, then the other: each alone at 12 MB/s, and 12 together.
  EXPECT_NEAR(first_plan_b(Probe(12e6, true), Probe(12e6, true, 0.5)), 12e6, 1);
  // A fast link beside a slow one: no shared limit, only each its own.
  EXPECT_NEAR(first_plan_b(Probe(500e6, true), Probe(5e6, true)), 505e6, 1);
  // A probe that was not steady says too little: slow start paces the plan.
  EXPECT_NEAR(first_plan_b(Probe(6e6, true), Probe(6e6, false)), kLinkGrowth * 6e6, 1);
}

}  // namespace
}  // namespace prepflow::policy
