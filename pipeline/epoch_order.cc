#include "pipeline/epoch_order.h"

#include <cstddef>
#include <numeric>
#include <utility>

#include "pipeline/rng.h"

namespace prepflow {

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle, int rank,
                                int world_size) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    EpochRng rng(seed, epoch);
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[rng.UniformInt(0, i)]);
    }
  }
  if (world_size <= 1) return order;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(n / world_size + 1));
  for (int64_t i = rank; i < n; i += world_size) mine.push_back(order[i]);
  return mine;
}

}  // namespace prepflow
