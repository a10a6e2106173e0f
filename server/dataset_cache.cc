#include "server/dataset_cache.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/text.h"
#include "pipeline/core/profiler.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

absl::Status Mismatch(const proto::DatasetSpec& spec, const Dataset& dataset, uint64_t fingerprint,
                      int64_t size) {
  return absl::FailedPreconditionError(
      absl::StrCat(SafeText(spec.path()), " differs here: the worker indexes ", dataset.size(),
                   " samples (fingerprint ", dataset.fingerprint(), "), the client ", size, " (",
                   fingerprint, ")"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Dataset>> DatasetCache::Get(const proto::DatasetSpec& spec,
                                                                 uint64_t fingerprint,
                                                                 int64_t size) {
  std::string key = absl::StrCat(spec.path(), "\n", static_cast<int>(spec.format()), "\n",
                                 spec.clips_per_video());
  for (const proto::MixSource& source : spec.mix()) {  // a mixture: its sources, in order
    absl::StrAppend(&key, "\nmix:", source.path());
  }
  for (const std::string& field : spec.require_fields()) absl::StrAppend(&key, "\nrequire:", field);
  if (std::optional<absl::StatusOr<std::shared_ptr<const Dataset>>> found =
          Lookup(key, spec, fingerprint, size)) {
    return *std::move(found);
  }
  proto::DatasetSpec opened_spec = spec;
  opened_spec.set_max_file_bytes(options_.max_file_bytes);
  // This thread indexes; opens of the same dataset wait in Lookup, so the
  // entry is settled whatever happens here: an exception that escaped the
  // indexing would leave it marked as indexing, and every later open of the
  // dataset waiting for good.
  absl::StatusOr<std::unique_ptr<Dataset>> opened;
  try {
    opened = options_.open ? options_.open(opened_spec, options_.dataset)
                           : OpenDataset(opened_spec, options_.dataset);
  } catch (const std::exception& e) {
    opened = absl::InternalError(
        absl::StrCat("indexing ", SafeText(spec.path()), " failed: ", SafeText(e.what())));
  }
  if (opened.ok()) {
    for (const std::string& w : (*opened)->index_warnings()) {
      spdlog::warn("dataset {}: {}", SafeText(spec.path()), SafeText(w));
    }
    spdlog::info("indexed {}: {} samples, fingerprint {}", SafeText(spec.path()), (*opened)->size(),
                 (*opened)->fingerprint());
  }

  absl::MutexLock lock(&mu_);
  Entry& e = entries_[key];
  e.indexing = false;
  e.used_nanos = WallNanos();
  e.tried_fingerprints.insert(fingerprint);
  absl::StatusOr<std::shared_ptr<const Dataset>> result;
  if (!opened.ok()) {
    e.dataset = nullptr;
    e.error = opened.status();
    result = e.error;
  } else {
    e.dataset = *std::move(opened);
    e.error = absl::OkStatus();
    if (e.dataset->fingerprint() == fingerprint && e.dataset->size() == size) {
      result = e.dataset;
    } else {
      result = Mismatch(spec, *e.dataset, fingerprint, size);
    }
  }
  changed_.SignalAll();
  EvictIfFull();  // never this entry: it was used last
  return result;
}

std::optional<absl::StatusOr<std::shared_ptr<const Dataset>>> DatasetCache::Lookup(
    const std::string& key, const proto::DatasetSpec& spec, uint64_t fingerprint, int64_t size) {
  const auto interval = static_cast<int64_t>(options_.min_reindex_seconds * 1e9);
  absl::MutexLock lock(&mu_);
  while (true) {
    // Looked up anew on each pass: entries may come and go while we wait.
    Entry& e = entries_[key];
    const int64_t now = WallNanos();
    e.used_nanos = now;
    if (e.dataset != nullptr && e.dataset->fingerprint() == fingerprint &&
        e.dataset->size() == size) {
      return e.dataset;
    }
    if (e.indexing) {
      changed_.Wait(&mu_);
      continue;
    }
    const bool fresh = e.indexed_nanos >= 0 && now - e.indexed_nanos < interval;
    if (fresh && !e.error.ok()) return e.error;
    if (fresh && e.tried_fingerprints.count(fingerprint) != 0) {
      return Mismatch(spec, *e.dataset, fingerprint, size);
    }
    if (fresh) {
      // Indexed a moment ago with another result: files may have been added
      // since. Index again, but not before the interval is up.
      changed_.WaitWithTimeout(&mu_, absl::Nanoseconds(e.indexed_nanos + interval - now));
      continue;
    }
    e.indexing = true;
    e.indexed_nanos = now;
    e.tried_fingerprints.clear();
    ++indexings_;
    return std::nullopt;
  }
}

void DatasetCache::EvictIfFull() {
  while (entries_.size() > options_.max_entries) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.indexing) continue;
      if (oldest == entries_.end() || it->second.used_nanos < oldest->second.used_nanos) {
        oldest = it;
      }
    }
    if (oldest == entries_.end()) return;
    entries_.erase(oldest);  // jobs that opened it keep their own reference
  }
}

int64_t DatasetCache::indexings() const {
  absl::MutexLock lock(&mu_);
  return indexings_;
}

}  // namespace prepflow
