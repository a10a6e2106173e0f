// Which samples a rank visits in an epoch, and in what order.
//
// Thread-safety: pure functions.
#ifndef PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_
#define PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_

#include <cstdint>
#include <vector>

namespace prepflow {

// How a dataset that does not divide by the ranks is shared among them.
enum class RankSplit {
  // As torch's DistributedSampler (drop_last=False): the permutation is
  // padded with its own first entries to a multiple of world_size, so every
  // rank visits ceil(n / world_size) samples; a padded entry repeats a
  // sample another rank visits (never one of its own, since padding is
  // shorter than world_size when n >= world_size).
  kPad,
  // As DistributedSampler(drop_last=True): the permutation's last
  // n % world_size entries are left out: floor(n / world_size) each.
  kDrop,
  // Every index once: rank sizes differ by one (ranks may then run a
  // different number of batches).
  kUneven,
};

// The sample indices rank `rank` of `world_size` visits in `epoch`: a
// permutation of [0, n) drawn from (seed, epoch) (the identity when !shuffle),
// shared as `split` says, of which the rank takes every world_size-th entry
// starting at `rank`. REQUIRES: 0 <= rank < world_size, n >= 0.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle, int rank,
                                int world_size, RankSplit split = RankSplit::kUneven);
// How many samples rank `rank` visits per epoch under `split`.
int64_t RankSamples(int64_t n, int rank, int world_size, RankSplit split);

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

#endif  // PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_
