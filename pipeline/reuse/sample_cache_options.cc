// The sample cache's options as rows (base/options.h), the same for prepflow
// and prepflow-worker.
#include <limits>

#include "pipeline/reuse/sample_cache.h"

namespace prepflow {

const std::vector<OptionField<SampleCacheOptions>>& CacheOptionFields() {
  using O = SampleCacheOptions;
  constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
  static const auto* table = new std::vector<OptionField<O>>{
      IntOption<O>("cache_bytes", "cache-bytes", &O::ram_bytes, 0, kNoMax,
                   "keep samples' values at the cache boundary in RAM, up to this many bytes, so "
                   "later epochs (and jobs) do not read and prepare them again (0: no RAM cache)"),
      StringOption<O>("cache_dir", "cache-dir", &O::dir,
                      "keep them also in files under this folder, which outlive the process (one "
                      "process per folder; empty: no disk cache)"),
      IntOption<O>("cache_disk_bytes", "cache-disk-bytes", &O::disk_bytes, 0, kNoMax,
                   "with --cache-dir: the most bytes kept there (0: half the folder's free "
                   "space)"),
  };
  return *table;
}

}  // namespace prepflow
