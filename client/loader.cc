#include "client/loader.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/datasets.h"
#include "client/remote/remote_pool.h"
#include "client/remote/remote_worker.h"
#include "client/remote/scheduler_grants.h"
#include "client/sample_runner.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/rng.h"
#include "pipeline/ops/batch_ops.h"
#include "pipeline/reuse/materialize.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// The random stream that places samples (local or remote): not a pipeline
// stage, so placement never disturbs augmentation.
constexpr uint32_t kPlacementStream = kMaxStages - 1;

// A sample that storage did not answer for, its retries and outage wait
// spent (storage/http.h): what says nothing of the sample's own bytes.
// Where each batch of `n` samples in batches of `b` starts, with the end
// last; a short last batch is left out with `drop_last`.
std::vector<int64_t> FixedBounds(size_t n, int64_t b, bool drop_last) {
  std::vector<int64_t> bounds;
  const auto total = static_cast<int64_t>(n);
  for (int64_t start = 0; start < total; start += b) {
    if (drop_last && start + b > total) break;
    bounds.push_back(start);
  }
  bounds.push_back(bounds.empty() ? 0 : std::min(bounds.back() + b, total));
  return bounds;
}

bool IsOutage(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

int Loader::prefetch_batches() const {
  absl::MutexLock lock(&mu_);
  return prefetch_;
}

int64_t Loader::BatchesInEpoch(int64_t epoch) const {
  if (!seconds_.empty()) {  // each epoch's plan made once (len() may be asked every step)
    absl::MutexLock lock(&counts_mu_);
    if (batches_by_epoch_.size() >= 16) batches_by_epoch_.erase(batches_by_epoch_.begin());
    auto [it, added] = batches_by_epoch_.emplace(epoch, 0);
    if (added) {
      std::vector<int64_t> order, bounds;
      PlanByLength(epoch, &order, &bounds);
      it->second = static_cast<int64_t>(bounds.size()) - 1;
    }
    return it->second;
  }
  return FixedBatches(samples_per_epoch());
}

int64_t Loader::FixedBatches(int64_t samples) const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples / b : (samples + b - 1) / b;
}

void Loader::PlanByLength(int64_t epoch, std::vector<int64_t>* order,
                          std::vector<int64_t>* bounds) const {
  // Batches are cut from every rank's samples, then dealt, so that ranks
  // run as many batches as rank_split says.
  const auto e = static_cast<uint64_t>(epoch);
  const LengthBatching by{options_.max_batch_seconds, options_.batch_size, options_.bucket_window};
  const std::vector<std::vector<int64_t>> batches = RankBatches(
      BatchByLength(EpochOrder(dataset_->size(), options_.seed, e, options_.shuffle, 0, 1),
                    seconds_, by, options_.seed, e, options_.shuffle),
      options_.rank, options_.world_size, options_.rank_split);
  order->clear();
  bounds->assign(1, 0);
  for (const std::vector<int64_t>& b : batches) {
    order->insert(order->end(), b.begin(), b.end());
    bounds->push_back(static_cast<int64_t>(order->size()));
  }
}

std::optional<double> Loader::WantedRemoteCores() const {
  if (offload_.kind == OffloadMode::kOff) return 0;
  std::optional<double> want;
  if (options_.max_remote_cores > 0) want = options_.max_remote_cores;
  // kAuto: what the planner would use with the pool to itself.
  if (replanner_ && offload_.kind == OffloadMode::kAuto) {
    if (std::optional<double> planned = replanner_->WantedRemoteCores()) {
      want = std::min(want.value_or(*planned), *planned);
    }
  }
  return want;
}

int Loader::threads() const { return runner_->threads(); }

double Loader::LocalCores() const {
  // Ranks on this machine share its CPUs: the planner's L adds up to them.
  return std::min<double>(runner_->threads(), EffectiveCpus() / std::max(1, options_.local_ranks));
}

int Loader::ItemSamples(int cut, int64_t item_bytes_limit) const {
  // As many as fit the smallest item the workers take, from the bound on one
  // sample at this cut (the worker admits items against its memory budget).
  const int64_t fit = item_bytes_limit / std::max<int64_t>(1, runner_->max_sample_bytes(cut));
  return static_cast<int>(std::clamp<int64_t>(fit, 1, options_.item_samples));
}

void Loader::UpdatePrefetch() {
  if (!remote_) return;
  const int64_t batch = options_.batch_size;
  // The workers' items in flight, and the local threads working ahead of
  // them.
  const int64_t remote_samples =
      static_cast<int64_t>(remote_->UsableCredits()) * options_.item_samples;
  int64_t want = 2 + remote_samples / batch;
  // Batches come out in order, so a split waits at each moment on its slower
  // side: batches ahead absorb a side's pause (a worker's round trip, a
  // throttled CPU quota's slice) that would otherwise idle the other side.
  // On the testbed (scripts/bench_prefetch.sh: trainer and workers both
  // bound) 3 batches left the trainer 7.5% idle; 0.5 s of delivery, 2.6%,
  // and delivered 7% more.
  // They are held to kPrefetchSecondsBytes of batches as delivered so far:
  // half a second of large samples (video clips) must not take gigabytes.
  const int64_t now = WallNanos();
  if (options_.prefetch_seconds > 0 && batches_ > 0 && now > start_nanos_) {
    const double rate = static_cast<double>(images_) / ((now - start_nanos_) * 1e-9);
    const double batch_bytes = std::max(1.0, static_cast<double>(bytes_) / batches_);
    const double cover = std::min(std::ceil(rate * options_.prefetch_seconds / batch),
                                  std::floor(kPrefetchSecondsBytes / batch_bytes));
    want = std::max(want, static_cast<int64_t>(cover));
  }
  const int64_t room = static_cast<int64_t>(runner_->queue_capacity()) / (2 * batch);
  prefetch_ = static_cast<int>(std::max<int64_t>(prefetch_, std::min(room, want)));
}

int Loader::PlacementOf(uint64_t epoch, int64_t index) const {
  if (placement_.all_local()) return -1;  // no draw needed
  SampleRng rng(options_.seed, epoch, static_cast<uint64_t>(index), kPlacementStream);
  return placement_.Draw(rng.Uniform());
}

void Loader::StartWarmUp() {
  std::vector<int64_t> fixed_bytes = {-1};
  for (int k = 1; k <= pipeline_->num_stages(); ++k) {
    const ValueType& t = pipeline_->boundary_type(k);
    fixed_bytes.push_back(t.fixed() ? static_cast<int64_t>(t.bytes()) : -1);
  }
  const std::optional<policy::Placement> warm =
      replanner_->StartWarmUp(fixed_bytes, LocalCores(), remote_->UsableCores());
  if (!warm) return;
  placement_ = *warm;
  spdlog::info("--offload auto: {}", replanner_->State().reason);
}

void Loader::MaybeReplan(int64_t waiting_since) {
  if (!replanner_ || (images_ == 0 && waiting_since == 0)) return;
  policy::Snapshot s;
  if (remote_) remote_->FillSnapshot(&s);
  // --echo auto plans without workers too: for its echo factor.
  if (s.workers.empty() && !options_.echo_auto) return;
  s.now_nanos = WallNanos();
  s.process_cpu_nanos = ProcessCpuNanos();
  s.local_cores = LocalCores();
  runner_->Measure(&s);
  s.trainer_work = {trainer_cpu_nanos_ * 1e-9, 0, static_cast<double>(images_)};
  s.delivered_samples = static_cast<double>(images_);
  s.reuse_at = delivered_echo_ > 1 ? std::max(echo_at_, cache_at_) : cache_at_;
  s.cache_hits = static_cast<double>(runner_->remote_cache_hits() + (cache_ ? cache_->hits() : 0));
  s.cache_misses =
      static_cast<double>(runner_->remote_cache_misses() + (cache_ ? cache_->misses() : 0));
  s.echo = delivered_echo_;
  // The wait under way is not busy time either.
  const int64_t waiting = waiting_since > 0 ? s.now_nanos - waiting_since : 0;
  s.busy_seconds = (s.now_nanos - start_nanos_ - wait_nanos_ - waiting) * 1e-9;
  std::vector<std::string> notes;
  std::optional<policy::Placement> next = replanner_->Update(s, &notes);
  // Without --offload auto the plans only inform --echo auto: not news.
  const auto level =
      offload_.kind == OffloadMode::kAuto ? spdlog::level::info : spdlog::level::debug;
  for (const std::string& note : notes) spdlog::log(level, "{}", note);
  if (remote_ && replanner_->StorageBoundWorkers()) remote_->StopStealing();
  if (!next || offload_.kind != OffloadMode::kAuto) return;
  const double before = placement_.remote_share();
  placement_ = *std::move(next);
  planned_ = true;
  // Items the old plan placed that still wait for a credit would hold the
  // trainer's batches behind the workers (a warm-up behind a tight link).
  if (remote_ && placement_.remote_share() < before) {
    const int64_t reclaimed = remote_->ReclaimQueued();
    if (reclaimed > 0) {
      spdlog::info("{} items waiting for a worker run here instead (the plan sends fewer out)",
                   reclaimed);
    }
  }
}

bool Loader::StillLoading(absl::Span<const int64_t> indices) {
  if (cache_ == nullptr && (remote_ == nullptr || !remote_->AnyWorkerCaches())) return false;
  // A bit a sample, only once a cache is in use (a worker's may come
  // mid-run: samples that ran before count as first runs, which only waits).
  if (finished_once_.empty()) finished_once_.assign(static_cast<size_t>(dataset_->size()), false);
  // A cache's content settles on a sample's first load (its priority is
  // fixed), so only a first load in flight can be missed again: a later
  // run of a sample that is not kept reads it anyway.
  std::vector<int64_t> first;
  for (const int64_t index : indices) {
    if (index < 0 || static_cast<size_t>(index) >= finished_once_.size() ||
        !finished_once_[index]) {
      first.push_back(index);
    }
  }
  return !first.empty() &&
         LoadingInEarlierEpoch(in_flight_, static_cast<uint64_t>(next_epoch_), first);
}

void Loader::NoteFinished(const Batch& batch) {
  if (finished_once_.empty()) return;  // no cache in use yet
  for (const int64_t index : batch.indices()) {
    if (index >= 0 && static_cast<size_t>(index) < finished_once_.size()) {
      finished_once_[index] = true;
    }
  }
}

Batch* Loader::StartBatch() {
  while (next_epoch_ < options_.first_epoch + options_.epochs) {
    if (!order_ready_) {
      order_copies_.clear();
      if (!seconds_.empty()) {
        PlanByLength(next_epoch_, &order_, &bounds_);
      } else if (!mix_.sizes.empty()) {
        order_ = MixOrder(mix_, options_.seed, static_cast<uint64_t>(next_epoch_), options_.shuffle,
                          &order_copies_);
        DealToRank(&order_, &order_copies_, options_.rank, options_.world_size,
                   options_.rank_split);
      } else {
        order_ =
            EpochOrder(dataset_->size(), options_.seed, static_cast<uint64_t>(next_epoch_),
                       options_.shuffle, options_.rank, options_.world_size, options_.rank_split);
      }
      const int echo =
          epoch_echo_.count(next_epoch_) ? epoch_echo_[next_epoch_] : ChooseEpochEcho(next_epoch_);
      echo_now_ = echo;
      if (echo > 1) {
        EchoOrder(&order_, &order_copies_, echo, options_.echo_window, options_.seed,
                  static_cast<uint64_t>(next_epoch_));
      }
      // Batches of batch_size (the last one short, or dropped); by length,
      // the plan's own.
      if (seconds_.empty())
        bounds_ = FixedBounds(order_.size(), options_.batch_size, options_.drop_last);
      order_ready_ = true;
      // A resumed run starts its first epoch past the batches already seen
      // (and the samples the last of them took from the next one).
      next_number_ = next_epoch_ == options_.first_epoch ? options_.skip_batches : 0;
      // (A packed run resumes at a document: batch 0 and a position.)
      if (next_epoch_ == options_.first_epoch && options_.skip_samples > 0) {
        ResumeAt(options_.skip_samples);
      }
    }
    if (next_number_ + 1 >= static_cast<int64_t>(bounds_.size())) {
      ++next_epoch_;
      order_ready_ = false;
      continue;
    }
    const int64_t offset = bounds_[next_number_];
    const int64_t take = bounds_[next_number_ + 1] - offset;
    // With sample caches, a sample must not start while its first run (in
    // the last epoch) may still be loading: it would miss the cache and read
    // storage again. Such a batch waits for those samples alone, not for
    // the whole pipeline to drain as every epoch did.
    if (StillLoading(absl::MakeConstSpan(order_.data() + offset, static_cast<size_t>(take)))) {
      return nullptr;
    }
    std::unique_ptr<Batch> batch;
    {
      absl::MutexLock lock(&free_batches_->mu);
      if (!free_batches_->free.empty()) {
        batch = std::move(free_batches_->free.back());
        free_batches_->free.pop_back();
      }
    }
    // Only when the trainer keeps more batches than it hands back.
    if (!batch) {
      batch = std::make_unique<Batch>(pipeline_->OutputFields(), options_.batch_size,
                                      options_.batch_allocator);
    }
    batch->Reset(static_cast<uint64_t>(next_epoch_), next_number_,
                 absl::MakeConstSpan(order_.data() + offset, static_cast<size_t>(take)),
                 order_copies_.empty() ? absl::Span<const uint32_t>()
                                       : absl::MakeConstSpan(order_copies_.data() + offset,
                                                             static_cast<size_t>(take)),
                 echo_now_, offset);
    ++next_number_;
    return batch.release();
  }
  return nullptr;
}

int Loader::Oversize(int cut, int64_t limit) {
  if (oversize_warned_.insert(cut).second) {
    spdlog::warn(
        "cut {}: one sample may be up to {} bytes there, more than a worker's item may hold ({}); "
        "samples placed at it run here (lower --max-file-bytes, --max-audio-seconds or "
        "--max-pixels to let them go)",
        cut, runner_->max_sample_bytes(cut), limit);
  }
  return -1;
}

void Loader::Place(Batch* b) {
  // Remote samples go out in items of one cut each.
  const int64_t limit = remote_ ? remote_->item_bytes_limit() : kMaxReplyBytes;
  // Workers without a custom op's plugin run up to it; results are the same
  // at every cut.
  const int stage_limit = remote_ ? remote_->StageLimit() : 0;
  const int start = Materialized() != nullptr ? Materialized()->upto() : 0;
  // Remote items by (cut, home worker): with caching workers each sample
  // goes to the one whose cache holds it (RemotePool::HomeOf).
  std::map<std::pair<int, int>, RemoteItem> open_items;
  std::vector<int64_t> local_slots, local_indices;
  for (int64_t slot = 0; slot < b->size(); ++slot) {
    const int64_t index = b->index_at(slot);
    int cut = PlacementOf(b->epoch(), index);
    if (cut > stage_limit) cut = stage_limit;
    // Materialized data starts at its boundary: no cut comes before it.
    if (cut >= 0 && cut < start) cut = stage_limit >= start ? start : -1;
    if (cut >= 0 && runner_->max_sample_bytes(cut) > limit) cut = Oversize(cut, limit);
    if (cut < 0) {
      local_slots.push_back(slot);
      local_indices.push_back(index);
      continue;
    }
    const int home = remote_->HomeOf(index, cut);
    const RemoteItem fresh{b, {}, cut, home};
    RemoteItem& item = open_items.try_emplace({cut, home}, fresh).first->second;
    item.slots.push_back(slot);
    if (static_cast<int>(item.slots.size()) == ItemSamples(cut, limit)) {
      remote_->Submit(std::exchange(item, fresh));
    }
  }
  for (auto& [key, item] : open_items) {
    if (!item.slots.empty()) remote_->Submit(std::move(item));
  }
  // Remote data: the batch's reads start now, many at once, ahead of the
  // threads that decode.
  PrefetchLocal(b->epoch(), local_indices);
  for (const int64_t slot : local_slots) runner_->RunLocal(b, slot);
}

void Loader::TopUp() {
  UpdatePrefetch();
  while (static_cast<int>(in_flight_.size()) < prefetch_) {
    Batch* b = StartBatch();
    if (b == nullptr) return;
    in_flight_.push_back(b);
    Place(b);
  }
}

void Loader::SignalBatchDone() {
  absl::MutexLock lock(&mu_);
  batch_done_.SignalAll();
}

void Loader::OnRefusal(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
    batch_done_.SignalAll();
  }
  if (grants_) grants_->Finish();
}

void Loader::EndRun() {
  if (end_nanos_ != 0) return;
  end_nanos_ = WallNanos();
  end_cpu_nanos_ = ProcessCpuNanos();
  if (replanner_ && replanner_->State().changes > 0) {
    spdlog::info("--offload auto: {}", replanner_->LedgerSummary());
  }
  // Let the workers finish their streams cleanly; the scheduler learns at
  // once that this job wants nothing now.
  if (remote_) remote_->Finish();
  if (grants_) grants_->Finish();
}

absl::Status Loader::TakeErrors(Batch* batch) {
  for (SampleError& e : batch->Compact()) {
    ++errors_;
    if (IsOutage(e.status)) {
      // Storage that does not answer says nothing of the sample: skipping
      // it would drop good data for as long as the outage lasts.
      failure_ = absl::Status(
          e.status.code(),
          absl::StrCat(e.path, ": storage is unavailable (", e.status.message(),
                       "); an outage is not bad data, so the run stops whatever --on-error says "
                       "(--storage-outage-seconds sets how long one is waited out)"));
      spdlog::error("sample {}: {}", e.index, SafeText(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      return failure_;
    }
    if (options_.on_error == OnError::kFail) {
      failure_ = absl::Status(e.status.code(), absl::StrCat(e.path, ": ", e.status.message()));
      spdlog::error("sample {} failed, stopping (--on-error fail): {}", e.index,
                    SafeText(failure_.message()));
      if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
      return failure_;
    }
    // Every failed sample is counted and kept (first_errors); the log gets
    // the first few, then a line with the count at most every 10 s, so a
    // dataset of broken files cannot flood it epoch after epoch.
    if (const int64_t quiet = skip_log_.Admit(WallNanos()); quiet >= 0) {
      spdlog::warn("skipping sample {} ({}): {}{}", e.index, SafeText(e.path),
                   SafeText(e.status.ToString()),
                   quiet > 0 ? absl::StrCat(" (and ", quiet, " more not logged)") : "");
    }
    if (first_errors_.size() < 16) first_errors_.push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status Loader::FillFromNext(Batch* batch) {
  // Batches by length keep their plan (their seconds budget); the last
  // batch of an epoch has nothing after it.
  if (!seconds_.empty()) return absl::OkStatus();
  while (batch->size() < batch->capacity()) {
    if (in_flight_.empty()) TopUp();
    if (in_flight_.empty() || in_flight_.front()->epoch() != batch->epoch()) break;
    Batch* next = in_flight_.front();
    AwaitBatch(*next);
    if (!failure_.ok()) return failure_;
    NoteFinished(*next);
    if (absl::Status s = TakeErrors(next); !s.ok()) return s;
    // The epoch's last batch keeps one sample at least, so that the epoch
    // has as many batches as planned (ranks stay in step) unless more
    // samples failed than that leaves room for.
    const bool last = next->number() + 1 == FixedBatches(samples_per_rank_ * next->echo());
    const int64_t n = std::min(batch->capacity() - batch->size(), next->size() - (last ? 1 : 0));
    if (n > 0) {
      batch->TakeFront(next, n);
      filled_samples_ += n;
    }
    if (last || next->size() > 0) break;
    // Taken whole: the batch after it goes on filling this one.
    in_flight_.pop_front();
    absl::MutexLock free_lock(&free_batches_->mu);
    free_batches_->free.emplace_back(next);
  }
  return absl::OkStatus();
}

void Loader::ResumeAt(int64_t position) {
  // The batch of the plan that holds `position` starts there: the batches
  // before it were delivered, or taken whole into them.
  while (next_number_ + 2 < static_cast<int64_t>(bounds_.size()) &&
         bounds_[next_number_ + 1] <= position) {
    ++next_number_;
  }
  if (next_number_ + 1 < static_cast<int64_t>(bounds_.size())) {
    bounds_[next_number_] = std::clamp(position, bounds_[next_number_], bounds_[next_number_ + 1]);
  }
}

absl::StatusOr<BatchPtr> Loader::Next() {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  const int64_t now = WallNanos();
  if (start_nanos_ == 0) {
    start_nanos_ = now;
    start_cpu_nanos_ = ProcessCpuNanos();
  }
  TopUp();
  if (in_flight_.empty()) {
    EndRun();
    return BatchPtr();
  }
  Batch* batch = in_flight_.front();
  AwaitBatch(*batch);
  wait_nanos_ += WallNanos() - now;
  if (!failure_.ok()) return failure_;
  NoteFinished(*batch);
  in_flight_.pop_front();
  if (absl::Status s = TakeErrors(batch); !s.ok()) {
    delete batch;
    EndRun();
    return s;
  }
  if (absl::Status s = FillFromNext(batch); !s.ok()) {
    delete batch;
    EndRun();
    return s;
  }
  if (absl::Status s = batch->Pad(); !s.ok()) {
    delete batch;
    failure_ = absl::ResourceExhaustedError(
        absl::StrCat(s.message(),
                     "; batch by length (--max-batch-seconds), or lower --batch or "
                     "--max-audio-seconds"));
    EndRun();
    return failure_;
  }
  for (uint64_t h : batch->hashes()) checksum_.Add(h);
  if (batch_ops_ != nullptr) {
    const int64_t cpu = ThreadCpuNanos();
    if (absl::Status s = batch_ops_->Apply(options_.seed, batch); !s.ok()) {
      delete batch;
      failure_ = s;
      EndRun();
      return s;
    }
    // The planner counts it against this machine's CPU on every path.
    trainer_cpu_nanos_ += ThreadCpuNanos() - cpu;
  }
  images_ += batch->size();
  remote_images_ += batch->remote_samples();
  for (int64_t i = 0; !mix_offsets_.empty() && i < batch->size(); ++i) {
    const auto source =
        std::upper_bound(mix_offsets_.begin(), mix_offsets_.end(), batch->index_at(i)) -
        mix_offsets_.begin() - 1;
    ++mix_delivered_[static_cast<size_t>(source)];
  }
  if (batch->echo() > 1) {  // a mixture's repeats are copies too, not echoed ones
    for (uint32_t copy : batch->copies()) echoed_images_ += copy > 0 ? 1 : 0;
  }
  delivered_echo_ = batch->echo();
  bytes_ += batch->bytes();
  padding_bytes_ += batch->padding_bytes();
  if (batches_ > 0 && batch->epoch() != last_batch_epoch_) {
    epoch_end_nanos_.push_back(last_batch_nanos_);
  }
  last_batch_epoch_ = batch->epoch();
  last_batch_nanos_ = WallNanos();
  ++batches_;
  MaybeReplan();
  TopUp();  // keep the workers busy while the trainer consumes this batch

  std::shared_ptr<FreeBatches> free = free_batches_;
  return BatchPtr(batch, [free](const Batch* b) {
    absl::MutexLock lock(&free->mu);
    free->free.emplace_back(const_cast<Batch*>(b));
  });
}

void Loader::AwaitBatch(const Batch& batch) {
  // Every unfinished sample is a task of the runner's or an item the pool
  // owes. When neither holds anything for three checks a second apart and the
  // batch is still short, its samples were lost (a bug): the run stops saying
  // so, rather than waiting for ever.
  int idle_checks = 0;
  const int64_t since = WallNanos();
  int64_t checked = since;
  while (!batch.complete() && failure_.ok()) {
    // Until the first plan, with every worker's link probed, it is made
    // while waiting (every 0.1 s), as soon as the stages are measured: the
    // warm-up's first batches may wait on the workers' links for seconds.
    const bool early = replanner_ && offload_.kind == OffloadMode::kAuto && !planned_ && remote_ &&
                       remote_->Probed();
    const bool timed_out =
        batch_done_.WaitWithTimeout(&mu_, absl::Milliseconds(early ? 100 : 1000));
    if (early) MaybeReplan(since);
    const int64_t now = WallNanos();
    if (!timed_out || now - checked < 1'000'000'000) continue;
    checked = now;
    const bool held = runner_->pending_tasks() > 0 || (remote_ && remote_->owed_items() > 0);
    idle_checks = held || batch.complete() ? 0 : idle_checks + 1;
    if (idle_checks < 3) continue;
    failure_ = absl::InternalError(absl::StrCat(
        "lost ", batch.pending(), " samples of batch ", batch.number(), " of epoch ", batch.epoch(),
        ": no thread and no worker holds them (a bug in prepflow; please report it)"));
  }
}

void Loader::AddTrainerWork(double cpu_seconds) {
  if (!(cpu_seconds > 0) || !std::isfinite(cpu_seconds)) return;
  absl::MutexLock lock(&mu_);
  trainer_cpu_nanos_ += static_cast<int64_t>(cpu_seconds * 1e9);
}

double Loader::trainer_cpu_seconds() const {
  absl::MutexLock lock(&mu_);
  return trainer_cpu_nanos_ * 1e-9;
}

}  // namespace prepflow
