#include "client/loader_stats.h"

#include "pipeline/core/checksum.h"

namespace prepflow {
namespace {

using S = LoaderStats;
using W = LoaderStats::WorkerStats;
constexpr auto kCounter = StatField<S>::kCounter;
constexpr auto kGauge = StatField<S>::kGauge;

double PerSecond(double n, double seconds) { return seconds > 0 ? n / seconds : 0; }

// The share of samples with any stage remote, and the cut most of them take.
double RemoteFraction(const S& s) {
  double remote = 0;
  for (size_t k = 1; k < s.plan_fractions.size(); ++k) remote += s.plan_fractions[k];
  return remote;
}
int64_t MainCut(const S& s) {
  double largest = 0;
  int64_t cut = 0;
  for (size_t k = 1; k < s.plan_fractions.size(); ++k) {
    if (s.plan_fractions[k] > largest) {
      largest = s.plan_fractions[k];
      cut = static_cast<int64_t>(k) - 1;
    }
  }
  return cut;
}

}  // namespace

namespace {

// What was delivered, how fast, and what it cost.
// Each part is new; LoaderStatFields() joins them once.
std::vector<StatField<S>>* DeliveryFields() {
  return new std::vector<StatField<S>>{

      {"images", [](const S& s) -> StatValue { return s.images; }},  // = the samples_total series
      {"local_images",
       [](const S& s) -> StatValue { return s.local_images; },
       "prepflow_client_samples_total",
       kCounter,
       {{"placement", "local"}},
       "Samples delivered to the trainer, by where they ran."},
      {"remote_images",
       [](const S& s) -> StatValue { return s.remote_images; },
       "prepflow_client_samples_total",
       kCounter,
       {{"placement", "remote"}},
       "Samples delivered to the trainer, by where they ran."},
      {"errors",
       [](const S& s) -> StatValue { return s.errors; },
       "prepflow_client_errors_total",
       kCounter,
       {},
       "Samples that failed (skipped or fatal)."},
      {"filled_samples",
       [](const S& s) -> StatValue { return s.filled_samples; },
       "prepflow_client_filled_samples_total",
       kCounter,
       {},
       "Samples moved up into an earlier batch in place of failed ones (--on-error skip)."},
      {"batches",
       [](const S& s) -> StatValue { return s.batches; },
       "prepflow_client_batches_total",
       kCounter,
       {},
       "Batches delivered to the trainer."},
      {"output_bytes",
       [](const S& s) -> StatValue { return s.bytes; },
       "prepflow_client_output_bytes_total",
       kCounter,
       {},
       "Bytes of delivered batch tensors."},
      {"padding_bytes",
       [](const S& s) -> StatValue { return s.padding_bytes; },
       "prepflow_client_padding_bytes_total",
       kCounter,
       {},
       "Of the delivered bytes, padding: variable-length values padded to their batch's "
       "longest."},
      {"checksum", [](const S& s) -> StatValue { return ChecksumHex(s.checksum); }},
      {"checksum_value", [](const S& s) -> StatValue { return s.checksum; }},
      {"seconds",
       [](const S& s) -> StatValue { return s.seconds; },
       "prepflow_client_elapsed_seconds",
       kGauge,
       {},
       "Wall time since the first Next()."},
      {"images_per_s", [](const S& s) -> StatValue { return PerSecond(s.images, s.seconds); }},
      {"cpu_seconds",
       [](const S& s) -> StatValue { return s.cpu_seconds; },
       "prepflow_client_cpu_seconds_total",
       kCounter,
       {},
       "CPU time of the trainer's process since the first Next()."},
      {"images_per_cpu_s",
       [](const S& s) -> StatValue { return PerSecond(s.images, s.cpu_seconds); }},
      {"wait_seconds",
       [](const S& s) -> StatValue { return s.wait_seconds; },
       "prepflow_client_wait_seconds_total",
       kCounter,
       {},
       "Time the trainer spent waiting for data in Next(): the input-bound time."},
  };
}

// Work items moved or copied to another worker.
std::vector<StatField<S>>* RecoveryFields() {
  return new std::vector<StatField<S>>{
      {"reissued_items",
       [](const S& s) -> StatValue { return s.reissued_items; },
       "prepflow_client_reissued_items_total",
       kCounter,
       {},
       "Work items handed to another worker after theirs failed."},
      {"hedged_items",
       [](const S& s) -> StatValue { return s.hedged_items; },
       "prepflow_client_hedged_items_total",
       kCounter,
       {},
       "Work items copied to a second, idle worker because the first was slow."},
      {"hedge_wins",
       [](const S& s) -> StatValue { return s.hedge_wins; },
       "prepflow_client_hedge_wins_total",
       kCounter,
       {},
       "Hedged work items that the copy answered first."},
      {"stolen_items",
       [](const S& s) -> StatValue { return s.stolen_items; },
       "prepflow_client_stolen_items_total",
       kCounter,
       {},
       "Work items of echoed copies that ran on an idle worker rather than wait for their home."},
      {"drained_workers",
       [](const S& s) -> StatValue { return s.drained_workers; },
       "prepflow_client_drained_workers_total",
       kCounter,
       {},
       "Workers that said they were leaving (draining): sent no new items, closed once idle."},
  };
}

// Remote storage, trainer and workers together.
std::vector<StatField<S>>* StorageFields() {
  return new std::vector<StatField<S>>{
      {"storage_bytes_read",
       [](const S& s) -> StatValue { return s.storage.bytes; },
       "prepflow_client_storage_bytes_read_total",
       kCounter,
       {},
       "Bytes read from remote storage (data named by URL), by the trainer and its workers."},
      {"storage_requests",
       [](const S& s) -> StatValue { return s.storage.requests; },
       "prepflow_client_storage_requests_total",
       kCounter,
       {},
       "Requests to remote storage, retries included, by the trainer and its workers."},
      {"storage_retries",
       [](const S& s) -> StatValue { return s.storage.retries; },
       "prepflow_client_storage_retries_total",
       kCounter,
       {},
       "Requests to remote storage that repeated a failed one (5xx, 429, reset, timeout, short "
       "read)."},
      {"storage_errors",
       [](const S& s) -> StatValue { return s.storage.errors; },
       "prepflow_client_storage_errors_total",
       kCounter,
       {},
       "Reads from remote storage that failed after their retries."},
      {"storage_whole_objects",
       [](const S& s) -> StatValue { return s.storage.whole_objects; },
       "prepflow_client_storage_whole_objects_total",
       kCounter,
       {},
       "Objects fetched whole because their server ignores Range requests, by the trainer and "
       "its workers."},
      {"storage_limit_here",
       [](const S& s) -> StatValue { return s.storage_limit_here; },
       "prepflow_client_storage_limit_bytes_per_second",
       kGauge,
       {{"side", "here"}},
       "Bytes/s storage gave while it bound the reads (learnt by the planner; 0: not seen)."},
      {"storage_limit_workers",
       [](const S& s) -> StatValue { return s.storage_limit_workers; },
       "prepflow_client_storage_limit_bytes_per_second",
       kGauge,
       {{"side", "workers"}},
       "Bytes/s storage gave while it bound the reads (learnt by the planner; 0: not seen)."},
      {"storage_limit_shared",
       [](const S& s) -> StatValue { return s.storage_limit_shared; },
       "prepflow_client_storage_limit_bytes_per_second",
       kGauge,
       {{"side", "shared"}},
       "Bytes/s storage gave while it bound the reads (learnt by the planner; 0: not seen)."},
  };
}

// Reuse across epochs: the sample caches.
std::vector<StatField<S>>* CacheFields() {
  return new std::vector<StatField<S>>{
      {"storage_bytes_read_per_epoch",
       [](const S& s) -> StatValue { return s.storage_bytes_read_per_epoch; }},
      {"padded_samples_per_epoch",
       [](const S& s) -> StatValue { return s.padded_samples_per_epoch; }},
      {"dropped_samples_per_epoch",
       [](const S& s) -> StatValue { return s.dropped_samples_per_epoch; }},
      {"cache_at", [](const S& s) -> StatValue { return static_cast<int64_t>(s.cache_at); }},
      {"cache_hits",
       [](const S& s) -> StatValue { return s.cache_hits; },
       "prepflow_client_cache_hits_total",
       kCounter,
       {},
       "Samples whose value at the cache boundary was found in a sample cache (here or on a "
       "worker) instead of being read and prepared again."},
      {"cache_misses",
       [](const S& s) -> StatValue { return s.cache_misses; },
       "prepflow_client_cache_misses_total",
       kCounter,
       {},
       "Samples looked up in a sample cache (here or on a worker) and not found there."},
      {"cache_ram_bytes",
       [](const S& s) -> StatValue { return s.cache_ram_bytes; },
       "prepflow_client_cache_bytes",
       kGauge,
       {{"tier", "ram"}},
       "Bytes of sample values this process's cache holds, by tier."},
      {"cache_disk_bytes",
       [](const S& s) -> StatValue { return s.cache_disk_bytes; },
       "prepflow_client_cache_bytes",
       kGauge,
       {{"tier", "disk"}},
       "Bytes of sample values this process's cache holds, by tier."},
      {"echo_factor",
       [](const S& s) -> StatValue { return static_cast<int64_t>(s.echo_factor); },
       "prepflow_client_echo_factor",
       kGauge,
       {},
       "Copies each loaded sample yields in the latest epoch begun (--echo, or the planner's "
       "with --echo auto; 1: no echoing)."},
      {"echo_factor_per_epoch", [](const S& s) -> StatValue { return s.echo_factor_per_epoch; }},
      {"epoch_seconds", [](const S& s) -> StatValue { return s.epoch_seconds; }},
      {"mix_samples", [](const S& s) -> StatValue { return s.mix_samples; }},
      {"echo_at", [](const S& s) -> StatValue { return static_cast<int64_t>(s.echo_at); }},
      {"fresh_samples",
       [](const S& s) -> StatValue { return s.fresh_samples; },
       "prepflow_client_fresh_samples_total",
       kCounter,
       {},
       "Delivered samples that were a sample's first copy of the epoch."},
      {"echoed_samples",
       [](const S& s) -> StatValue { return s.echoed_samples; },
       "prepflow_client_echoed_samples_total",
       kCounter,
       {},
       "Delivered samples that were a later copy of a sample already loaded (--echo)."},
      {"cache_evictions",
       [](const S& s) -> StatValue { return s.cache_evictions; },
       "prepflow_client_cache_evictions_total",
       kCounter,
       {},
       "Values this process's cache dropped to make room for higher-ranked ones."},
  };
}

// What the plan in force predicts, and how every plan's prediction held.
std::vector<StatField<S>>* PredictionFields() {
  return new std::vector<StatField<S>>{
      {"plan_predicted_images_per_s",
       [](const S& s) -> StatValue { return s.plan_throughput; },
       "prepflow_client_plan_predicted_samples_per_second",
       kGauge,
       {},
       "Throughput the current plan predicts (--offload auto)."},
      {"plan_delivered_images_per_s",
       [](const S& s) -> StatValue { return s.plan_delivered; },
       "prepflow_client_plan_delivered_samples_per_second",
       kGauge,
       {},
       "Samples/s the placement in force delivered since it settled, once it ran a re-planning "
       "period (before that, the placement before it; --offload auto; 0: none yet)."},
      {"plan_prediction_error",
       [](const S& s) -> StatValue { return s.plan_prediction_error; },
       "prepflow_client_plan_prediction_error_ratio",
       kGauge,
       {},
       "Each placement's delivery against its prediction while it ran, |delivered - "
       "predicted| / predicted weighted by time, over the spans the trainer waited for data "
       "(--offload auto)."},
      {"plan_prediction_seconds",
       [](const S& s) -> StatValue { return s.plan_prediction_seconds; },
       "prepflow_client_plan_prediction_seconds",
       kGauge,
       {},
       "Seconds of delivery plan_prediction_error judges (--offload auto)."},
  };
}

// Where samples run: the mode, the plan in force and what it was made from.
std::vector<StatField<S>>* PlanFields() {
  return new std::vector<StatField<S>>{
      {"offload", [](const S& s) -> StatValue { return s.offload; }},
      {"plan", [](const S& s) -> StatValue { return s.plan; }},
      {"plan_reason", [](const S& s) -> StatValue { return s.plan_reason; }},
      {"plan_changes",
       [](const S& s) -> StatValue { return s.plan_changes; },
       "prepflow_client_plan_changes_total",
       kCounter,
       {},
       "Plans applied by --offload auto."},
      {"plan_backoffs",
       [](const S& s) -> StatValue { return s.plan_backoffs; },
       "prepflow_client_plan_backoffs_total",
       kCounter,
       {},
       "Plans --offload auto gave up for all local: they delivered less than all local did."},
      {"plan_fractions",
       [](const S& s) -> StatValue { return s.plan_fractions; },
       "prepflow_client_plan_fraction",
       kGauge,
       {},
       "Share of samples the current placement sends each way: local, or remote with cut K."},
      {"remote_fraction",
       [](const S& s) -> StatValue { return RemoteFraction(s); },
       "prepflow_client_remote_fraction",
       kGauge,
       {},
       "Share of samples with any stage on a worker."},
      {"cut",
       [](const S& s) -> StatValue { return MainCut(s); },
       "prepflow_client_cut",
       kGauge,
       {},
       "The cut most remote samples take (0: all local)."},
      {"ingest_limit",
       [](const S& s) -> StatValue { return s.ingest_limit; },
       "prepflow_client_ingest_limit_bytes_per_second",
       kGauge,
       {},
       "Bytes/s the workers' links were measured to bind at (--offload auto; 0: none seen)."},
      {"receive_cpu_per_byte",
       [](const S& s) -> StatValue { return s.receive_cpu_per_byte; },
       "prepflow_client_receive_cpu_seconds_per_byte",
       kGauge,
       {},
       "CPU seconds this process spends per byte received from workers (--offload auto)."},
      {"unseen_cpu_per_sample",
       [](const S& s) -> StatValue { return s.unseen_cpu_per_sample; },
       "prepflow_client_unseen_cpu_seconds_per_sample",
       kGauge,
       {},
       "CPU seconds per delivered sample this process spends outside every measured stage "
       "(the consumer's own loop, batching, gRPC threads), charged by the planner to every "
       "sample (--offload auto)."},
      {"worker_send_cpu_per_byte",
       [](const S& s) -> StatValue { return s.worker_send_cpu_per_byte; },
       "prepflow_client_worker_send_cpu_seconds_per_byte",
       kGauge,
       {},
       "CPU seconds the workers spend per byte they send, outside their samples' stage costs, "
       "as they measure it (--offload auto; 0: not yet reported)."},
  };
}

// The workers and the scheduler.
std::vector<StatField<S>>* PoolFields() {
  return new std::vector<StatField<S>>{
      {"local_cores",
       [](const S& s) -> StatValue { return s.local_cores; },
       "prepflow_client_local_cores",
       kGauge,
       {},
       "CPU cores this rank plans with: its share of the machine's (the ranks on one machine, "
       "LOCAL_WORLD_SIZE or --local-ranks, split its cores)."},
      {"workers_alive",
       [](const S& s) -> StatValue { return int64_t{s.workers_alive}; },
       "prepflow_client_workers",
       kGauge,
       {{"state", "alive"}},
       "Workers of this job."},
      {"workers_total",
       [](const S& s) -> StatValue { return int64_t{s.workers_total}; },
       "prepflow_client_workers",
       kGauge,
       {{"state", "configured"}},
       "Workers of this job."},
      {"scheduler", [](const S& s) -> StatValue { return s.scheduler; }},
      {"scheduler_reachable",
       [](const S& s) -> StatValue { return s.scheduler_reachable; },
       "prepflow_client_scheduler_up",
       kGauge,
       {{"scheduler", "$scheduler"}},
       "1 when the last heartbeat to the scheduler got through, else 0.",
       true},
      {"wanted_cores",
       [](const S& s) -> StatValue { return s.wanted_cores; },
       "prepflow_client_remote_cores",
       kGauge,
       {{"kind", "wanted"}},
       "Worker cores: what this rank asked the scheduler for, its part of the job's fair share, "
       "the training job's share (all its ranks'), and what it holds now.",
       true},
      {"fair_share_cores",
       [](const S& s) -> StatValue { return s.fair_share_cores; },
       "prepflow_client_remote_cores",
       kGauge,
       {{"kind", "fair_share"}},
       "",
       true},
      {"job_fair_share_cores",
       [](const S& s) -> StatValue { return s.job_fair_share_cores; },
       "prepflow_client_remote_cores",
       kGauge,
       {{"kind", "job_fair_share"}},
       "",
       true},
      {"grant_cost_per_hour",
       [](const S& s) -> StatValue { return s.grant_cost_per_hour; },
       "prepflow_client_grant_cost_per_hour",
       kGauge,
       {},
       "What this rank's scheduler grant costs an hour: granted cores times their workers' "
       "--cost-per-core-hour.",
       true},
      {"grant_cost",
       [](const S& s) -> StatValue { return s.grant_cost; },
       "prepflow_client_grant_cost",
       kGauge,
       {},
       "What this rank's grants have cost so far (each grant's cost an hour over the time it "
       "held).",
       true},
      {"granted_cores",
       [](const S& s) -> StatValue { return s.granted_cores; },
       "prepflow_client_remote_cores",
       kGauge,
       {{"kind", "granted"}},
       "",
       true},
  };
}

}  // namespace

const std::vector<StatField<S>>& LoaderStatFields() {
  static const auto* fields = [] {
    std::vector<StatField<S>>* all = DeliveryFields();
    for (std::vector<StatField<S>>* part : {RecoveryFields(), StorageFields(), CacheFields(),
                                            PlanFields(), PredictionFields(), PoolFields()}) {
      all->insert(all->end(), part->begin(), part->end());
      delete part;
    }
    return all;
  }();
  return *fields;
}

const std::vector<StatField<W>>& WorkerStatFields() {
  constexpr auto kC = StatField<W>::kCounter;
  constexpr auto kG = StatField<W>::kGauge;
  static const auto* fields = new std::vector<StatField<W>>{
      {"address", [](const W& w) -> StatValue { return w.address; }},  // the `worker` label
      {"alive",
       [](const W& w) -> StatValue { return w.alive; },
       "prepflow_client_worker_up",
       kG,
       {},
       "1 while this job streams from the worker, else 0."},
      {"granted_cores",
       [](const W& w) -> StatValue { return w.granted_cores; },
       "prepflow_client_worker_granted_cores",
       kG,
       {},
       "Cores of each worker the scheduler granted this job (0: a static worker)."},
      {"streams",
       [](const W& w) -> StatValue { return int64_t{w.streams}; },
       "prepflow_client_worker_streams_total",
       kC,
       {},
       "Streams opened to each worker (more than 1: re-granted or re-dialled)."},
      {"samples",
       [](const W& w) -> StatValue { return w.samples; },
       "prepflow_client_worker_samples_total",
       kC,
       {},
       "Samples each worker returned."},
      {"received_bytes",
       [](const W& w) -> StatValue { return w.received_bytes; },
       "prepflow_client_worker_received_bytes_total",
       kC,
       {},
       "Bytes received from each worker."},
      {"link_limit",
       [](const W& w) -> StatValue { return w.link_limit; },
       "prepflow_client_worker_link_limit_bytes_per_second",
       kG,
       {},
       "Bytes/s each worker's link was seen to bind at (--offload auto; 0: not seen)."},
      {"ingest_rate",
       [](const W& w) -> StatValue { return w.ingest_rate; },
       "prepflow_client_worker_ingest_bytes_per_second",
       kG,
       {},
       "Bytes/s received from each worker over the last window (--offload auto)."},
      {"link_probe",
       [](const W& w) -> StatValue { return w.link_probe; },
       "prepflow_client_worker_link_probe_bytes_per_second",
       kG,
       {},
       "Bytes/s each worker's link probe came at as its stream opened (--offload auto; 0: "
       "none)."},
  };
  return *fields;
}

const std::vector<StatField<StageStats>>& StageStatFields() {
  using T = StageStats;
  static const auto* fields = new std::vector<StatField<T>>{
      {"name", [](const T& t) -> StatValue { return t.name; }},  // the `stage` label
      {"samples", [](const T& t) -> StatValue { return t.samples; }},
      {"cpu_seconds",
       [](const T& t) -> StatValue { return t.cpu_seconds; },
       "prepflow_client_stage_cpu_seconds_total",
       StatField<T>::kCounter,
       {},
       "CPU seconds spent in each stage, here or on workers."},
      {"cpu_ms_per_sample",
       [](const T& t) -> StatValue { return t.cpu_seconds_per_sample() * 1e3; }},
      {"bytes_per_sample", [](const T& t) -> StatValue { return t.bytes_per_sample(); }},
  };
  return *fields;
}

const std::vector<StatField<SampleError>>& ErrorStatFields() {
  using E = SampleError;
  static const auto* fields = new std::vector<StatField<E>>{
      {"index", [](const E& e) -> StatValue { return e.index; }},
      {"path", [](const E& e) -> StatValue { return e.path; }},
      {"error", [](const E& e) -> StatValue { return e.status.ToString(); }},
  };
  return *fields;
}

}  // namespace prepflow
