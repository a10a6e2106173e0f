// Caches of samples' values at one deterministic stage boundary, kept across
// epochs (and across jobs that read the same dataset through the same
// pipeline prefix), so that each sample is read from storage and prepared up
// to that boundary once rather than every epoch.
//
// Tiers: RAM within `ram_bytes`, and optionally files under `dir` within
// `disk_bytes`. Entries on disk outlive the process: a later job (or worker)
// opening the same folder finds them, each checked against a hash of its
// bytes before it is used.
//
// Every entry carries the version of the source it was made from
// (Dataset::SourceVersion): a lookup with another version (the file was
// rewritten, the object replaced) drops the entry as stale and misses.
//
// Policy: stable priority. Every sample has a fixed priority, a hash of its
// key; the cache keeps the highest-priority samples that fit, RAM the
// highest of them and disk the next, and a sample gets in only by pushing out
// samples of lower priority. With a fresh random order every epoch, LRU (and
// FIFO) evict exactly what the coming epoch asks for once the dataset
// outgrows the cache, and rewrite the cache all the time; a fixed priority
// keeps one subset, settled by the end of the first epoch: every later epoch
// hits cache/dataset of its samples (the best any policy can do without
// knowing the order) and writes nothing more. With locality-aware dispatch
// each worker sees only its share of the samples and keeps the
// highest-priority ones among them.
//
// Thread-safety: every method may be called from any thread. File reads and
// writes run outside the cache's lock.
#ifndef PREPFLOW_PIPELINE_REUSE_SAMPLE_CACHE_H_
#define PREPFLOW_PIPELINE_REUSE_SAMPLE_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/options.h"
#include "pipeline/core/op.h"
#include "pipeline/core/sample.h"
#include "pipeline/data/dataset.h"

namespace prepflow {

struct SampleCacheOptions {
  int64_t ram_bytes = 0;  // 0: no RAM tier
  std::string dir;        // empty: no disk tier
  // With `dir`: 0 means half the free space of its file system at open.
  int64_t disk_bytes = 0;

  bool enabled() const { return ram_bytes > 0 || !dir.empty(); }
};

// cache_bytes, cache_dir, cache_disk_bytes (base/options.h): a process's
// cache, the same for prepflow and prepflow-worker.
const std::vector<OptionField<SampleCacheOptions>>& CacheOptionFields();

// A cached value: the values at one boundary of one pipeline prefix over one
// dataset share a `space` (CacheSpace); `index` is the sample's.
struct CacheKey {
  uint64_t space = 0;
  int64_t index = 0;

  bool operator==(const CacheKey& o) const { return space == o.space && index == o.index; }
  bool operator<(const CacheKey& o) const {
    return space != o.space ? space < o.space : index < o.index;
  }
  template <typename H>
  friend H AbslHashValue(H h, const CacheKey& k) {
    return H::combine(std::move(h), k.space, k.index);
  }
};

// Names the values at a boundary: a dataset's identity (Dataset::identity:
// its fingerprint and location) with the pipeline prefix's fingerprint
// (Pipeline::PrefixFingerprint).
uint64_t CacheSpace(uint64_t dataset_identity, uint64_t prefix_fingerprint);

class SampleCache {
 public:
  using Blob = std::shared_ptr<const std::string>;

  // Opens the tiers; with a folder, takes its lock and indexes the entries a
  // previous process left there. Errors name the flag: InvalidArgument
  // (a negative budget), FailedPrecondition (--cache-dir unusable, or in use
  // by another process).
  static absl::StatusOr<std::unique_ptr<SampleCache>> Open(const SampleCacheOptions& options);
  ~SampleCache();
  SampleCache(const SampleCache&) = delete;
  SampleCache& operator=(const SampleCache&) = delete;

  // The value kept for `key` made from `version` of its source, or null. An
  // entry of another version is dropped (counted in stale) and is a miss. A
  // disk entry is read and checked; one that fails the check is dropped
  // (counted in disk_errors) and is a miss. A disk hit that ranks into RAM
  // moves there.
  Blob Find(const CacheKey& key, uint64_t version);
  // Whether `key` is kept, without reading it or counting a hit.
  bool Holds(const CacheKey& key) const;
  // `indices` of `space` that are not kept (one lock for all of them).
  std::vector<int64_t> NotHeld(uint64_t space, absl::Span<const int64_t> indices) const;
  // Keeps `value`, made from `version` of its source, for `key` when its
  // priority earns it room (pushing out lower-priority entries, RAM's to
  // disk); otherwise, or when `key` is kept already, does nothing.
  void Insert(const CacheKey& key, uint64_t version, Blob value);
  // Whether Insert would keep a value of `size` bytes for `key` now (so a
  // caller can skip making one that would not be kept).
  bool Wants(const CacheKey& key, int64_t size) const;

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t insertions = 0;
    int64_t rejected = 0;   // not admitted: everything kept ranks higher
    int64_t evictions = 0;  // dropped from the cache (RAM entries moved to disk are not)
    int64_t ram_bytes = 0;
    int64_t ram_entries = 0;
    int64_t disk_bytes = 0;
    int64_t disk_entries = 0;
    int64_t disk_errors = 0;  // entries that failed their check, writes that failed
    int64_t stale = 0;        // entries dropped because their source changed
  };
  Stats stats() const;
  const SampleCacheOptions& options() const { return options_; }
  // Bytes both tiers may hold (the disk's as resolved at open).
  int64_t capacity() const { return capacity_[kRam] + capacity_[kDisk]; }

 private:
  enum Tier { kRam = 0, kDisk = 1 };
  struct Entry {
    Tier tier = kRam;
    uint64_t priority = 0;
    int64_t size = 0;
    // Of the source the value was made from; a disk entry a previous process
    // left is checked against its file's header when it is read.
    uint64_t version = 0;
    bool version_known = true;
    Blob blob;             // kRam
    uint64_t file_id = 0;  // kDisk: names its file
    bool writing = false;  // kDisk: its file is not complete yet
  };
  struct PendingWrite {
    CacheKey key;
    uint64_t file_id;
    uint64_t version;
    Blob blob;
  };

  explicit SampleCache(SampleCacheOptions options) : options_(std::move(options)) {}
  absl::Status OpenDisk();
  // Reads the entries a previous process left in the folder.
  void IndexDisk();
  std::string FilePath(const CacheKey& key, uint64_t file_id) const;

  // The entries of `tier` that would make room for `size` bytes of
  // `priority`, lowest first; false when entries ranked at or above it are
  // in the way.
  bool Victims(Tier tier, uint64_t priority, int64_t size, std::vector<CacheKey>* victims) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Admits `key` to `tier` if entries of lower priority can make room: they
  // are removed (RAM's are queued to move to disk, disk's files to go).
  bool Admit(Tier tier, const CacheKey& key, const Entry& value, std::vector<PendingWrite>* writes,
             std::vector<std::string>* unlinks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(const CacheKey& key, std::vector<std::string>* unlinks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the files of newly admitted disk entries and removes evicted
  // ones, outside the lock.
  void Apply(std::vector<PendingWrite> writes, std::vector<std::string> unlinks)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The value in the file of `key`'s entry when its header and hash check
  // out and it was made from `version` (else null, and `*stale` says which).
  Blob ReadFile(const CacheKey& key, uint64_t file_id, int64_t size, uint64_t version, bool* stale);

  const SampleCacheOptions options_;
  int lock_fd_ = -1;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<CacheKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Each tier's entries by (priority, key), lowest first: what goes first.
  absl::btree_set<std::pair<uint64_t, CacheKey>> ranked_[2] ABSL_GUARDED_BY(mu_);
  int64_t used_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  int64_t capacity_[2] = {0, 0};
  uint64_t next_file_id_ ABSL_GUARDED_BY(mu_) = 1;
  Stats counters_ ABSL_GUARDED_BY(mu_);
};

// One job's use of a SampleCache: the values at `boundary` of its pipeline
// over its dataset, in wire form (pipeline/core/wire.h), with the job's own hit
// and miss counts. Each value is kept with its source's version as it was
// before the sample was read (`source`; null: every version is 0), so a
// source changed since is a miss.
class BoundaryCache {
 public:
  BoundaryCache(std::shared_ptr<SampleCache> cache, uint64_t space, int boundary,
                const Dataset* source)
      : cache_(std::move(cache)), space_(space), boundary_(boundary), source_(source) {}

  int boundary() const { return boundary_; }
  SampleCache& cache() const { return *cache_; }

  // Makes `s` (its identity set) hold its value at boundary() from the
  // cache, copied into `ws`; false (a miss) when it is not kept. Either way
  // sets s.source_version, for Keep.
  bool Restore(Sample& s, Workspace& ws);
  // Keeps the value `s` holds at boundary() (after a Restore of `s` that
  // missed).
  void Keep(const Sample& s);
  bool Holds(int64_t index) const { return cache_->Holds({space_, index}); }
  // `indices` without those kept: what still has to be read.
  std::vector<int64_t> NotHeld(absl::Span<const int64_t> indices) const;

  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  int64_t misses() const { return misses_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<SampleCache> cache_;
  uint64_t space_;
  int boundary_;
  const Dataset* source_;
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_REUSE_SAMPLE_CACHE_H_
