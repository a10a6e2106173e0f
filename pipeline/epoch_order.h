// Which samples a rank visits in an epoch, and in what order.
#ifndef PREPFLOW_PIPELINE_EPOCH_ORDER_H_
#define PREPFLOW_PIPELINE_EPOCH_ORDER_H_

#include <cstdint>
#include <vector>

namespace prepflow {

// The sample indices rank `rank` of `world_size` visits in `epoch`: a
// permutation of [0, n) drawn from (seed, epoch) (the identity when !shuffle),
// of which the rank takes every world_size-th entry starting at `rank`. Every
// index goes to exactly one rank; rank sizes differ by at most one.
// REQUIRES: 0 <= rank < world_size, n >= 0.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle, int rank,
                                int world_size);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_EPOCH_ORDER_H_
