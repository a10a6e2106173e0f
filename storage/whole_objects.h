// Whole copies of remote objects, for servers that ignore Range requests.
//
// HTTP lets a server answer a ranged GET with 200 and the whole object
// (Python's http.server does; so do many static hosts). A WebDataset sample
// is a range of its shard, so from such a server every sample would cost the
// whole shard. Instead each object is fetched whole once, kept here, and its
// ranges are served from the copy: in memory, or in unlinked files in a
// folder (`dir`), which the system frees when the process ends. What is kept
// and what is being fetched are bounded by `max_bytes`: past it the least
// recently used copies are dropped (a reader still holding one finishes
// first), a fetch waits for another to finish, and an object that is needed
// again is fetched again, which is counted.
//
// Thread-safety: every method may be called from any thread; concurrent
// reads of one object share its one fetch.
#ifndef PREPFLOW_STORAGE_WHOLE_OBJECTS_H_
#define PREPFLOW_STORAGE_WHOLE_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace prepflow {

struct WholeObjectOptions {
  int64_t max_bytes = int64_t{1} << 30;  // kept at once; also the largest object
  std::string dir;                       // "": copies in memory
};

class WholeObjects {
 public:
  // The whole object's bytes (a GET without a range).
  using Fetch = std::function<absl::StatusOr<std::string>()>;

  explicit WholeObjects(WholeObjectOptions options);
  ~WholeObjects();
  WholeObjects(const WholeObjects&) = delete;
  WholeObjects& operator=(const WholeObjects&) = delete;

  // Bytes [offset, offset + length) of the object `name` (`size` bytes,
  // `version` its ETag) into `dst`, from its copy, fetched with `fetch`
  // when none is kept. ResourceExhausted (naming --whole-object-bytes) for
  // an object over max_bytes, DataLoss when the fetched object is not
  // `size` bytes (it changed), the fetch's own error, or the folder's.
  // `*fetched` (may be null) says whether this call fetched it.
  absl::Status ReadAt(const std::string& name, const std::string& version, uint64_t size,
                      uint64_t offset, size_t length, uint8_t* dst, const Fetch& fetch,
                      bool* fetched);

  struct Counters {
    int64_t fetches = 0;    // objects fetched whole
    int64_t refetches = 0;  // of those, objects fetched before (dropped for room)
    int64_t held_bytes = 0;
  };
  Counters counters() const;

 private:
  class Copy;
  struct Entry {
    std::shared_ptr<const Copy> copy;  // null while loading or after a failed load
    bool loading = false;
    uint64_t generation = 0;  // of the last load
    absl::Status failed;      // that load's error
    uint64_t last_use = 0;
  };
  // The copy of `key`, loading it (or waiting for the load in flight).
  absl::StatusOr<std::shared_ptr<const Copy>> Get(const std::string& key, uint64_t size,
                                                  const Fetch& fetch, bool* fetched);
  // Makes a copy of `size` bytes with `fetch` (no lock held).
  absl::StatusOr<std::shared_ptr<const Copy>> Load(const std::string& name, uint64_t size,
                                                   const Fetch& fetch) const;
  // Drops the least recently used copies (never `keep`) until what is kept,
  // what is loading and `more` fit max_bytes, or no copy is left to drop.
  void Evict(const std::string& keep, uint64_t more) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WholeObjectOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar loaded_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> ever_fetched_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loading_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of the loads in flight
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_WHOLE_OBJECTS_H_
