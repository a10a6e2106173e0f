// What a Loader reports: LoaderStats, and the one table of its fields that
// every renderer works from.
//
// The CLI's JSON summary (stats_json.h), the Python dict (client/python) and
// the Prometheus collector (metrics.h) all walk the same tables below, so a
// field added here reaches all three; tests/client/loader_stats_test.cc and
// tests/python/test_loader.py fail when a renderer shows a key the table does
// not have or misses one it has.
//
// Thread-safety: plain values; the tables are immutable.
#ifndef PREPFLOW_CLIENT_LOADER_STATS_H_
#define PREPFLOW_CLIENT_LOADER_STATS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "pipeline/core/batch.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

struct LoaderStats {
  int64_t images = 0;         // delivered
  int64_t remote_images = 0;  // of which stages ran on a worker
  int64_t local_images = 0;
  int64_t errors = 0;  // samples that failed (skipped or fatal)
  // Samples moved up into an earlier batch to take the place of failed ones.
  int64_t filled_samples = 0;
  int64_t batches = 0;
  uint64_t bytes = 0;  // delivered output bytes
  // Of those, padding: variable-length values padded to their batch's
  // longest (what batching by length keeps low).
  uint64_t padding_bytes = 0;
  uint64_t checksum = 0;
  double seconds = 0;       // since the first Next()
  double cpu_seconds = 0;   // process CPU time over the same span
  double wait_seconds = 0;  // time Next() spent waiting for data
  int64_t reissued_items = 0;
  int64_t hedged_items = 0;            // copies sent to a second worker
  int64_t hedge_wins = 0;              // of those, answered first by the copy
  int64_t stolen_items = 0;            // echoed copies run away from their home
  int64_t drained_workers = 0;         // workers that said they were leaving
  std::string offload;                 // the mode in force
  std::string plan;                    // kAuto: the current plan's explanation
  std::string plan_reason;             // kAuto: why the placement in force was chosen
  std::vector<double> plan_fractions;  // share of samples: local, then remote cut 0..n
  int64_t plan_changes = 0;
  int64_t plan_backoffs = 0;   // plans given up for all local (policy/delivery_trial.h)
  double plan_throughput = 0;  // kAuto: what the current plan predicts, samples/s
  double plan_delivered = 0;   // kAuto: what it delivered since it settled, samples/s
  // kAuto: every placement's delivery against its prediction, time-weighted
  // (policy/prediction_ledger.h), over the seconds it could be judged.
  double plan_prediction_error = 0;
  double plan_prediction_seconds = 0;
  double ingest_limit = 0;  // kAuto: bytes/s the links were measured to bind at; 0: none seen
  double receive_cpu_per_byte = 0;      // kAuto: measured transport CPU here, s/byte
  double unseen_cpu_per_sample = 0;     // kAuto: CPU here outside measured stages, s/sample
  double worker_send_cpu_per_byte = 0;  // kAuto: the workers' transport CPU, s/byte
  struct WorkerStats {
    std::string address;
    bool alive = false;        // open for this job and taking items
    double granted_cores = 0;  // by the scheduler; 0: a static worker
    int streams = 0;           // opened to it (more than 1: it was re-granted or re-dialled)
    int64_t received_bytes = 0;
    int64_t samples = 0;     // samples it returned
    double link_limit = 0;   // bytes/s its link was seen to bind at; 0: not seen
    double ingest_rate = 0;  // bytes/s received from it over the last window (kAuto)
    double link_probe = 0;   // bytes/s its link probe came at (kAuto); 0: none
  };
  std::vector<WorkerStats> workers;
  // The cores this rank plans with: its share of the machine's.
  double local_cores = 0;
  int workers_alive = 0;
  int workers_total = 0;  // distinct addresses ever used
  // With a scheduler: whether its last beat got through, what this rank
  // asked for, its part of the job's fair share, the training job's share
  // (all its ranks'; the job's alone with one rank), and the cores granted
  // now.
  std::string scheduler;
  bool scheduler_reachable = false;
  double wanted_cores = 0;
  double fair_share_cores = 0;
  double job_fair_share_cores = 0;
  // What the scheduler's grant costs an hour, and what grants cost this run
  // (workers' --cost-per-core-hour; 0 where they give none).
  double grant_cost_per_hour = 0;
  double grant_cost = 0;
  double granted_cores = 0;
  // Measured here: "read" first, then one entry per pipeline stage.
  std::vector<StageStats> stages;
  // Measured on workers (as they report it), same layout.
  std::vector<StageStats> remote_stages;
  std::vector<SampleError> first_errors;  // up to 16
  // Remote storage (data named by URL): what the trainer's reads and the
  // workers' (as their items report them) cost together. The latency
  // histogram is the trainer's own requests'.
  StorageStats storage;
  // Per epoch of this run, from its first: bytes read from remote storage
  // for that epoch's samples, here and on the workers.
  std::vector<int64_t> storage_bytes_read_per_epoch;
  // Ranks (--rank-split): this rank's samples per epoch that repeat another
  // rank's (pad), and the job's samples per epoch no rank visits (drop).
  int64_t padded_samples_per_epoch = 0;
  int64_t dropped_samples_per_epoch = 0;
  // What storage gave while it bound the reads here and on the workers, in
  // bytes/s, as the planner learnt it (0: not seen binding).
  double storage_limit_here = 0;
  double storage_limit_workers = 0;
  // ... and to both together, from one store they share (0: not seen so).
  double storage_limit_shared = 0;
  // Sample caches (--cache-bytes, --cache-dir): the boundary whose values
  // they keep, and how often a sample's value was found there, here and on
  // the workers together.
  int cache_at = 0;
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  // This process's cache: bytes held in each tier, and values dropped.
  int64_t cache_ram_bytes = 0;
  int64_t cache_disk_bytes = 0;
  int64_t cache_evictions = 0;
  // Data echoing (--echo): the factor (of the latest epoch begun, and of
  // each epoch begun: with --echo auto they differ), the boundary it echoes
  // at, and the delivered samples that were first copies (fresh) or later
  // ones.
  int echo_factor = 1;
  std::vector<int64_t> echo_factor_per_epoch;
  // Wall seconds each epoch took to deliver, from the previous one's last
  // batch (the first from the start); epochs delivered in full only.
  std::vector<double> epoch_seconds;
  // A mixture (--mix): the samples delivered from each source, in order.
  std::vector<int64_t> mix_samples;
  int echo_at = 0;
  int64_t fresh_samples = 0;
  int64_t echoed_samples = 0;
};

// One field's value as renderers see it.
using StatValue = std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<double>,
                               std::vector<int64_t>>;

// One field of a stats record (`Record`: LoaderStats, one of its workers, a
// stage, an error).
template <typename Record>
struct StatField {
  enum Kind { kCounter, kGauge };
  const char* key;  // in JSON and Python
  StatValue (*get)(const Record&);
  // The Prometheus family, or nullptr where a field is not a series (text,
  // or the sum of other series). Its series carries `labels`; a label value
  // "$scheduler" stands for LoaderStats::scheduler. A vector value is one
  // series per element, labelled path="local" for the first, then
  // path="cut=K" for K = 0, 1, ... (plan_fractions). A list of integers is
  // never a series.
  const char* metric = nullptr;
  Kind kind = kGauge;
  std::vector<std::pair<const char*, const char*>> labels = {};
  const char* help = "";
  bool scheduler_only = false;  // a series only for a job with a scheduler
};

// The scalar fields of LoaderStats, and the records of its lists.
const std::vector<StatField<LoaderStats>>& LoaderStatFields();
const std::vector<StatField<LoaderStats::WorkerStats>>& WorkerStatFields();
const std::vector<StatField<StageStats>>& StageStatFields();
const std::vector<StatField<SampleError>>& ErrorStatFields();

// Calls `visit(key, records, fields)` for each list of `stats`, the one place
// that names them: `workers` (series labelled worker=address), `stages` and
// `remote_stages` (labelled stage=name, side=local or remote),
// `first_errors` (never series).
template <typename Visit>
void VisitStatLists(const LoaderStats& stats, Visit&& visit) {
  visit("workers", stats.workers, WorkerStatFields());
  visit("stages", stats.stages, StageStatFields());
  visit("remote_stages", stats.remote_stages, StageStatFields());
  visit("first_errors", stats.first_errors, ErrorStatFields());
}

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_STATS_H_
