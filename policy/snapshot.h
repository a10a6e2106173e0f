// What the client measured, as the re-planner reads it: cumulative
// counters of the stages here and on the workers, each worker stream's, and
// this process's (replanner.h says how each is used).
//
// Thread-safety: plain values.
#ifndef PREPFLOW_POLICY_SNAPSHOT_H_
#define PREPFLOW_POLICY_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "policy/measurements.h"

namespace prepflow::policy {

// Cumulative counters of one stage.
struct StageTotals {
  double cpu_seconds = 0;
  double output_bytes = 0;
  double samples = 0;
};

// One worker stream as the client saw it, counters cumulative since it opened.
struct WorkerTotals {
  int id = 0;           // stable for the stream's life
  std::string name;     // for notes: its address
  bool usable = false;  // open, taking items, not retiring
  double cores = 0;     // cores this job may use there
  double received_bytes = 0;
  double cpu_seconds = 0;  // CPU it reported for this job's items
  int64_t results = 0;
  int64_t saturated_results = 0;  // results that arrived with every credit out
  // Wall seconds its answers spent on the worker, launch to ready to send
  // (ItemResult.run_seconds, summed), and the items it may hold at once.
  double run_seconds = 0;
  int credits = 0;
  // The worker's own report of the share of its cores it kept busy (all
  // its jobs), in its latest result; 0 when it reports none.
  double worker_busy = 0;
  // Its link probe at stream open, as it arrived here.
  ProbeTimer probe;
};

struct Snapshot {
  int64_t now_nanos = 0;
  int64_t process_cpu_nanos = 0;  // this process's CPU time, all threads
  double local_cores = 1;         // L
  StageTotals read;               // reading files here
  // Work here on every delivered sample outside the pipeline: batch ops
  // (MixUp/CutMix), a Python tail. Samples: those delivered.
  StageTotals trainer_work;
  std::vector<StageTotals> local_stages;   // one per stage, here
  std::vector<StageTotals> remote_stages;  // "read", then one per stage, on workers
  double received_bytes = 0;               // from every worker
  double receive_cpu_seconds = 0;          // spent here receiving them
  // The workers' transport CPU (their reports of it per byte, times the
  // bytes) and the bytes it covers: t_r once measured.
  struct {
    double cpu_seconds = 0;
    double bytes = 0;
  } worker_transport;
  double delivered_samples = 0;       // to the trainer
  double busy_seconds = 0;            // the trainer's time not waiting for data
  std::vector<WorkerTotals> workers;  // every stream, dead ones too
  // The last cut workers can take (PlanInput::max_cut) and why; -1: any.
  int max_cut = -1;
  std::string max_cut_why;
  // Reuse (PlanInput's reuse terms): the boundary a load reaches, the
  // sample caches' hits and misses so far (here and on workers), and the
  // echo factor.
  int reuse_at = 0;
  double cache_hits = 0;
  double cache_misses = 0;
  double echo = 1;
  // Storage: wall seconds the threads reading here spent waiting for bytes
  // (summed over them) and how many threads read; the workers' waits as
  // their items report them (their cores read), and the bytes they read.
  // Bytes read here are the "read" stage's output bytes; reads on workers
  // are remote_stages[0].samples.
  double read_wait_seconds = 0;
  double read_threads = 1;
  double remote_read_wait_seconds = 0;
  double remote_read_bytes = 0;
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_SNAPSHOT_H_
