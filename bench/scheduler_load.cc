// prepflow-scheduler under a whole pool's load. Starts the real scheduler,
// then plays --workers workers and --jobs jobs beating it over real gRPC at
// the rate it tells them (phases spread over the period), on --connections
// channels (0: one per worker and per job, as in a real pool). Jobs send the
// workers they stream from, as clients do, and change their want now and
// then (--want-change-seconds). Three phases:
//   ramp    every party's first beats: a pool meeting a (re)started scheduler;
//   steady  --seconds after the settling period: the scheduler's CPU per beat
//           and in cores, beat latencies (jobs' and workers' apart), memory;
//   loss    --lose workers holding grants stop beating: for each job that
//           held one, the time until its grant names none of them (the
//           expiry period, --expire-after, is most of it).
// Prints one JSON line; the goals are the (1 core, p99 < 100 ms,
// < 1 GB).
//
//   scheduler_load --workers 10000 --jobs 1000 [--seconds 30] [--lose 100]
#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/flags.h"
#include "base/process_stats.h"
#include "client/worker_process.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"

namespace {

using prepflow::WallNanos;
using prepflow::proto::Scheduler;

struct Args {
  int64_t workers = 10000;
  int64_t jobs = 1000;
  int64_t connections = 0;
  int64_t zones = 8;
  double seconds = 30;
  double heartbeat_seconds = 2;
  double expire_after = 6;
  double want_change_seconds = 60;
  int64_t lose = 100;
  uint64_t seed = 1;
  int64_t scheduler_cpu = -1;
  std::string scheduler = prepflow::SiblingBinary("prepflow-scheduler");
};

// What one phase saw: beat latencies and failures.
struct PhaseStats {
  std::vector<int64_t> job_nanos, worker_nanos;
  int64_t errors = 0;
  int64_t late = 0;  // beats sent over 100 ms after they were due
  std::string first_error;
};

class Party;

// The simulation's state the parties share.
struct Pool {
  std::vector<std::unique_ptr<Scheduler::Stub>> stubs;
  grpc::CompletionQueue cq;
  PhaseStats* stats = nullptr;
  std::mt19937_64 rng;
  double heartbeat_seconds = 2;
  double want_change_chance = 0;  // per beat
  // The loss phase: the workers stopped and when.
  std::set<std::string> lost;
  int64_t lost_at = 0;
};

// One simulated worker or job: at most one beat in flight, as in the real
// daemons and clients, which beat from one loop.
class Party {
 public:
  virtual ~Party() = default;
  // Sends a beat unless one is in flight (then this one is skipped).
  void Beat(Pool& pool) {
    if (in_flight_ || stopped_) return;
    in_flight_ = true;
    sent_ = WallNanos();
    context_ = std::make_unique<grpc::ClientContext>();
    context_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    Send(pool);
  }
  // The reply to the beat in flight arrived.
  void Done(Pool& pool, bool ok) {
    in_flight_ = false;
    const int64_t took = WallNanos() - sent_;
    if (!ok || !status_.ok()) {
      if (pool.stats->errors++ == 0) {
        pool.stats->first_error =
            ok ? absl::StrCat(status_.error_code(), ": ", status_.error_message()) : "cq failed";
      }
      return;
    }
    Received(pool, took);
  }
  void Stop() { stopped_ = true; }

 protected:
  virtual void Send(Pool& pool) = 0;
  virtual void Received(Pool& pool, int64_t took) = 0;

  std::unique_ptr<grpc::ClientContext> context_;
  grpc::Status status_;

 private:
  bool in_flight_ = false;
  bool stopped_ = false;
  int64_t sent_ = 0;
};

class SimWorker final : public Party {
 public:
  SimWorker(int index, int channel, double cores, const std::string& zone) : channel_(channel) {
    beat_.set_worker_id(absl::StrFormat("w%05d", index));
    beat_.set_address(
        absl::StrFormat("10.%d.%d.%d:7001", index >> 16 & 255, index >> 8 & 255, index & 255));
    beat_.set_cores(cores);
    (*beat_.mutable_labels())["zone"] = zone;
    beat_.set_version("scheduler_load");
  }
  const std::string& id() const { return beat_.worker_id(); }

 private:
  void Send(Pool& pool) override {
    beat_.set_load(std::uniform_real_distribution<double>(0, 1)(pool.rng));
    beat_.set_active_streams(static_cast<int32_t>(pool.rng() % 8));
    reader_ = pool.stubs[channel_]->PrepareAsyncWorkerHeartbeat(context_.get(), beat_, &pool.cq);
    reader_->StartCall();
    reader_->Finish(&reply_, &status_, static_cast<Party*>(this));
  }
  void Received(Pool& pool, int64_t took) override {
    beat_.set_lease(reply_.lease());
    pool.stats->worker_nanos.push_back(took);
  }

  const int channel_;
  prepflow::proto::WorkerBeat beat_;
  prepflow::proto::WorkerBeatReply reply_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<prepflow::proto::WorkerBeatReply>> reader_;
};

class SimJob final : public Party {
 public:
  SimJob(int index, int channel, double want, double weight, const std::string& zone,
         uint64_t instance)
      : channel_(channel) {
    beat_.set_job_id(absl::StrFormat("j%04d", index));
    beat_.set_wanted_cores(want);
    beat_.set_weight(weight);
    (*beat_.mutable_labels())["zone"] = zone;
    beat_.set_instance(absl::StrFormat("%016x", instance));
  }
  // The workers of its latest grant.
  const prepflow::proto::JobGrant& grant() const { return grant_; }
  // Whether the loss phase still waits for this job's grant to change.
  bool waiting = false;
  int64_t regrant_nanos = -1;  // loss to a grant naming no lost worker

 private:
  void Send(Pool& pool) override {
    if (std::uniform_real_distribution<double>(0, 1)(pool.rng) < pool.want_change_chance) {
      beat_.set_wanted_cores(std::max(
          1.0, beat_.wanted_cores() * std::uniform_real_distribution<double>(0.8, 1.25)(pool.rng)));
    }
    *beat_.mutable_current() = grant_.workers();  // what a client streams from
    reader_ = pool.stubs[channel_]->PrepareAsyncJobHeartbeat(context_.get(), beat_, &pool.cq);
    reader_->StartCall();
    reader_->Finish(&reply_, &status_, static_cast<Party*>(this));
  }
  void Received(Pool& pool, int64_t took) override {
    grant_.Swap(&reply_);
    pool.stats->job_nanos.push_back(took);
    if (!waiting) return;
    for (const auto& w : grant_.workers()) {
      if (pool.lost.count(w.worker_id()) != 0) return;
    }
    waiting = false;
    regrant_nanos = WallNanos() - pool.lost_at;
  }

  const int channel_;
  prepflow::proto::JobBeat beat_;
  prepflow::proto::JobGrant grant_, reply_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<prepflow::proto::JobGrant>> reader_;
};

// The pool as alloc_bench draws it: workers of 1 to 32 cores in --zones
// zones, jobs wanting up to 4 fair shares, weights 1 to 4.
struct Sim {
  Pool pool;
  std::vector<std::unique_ptr<SimWorker>> workers;
  std::vector<std::unique_ptr<SimJob>> jobs;
  std::vector<Party*> order;  // beat phases: the k-th beats at k/N of the period
  int64_t start = 0;          // of round 0
  size_t cursor = 0;
  int64_t round = 0;

  void Build(const Args& args, int channels) {
    pool.rng.seed(args.seed);
    auto zone = [&] { return absl::StrCat("z", pool.rng() % args.zones); };
    double pool_cores = 0;
    for (int64_t w = 0; w < args.workers; ++w) {
      const double cores = static_cast<double>(1 << (pool.rng() % 6));
      pool_cores += cores;
      workers.push_back(std::make_unique<SimWorker>(w, w % channels, cores, zone()));
      order.push_back(workers.back().get());
    }
    const double fair = pool_cores / static_cast<double>(std::max<int64_t>(args.jobs, 1));
    for (int64_t j = 0; j < args.jobs; ++j) {
      const double want = std::uniform_real_distribution<double>(1, 4 * fair)(pool.rng);
      jobs.push_back(std::make_unique<SimJob>(j, (args.workers + j) % channels, want,
                                              1 + static_cast<double>(pool.rng() % 4), zone(),
                                              pool.rng()));
      order.push_back(jobs.back().get());
    }
    std::shuffle(order.begin(), order.end(), pool.rng);
    pool.heartbeat_seconds = args.heartbeat_seconds;
  }

  // When the beat at the cursor is due.
  int64_t Due() const {
    const double period = pool.heartbeat_seconds * 1e9;
    return start + static_cast<int64_t>(
                       period * (static_cast<double>(round) +
                                 static_cast<double>(cursor) / static_cast<double>(order.size())));
  }

  // Beats and takes replies until `until` (WallNanos), or `done` says stop.
  template <typename Done>
  void RunUntil(int64_t until, PhaseStats* stats, Done done) {
    pool.stats = stats;
    while (WallNanos() < until && !done()) {
      int64_t now = WallNanos();
      for (int64_t due = Due(); due <= now; due = Due()) {
        if (now - due > 100'000'000) ++stats->late;
        order[cursor]->Beat(pool);
        if (++cursor == order.size()) cursor = 0, ++round;
      }
      void* tag = nullptr;
      bool ok = false;
      const int64_t wait = std::max<int64_t>(0, std::min(Due(), until) - WallNanos());
      const auto r = pool.cq.AsyncNext(
          &tag, &ok, std::chrono::system_clock::now() + std::chrono::nanoseconds(wait));
      if (r == grpc::CompletionQueue::GOT_EVENT) static_cast<Party*>(tag)->Done(pool, ok);
    }
  }

  // Waits for the replies to the beats in flight, then closes the queue.
  void Drain() {
    pool.cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (pool.cq.Next(&tag, &ok)) static_cast<Party*>(tag)->Done(pool, ok);
  }
};

double Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return static_cast<double>(v[k]) * 1e-6;  // ms
}

std::string LatencyJson(const char* name, const std::vector<int64_t>& v) {
  return absl::StrFormat("\"%s_p50_ms\":%.2f,\"%s_p99_ms\":%.2f,\"%s_max_ms\":%.2f", name,
                         Percentile(v, 0.5), name, Percentile(v, 0.99), name, Percentile(v, 1.0));
}

std::string PhaseJson(const char* name, const PhaseStats& s) {
  return absl::StrFormat(
      "\"%s\":{\"job_beats\":%d,\"worker_beats\":%d,%s,%s,\"errors\":%d,\"late_beats\":%d%s}", name,
      s.job_nanos.size(), s.worker_nanos.size(), LatencyJson("job", s.job_nanos),
      LatencyJson("worker", s.worker_nanos), s.errors, s.late,
      s.first_error.empty() ? "" : absl::StrCat(",\"first_error\":\"", s.first_error, "\""));
}

// Stops `n` workers that some job's grant names; marks those jobs waiting.
int StopGrantedWorkers(Sim& sim, int64_t n) {
  std::vector<std::string> granted;
  for (const auto& job : sim.jobs) {
    for (const auto& w : job->grant().workers()) granted.push_back(w.worker_id());
  }
  std::sort(granted.begin(), granted.end());
  granted.erase(std::unique(granted.begin(), granted.end()), granted.end());
  std::shuffle(granted.begin(), granted.end(), sim.pool.rng);
  granted.resize(std::min<size_t>(granted.size(), static_cast<size_t>(n)));
  sim.pool.lost.insert(granted.begin(), granted.end());
  sim.pool.lost_at = WallNanos();
  for (const auto& w : sim.workers) {
    if (sim.pool.lost.count(w->id()) != 0) w->Stop();
  }
  int affected = 0;
  for (const auto& job : sim.jobs) {
    for (const auto& w : job->grant().workers()) {
      if (sim.pool.lost.count(w.worker_id()) != 0) {
        job->waiting = true;
        ++affected;
        break;
      }
    }
  }
  return affected;
}

// The loss phase's figures: how long affected jobs waited for a new grant.
std::string LossJson(const Sim& sim, int affected) {
  std::vector<int64_t> waits;
  for (const auto& job : sim.jobs) {
    if (job->regrant_nanos >= 0) waits.push_back(job->regrant_nanos);
  }
  return absl::StrFormat(
      "\"loss\":{\"workers_lost\":%d,\"jobs_affected\":%d,\"jobs_regranted\":%d,"
      "\"regrant_p50_s\":%.2f,\"regrant_max_s\":%.2f}",
      sim.pool.lost.size(), affected, waits.size(), Percentile(waits, 0.5) * 1e-3,
      Percentile(waits, 1.0) * 1e-3);
}

// One channel per connection: a subchannel pool of its own, so channels to
// one address do not share a connection.
std::vector<std::unique_ptr<Scheduler::Stub>> Connect(const std::string& target, int channels) {
  std::vector<std::unique_ptr<Scheduler::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(Scheduler::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), channel_args)));
  }
  return stubs;
}

// The connections the flags ask for, within this process's open files.
int Channels(const Args& args) {
  rlimit limit = {};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  const int64_t parties = args.workers + args.jobs;
  const int64_t wanted = args.connections > 0 ? std::min(args.connections, parties) : parties;
  const int64_t room = static_cast<int64_t>(limit.rlim_cur) - 256;
  if (wanted > room) {
    std::fprintf(stderr, "scheduler_load: %lld connections do not fit the open-files limit; %lld\n",
                 static_cast<long long>(wanted), static_cast<long long>(room));
  }
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, room)));
}

// Pins every thread of process `pid` to CPU `cpu`, and this process to the
// others: the scheduler gets one core of its own, as the goal states it.
bool Pin(pid_t pid, int cpu) {
  cpu_set_t one, rest;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_getaffinity(0, sizeof(rest), &rest) != 0) return false;
  CPU_CLR(cpu, &rest);
  if (CPU_COUNT(&rest) == 0) return false;
  DIR* tasks = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (tasks == nullptr) return false;
  bool ok = true;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] != '.') ok &= sched_setaffinity(std::atoi(e->d_name), sizeof(one), &one) == 0;
  }
  closedir(tasks);
  return ok && sched_setaffinity(0, sizeof(rest), &rest) == 0;
}

struct Measured {
  double cpu_seconds = 0, wall_seconds = 0, loadgen_cpu_seconds = 0;
  int64_t rss = 0, peak_rss = 0;
  int threads = 0;
};

int Run(const Args& args) {
  const int channels = Channels(args);
  auto scheduler = prepflow::WorkerProcess::StartDaemon(
      args.scheduler, {"--port", "0", "--heartbeat-seconds", absl::StrCat(args.heartbeat_seconds),
                       "--expire-after", absl::StrCat(args.expire_after), "--max-job-weight", "4",
                       "--max-jobs-per-credential", absl::StrCat(args.jobs + 1)});
  if (!scheduler.ok()) {
    std::fprintf(stderr, "scheduler_load: %s\n", scheduler.status().ToString().c_str());
    return 1;
  }
  const pid_t pid = (*scheduler)->pid();
  if (args.scheduler_cpu >= 0 && !Pin(pid, static_cast<int>(args.scheduler_cpu))) {
    std::fprintf(stderr, "scheduler_load: cannot pin the scheduler to CPU %lld alone\n",
                 static_cast<long long>(args.scheduler_cpu));
    return 1;
  }
  Sim sim;
  sim.pool.stubs = Connect((*scheduler)->address(), channels);
  sim.Build(args, channels);
  sim.pool.want_change_chance = args.heartbeat_seconds / args.want_change_seconds;
  const auto never = [] { return false; };
  PhaseStats ramp, steady, loss;
  const double settle = args.expire_after + 2 * args.heartbeat_seconds;
  sim.start = WallNanos();
  sim.RunUntil(sim.start + static_cast<int64_t>(settle * 1e9), &ramp, never);

  Measured m;
  const int64_t cpu0 = prepflow::ProcessCpuNanosOf(pid), self0 = prepflow::ProcessCpuNanosOf(0);
  const int64_t t0 = WallNanos();
  sim.RunUntil(t0 + static_cast<int64_t>(args.seconds * 1e9), &steady, never);
  m.wall_seconds = static_cast<double>(WallNanos() - t0) * 1e-9;
  m.cpu_seconds = static_cast<double>(prepflow::ProcessCpuNanosOf(pid) - cpu0) * 1e-9;
  m.loadgen_cpu_seconds = static_cast<double>(prepflow::ProcessCpuNanosOf(0) - self0) * 1e-9;
  m.rss = prepflow::ProcessResidentBytes(pid);
  m.threads = prepflow::ProcessThreadCount(pid);

  const int affected = StopGrantedWorkers(sim, args.lose);
  const double patience = args.expire_after + 4 * args.heartbeat_seconds + 10;
  sim.RunUntil(WallNanos() + static_cast<int64_t>(patience * 1e9), &loss, [&] {
    return std::none_of(sim.jobs.begin(), sim.jobs.end(), [](const auto& j) { return j->waiting; });
  });
  m.peak_rss = prepflow::ProcessResidentBytes(pid, /*peak=*/true);
  sim.Drain();

  const double beats = static_cast<double>(steady.job_nanos.size() + steady.worker_nanos.size());
  std::printf(
      "{\"program\":\"scheduler_load\",\"workers\":%lld,\"jobs\":%lld,\"connections\":%d,"
      "\"scheduler_cpu\":%lld,\"heartbeat_seconds\":%g,\"expire_after_seconds\":%g,\"steady_"
      "seconds\":%.1f,"
      "\"beats_per_s\":%.0f,\"scheduler_cores\":%.3f,\"scheduler_cpu_us_per_beat\":%.1f,"
      "\"scheduler_threads\":%d,\"scheduler_rss_mb\":%.1f,\"scheduler_peak_rss_mb\":%.1f,"
      "\"loadgen_cores\":%.3f,%s,%s,%s,%s,"
      "\"goal_cores\":1,\"goal_job_p99_ms\":100,\"goal_rss_mb\":1024}\n",
      static_cast<long long>(args.workers), static_cast<long long>(args.jobs), channels,
      static_cast<long long>(args.scheduler_cpu), args.heartbeat_seconds, args.expire_after,
      m.wall_seconds, beats / m.wall_seconds, m.cpu_seconds / m.wall_seconds,
      1e6 * m.cpu_seconds / std::max(1.0, beats), m.threads, static_cast<double>(m.rss) / (1 << 20),
      static_cast<double>(m.peak_rss) / (1 << 20), m.loadgen_cpu_seconds / m.wall_seconds,
      PhaseJson("ramp", ramp).c_str(), PhaseJson("steady", steady).c_str(),
      PhaseJson("loss_phase", loss).c_str(), LossJson(sim, affected).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  prepflow::cli::FlagSet flags("scheduler_load",
                               "Drives prepflow-scheduler with a simulated pool over real gRPC.");
  flags.Int("workers", &args.workers, "simulated workers");
  flags.Int("jobs", &args.jobs, "simulated jobs");
  flags.Int("connections", &args.connections,
            "gRPC connections the parties share (0: one per worker and per job)");
  flags.Int("zones", &args.zones, "locality zones");
  flags.Double("seconds", &args.seconds, "length of the steady window measured");
  flags.Double("heartbeat-seconds", &args.heartbeat_seconds, "the scheduler's beat period");
  flags.Double("expire-after", &args.expire_after, "the scheduler's expiry period");
  flags.Double("want-change-seconds", &args.want_change_seconds,
               "how often, on average, a job's want changes (its planner re-plans)");
  flags.Int("lose", &args.lose, "granted workers stopped for the loss phase");
  flags.Uint("seed", &args.seed, "seed");
  flags.Int("scheduler-cpu", &args.scheduler_cpu,
            "pin the scheduler to this CPU alone and the load to the others (-1: no pinning)");
  flags.String("scheduler", &args.scheduler, "the prepflow-scheduler binary");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (args.workers < 1 || args.jobs < 1 || args.zones < 1 || args.lose < 0 || !(args.seconds > 0) ||
      !(args.heartbeat_seconds > 0) || !(args.expire_after > args.heartbeat_seconds) ||
      !(args.want_change_seconds > 0)) {
    std::fprintf(stderr,
                 "scheduler_load: --workers, --jobs and --zones must be >= 1, --lose >= 0, "
                 "--seconds, --heartbeat-seconds and --want-change-seconds > 0, "
                 "--expire-after > --heartbeat-seconds\n");
    return 2;
  }
  return Run(args);
}
