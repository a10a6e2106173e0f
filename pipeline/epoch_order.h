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

// Data echoing: expands `order` so that each sample appears `factor` times,
// as copies 0 .. factor-1 (`*copies`, parallel to `*order`), spread by a
// bounded shuffle: the order is cut into blocks of `window` samples, and each
// block's factor x window entries are shuffled among themselves from (seed,
// epoch). Every copy of a sample lies in its block, so holding the samples
// of two blocks is enough to load each once. Factor 1 leaves the order as
// it is. REQUIRES: factor >= 1, window >= 1.
void EchoOrder(std::vector<int64_t>* order, std::vector<uint32_t>* copies, int factor,
               int64_t window, uint64_t seed, uint64_t epoch);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_EPOCH_ORDER_H_
