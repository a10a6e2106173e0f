// What a Loader reports (Loader::Stats, client/loader.h): its own counters,
// the runner's and the pool's, the caches' and storage's, and the workers'
// stage costs.
#include <algorithm>

#include "client/loader.h"
#include "client/remote/remote_pool.h"
#include "client/remote/scheduler_grants.h"
#include "client/sample_runner.h"

namespace prepflow {
namespace {

// What --offload auto's re-planner holds.
void AddPlanStats(const policy::ReplanState& plan, LoaderStats* st) {
  st->plan = plan.explanation;
  st->plan_reason = plan.reason;
  st->plan_changes = plan.changes;
  st->plan_backoffs = plan.backoffs;
  st->plan_throughput = plan.throughput;
  st->plan_delivered = plan.delivered;
  st->plan_prediction_error = plan.prediction_error;
  st->plan_prediction_seconds = plan.prediction_seconds;
  st->ingest_limit = plan.ingest_limit;
  st->receive_cpu_per_byte = plan.receive_cost_per_byte;
  st->unseen_cpu_per_sample = plan.unseen_cost_per_sample;
  st->worker_send_cpu_per_byte = plan.send_cost_per_byte;
  st->storage_limit_here = plan.storage_limit_here;
  st->storage_limit_workers = plan.storage_limit_workers;
  st->storage_limit_shared = plan.storage_limit_shared;
}

}  // namespace

std::vector<double> Loader::EpochSeconds() const {
  // Each epoch delivered in full: the last one once the run is over.
  std::vector<int64_t> ends = epoch_end_nanos_;
  if (end_nanos_ != 0 && batches_ > 0) ends.push_back(last_batch_nanos_);
  std::vector<double> seconds;
  int64_t from = start_nanos_;
  for (int64_t end : ends) {
    seconds.push_back((end - from) * 1e-9);
    from = end;
  }
  return seconds;
}

LoaderStats Loader::Stats() const {
  LoaderStats st;
  {
    absl::MutexLock lock(&mu_);
    st.images = images_;
    st.remote_images = remote_images_;
    st.local_images = images_ - remote_images_;
    st.echoed_samples = echoed_images_;
    st.mix_samples = mix_delivered_;
    st.fresh_samples = images_ - echoed_images_;
    st.errors = errors_;
    st.filled_samples = filled_samples_;
    st.batches = batches_;
    st.bytes = bytes_;
    st.padding_bytes = padding_bytes_;
    const int64_t end = end_nanos_ != 0 ? end_nanos_ : WallNanos();
    st.seconds = start_nanos_ != 0 ? (end - start_nanos_) * 1e-9 : 0;
    const int64_t end_cpu = end_cpu_nanos_ != 0 ? end_cpu_nanos_ : ProcessCpuNanos();
    st.cpu_seconds = start_nanos_ != 0 ? (end_cpu - start_cpu_nanos_) * 1e-9 : 0;
    st.wait_seconds = wait_nanos_ * 1e-9;
    st.first_errors = first_errors_;
    st.plan_fractions = placement_.Fractions();
    st.epoch_seconds = EpochSeconds();
    st.storage_bytes_read_per_epoch = StorageBytesPerEpoch();
    for (const auto& [epoch, echo] : epoch_echo_) {
      if (epoch < options_.first_epoch + options_.epochs) st.echo_factor_per_epoch.push_back(echo);
    }
  }
  st.offload = OffloadModeString(offload_);
  const policy::ReplanState plan = replanner_ ? replanner_->State() : policy::ReplanState();
  if (replanner_) AddPlanStats(plan, &st);
  if (remote_) AddRemoteStats(plan, &st);
  st.scheduler = options_.scheduler;
  st.local_cores = LocalCores();
  if (grants_) {
    const SchedulerGrants::State g = grants_->state();
    st.scheduler_reachable = g.reachable;
    st.wanted_cores = g.wanted_cores;
    st.fair_share_cores = g.fair_share_cores;
    st.job_fair_share_cores = g.job_fair_share_cores;
    st.grant_cost_per_hour = g.cost_per_hour;
    st.grant_cost = g.cost;
  }
  st.checksum = checksum_.value();
  st.stages = runner_->LocalStages();
  st.remote_stages = runner_->RemoteStages();
  if (dataset_->store() != nullptr) st.storage = dataset_->store()->stats();
  st.storage.Add(runner_->RemoteStorage());
  // Against the split that deals every sample once: the repeats this rank
  // takes (pad), and what no rank takes (drop).
  const int64_t n = epoch_samples_;
  const int64_t once = RankSamples(n, options_.rank, options_.world_size, RankSplit::kUneven);
  if (options_.rank_split == RankSplit::kPad)
    st.padded_samples_per_epoch = samples_per_rank_ - once;
  if (options_.rank_split == RankSplit::kDrop && options_.world_size > 1) {
    st.dropped_samples_per_epoch = n % options_.world_size;
  }
  st.cache_at = cache_at_;
  st.echo_factor = echo_now_;
  st.echo_at = echo_at_;
  st.cache_hits = runner_->remote_cache_hits();
  st.cache_misses = runner_->remote_cache_misses();
  if (cache_ != nullptr) {
    st.cache_hits += cache_->hits();
    st.cache_misses += cache_->misses();
    const SampleCache::Stats c = cache_->cache().stats();
    st.cache_ram_bytes = c.ram_bytes;
    st.cache_disk_bytes = c.disk_bytes;
    st.cache_evictions = c.evictions;
  }
  return st;
}

std::vector<int64_t> Loader::StorageBytesPerEpoch() const {
  const int begun =
      std::min(options_.epochs, next_epoch_ - options_.first_epoch + (order_ready_ ? 1 : 0));
  std::vector<int64_t> out(static_cast<size_t>(std::max(0, begun)), 0);
  for (const auto& [epoch, bytes] : runner_->StorageBytesByEpoch()) {
    const int64_t e = static_cast<int64_t>(epoch) - options_.first_epoch;
    if (e >= 0 && e < static_cast<int64_t>(out.size())) out[static_cast<size_t>(e)] = bytes;
  }
  return out;
}

void Loader::AddRemoteStats(const policy::ReplanState& plan, LoaderStats* st) const {
  const RemotePool::Counters c = remote_->counters();
  st->reissued_items = c.reissued_items;
  st->hedged_items = c.hedged_items;
  st->hedge_wins = c.hedge_wins;
  st->stolen_items = c.stolen_items;
  st->drained_workers = c.drained_workers;
  // One entry per address: a worker granted again after it was closed has
  // a second stream, and both count.
  std::map<std::string, size_t> by_address;
  for (const RemotePool::Member& m : remote_->Members()) {
    auto [it, fresh] = by_address.try_emplace(m.address, st->workers.size());
    if (fresh) st->workers.emplace_back().address = m.address;
    LoaderStats::WorkerStats& ws = st->workers[it->second];
    ws.alive = ws.alive || m.usable();
    ++ws.streams;
    if (m.usable() && !m.worker_id.empty()) ws.granted_cores = m.granted_cores;
    ws.received_bytes += m.received_bytes;
    ws.samples += m.samples;
    if (auto link = plan.links.find(m.id); link != plan.links.end()) {
      ws.link_limit = std::max(ws.link_limit, link->second.limit);
      if (m.alive) ws.ingest_rate = link->second.ingest_rate;
      ws.link_probe = std::max(ws.link_probe, link->second.probe);
    }
  }
  st->workers_total = static_cast<int>(st->workers.size());
  for (const LoaderStats::WorkerStats& ws : st->workers) {
    st->workers_alive += ws.alive ? 1 : 0;
    st->granted_cores += ws.granted_cores;
  }
}

}  // namespace prepflow
