#include "pipeline/core/profiler.h"

namespace prepflow {

StageProfiler::StageProfiler(std::vector<std::string> names)
    : names_(std::move(names)), slots_(new Slot[names_.size()]) {}

std::vector<StageStats> StageProfiler::Snapshot() const {
  std::vector<StageStats> out(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    out[i].name = names_[i];
    out[i].samples = slots_[i].samples.load(std::memory_order_relaxed);
    out[i].cpu_seconds = slots_[i].cpu_nanos.load(std::memory_order_relaxed) * 1e-9;
    out[i].output_bytes = slots_[i].bytes.load(std::memory_order_relaxed);
  }
  return out;
}

}  // namespace prepflow
