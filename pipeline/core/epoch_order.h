// Which samples a rank visits in an epoch, and in what order.
//
// Thread-safety: pure functions.
#ifndef PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_
#define PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_

#include <cstdint>
#include <string>
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

// Deals an epoch's whole order (and its copies, when not empty) to rank
// `rank` of `world_size` as EpochOrder does: every world_size-th entry from
// `rank`, after `split` pads or cuts it.
void DealToRank(std::vector<int64_t>* order, std::vector<uint32_t>* copies, int rank,
                int world_size, RankSplit split);

// A weighted mixture of datasets read as one (DatasetSpec.mix): source s's
// i-th sample is the mixture's sample offset(s) + i, offset(s) the sizes of
// the sources before it.
struct MixPlan {
  std::vector<int64_t> sizes;   // each source's samples (> 0)
  std::vector<double> weights;  // each source's weight (> 0): a share of their sum
  // Samples per mixture epoch (0: the sum of the sizes).
  int64_t epoch_samples = 0;
  // false: a source that has given all its samples starts its own next
  // epoch, its order continuing across mixture epochs; true: a mixture
  // epoch ends where the first source would run out (its length is the
  // largest for which no source repeats), and every mixture epoch starts
  // each source's own epoch anew (epoch_samples is not used).
  bool stop_at_first_end = false;
};

// Why `plan` cannot be mixed ("" when it can): no sources, a size or weight
// out of range, or a source so small for its share that a sample of it
// would repeat more than kMaxCopies times in an epoch.
std::string WhyNotMixable(const MixPlan& plan);

// The samples each source gives per mixture epoch: its share of the epoch
// rounded by largest remainders (ties to the earlier source), so that every
// epoch holds the weights exactly, to within one sample.
std::vector<int64_t> MixCounts(const MixPlan& plan);

// Mixture epoch `epoch`'s order, all ranks': which source gives each next
// sample is a shuffle of the epoch's counts from (seed, epoch) (without
// `shuffle`, spread evenly: smooth weighted round-robin), and each source
// gives its samples in its own epoch order (EpochOrder of its size, from a
// seed of its own). `*copies` numbers a sample's appearances in the epoch
// (0, 1, ...: a source smaller than its count repeats, each appearance
// drawing its own random numbers). The same arguments give the same order.
// REQUIRES: WhyNotMixable(plan) is "".
std::vector<int64_t> MixOrder(const MixPlan& plan, uint64_t seed, uint64_t epoch, bool shuffle,
                              std::vector<uint32_t>* copies);

// Data echoing: expands `order` so that each sample appears `factor` times,
// as copies 0 .. factor-1 (`*copies`, parallel to `*order`), spread by a
// bounded shuffle: the order is cut into blocks of `window` samples, and each
// block's factor x window entries are shuffled among themselves from (seed,
// epoch). Every copy of a sample lies in its block, so holding the samples
// of two blocks is enough to load each once. Factor 1 leaves the order as
// it is. REQUIRES: factor >= 1, window >= 1.
void EchoOrder(std::vector<int64_t>* order, std::vector<uint32_t>* copies, int factor,
               int64_t window, uint64_t seed, uint64_t epoch);

// Batching by length (bucketing), as ESPnet's and Lhotse's samplers do it,
// so that padding a batch to its longest wastes little.
struct LengthBatching {
  // A batch's padded length, (samples) x (its longest), stays within this
  // many seconds; a sample longer than that is a batch of its own.
  double max_seconds = 0;
  int64_t max_samples = 1;  // and it holds at most this many samples
  // Samples sorted by length together: more gives less padding, fewer mixes
  // lengths more from epoch to epoch.
  int64_t window = 1000;
};

// Cuts `order` (an epoch's order of every sample, all ranks') into windows of
// options.window entries, sorts each by `seconds` (ties keep their order)
// and cuts it greedily into batches within the budget; then, when
// `shuffle`, shuffles the epoch's batches from (seed, epoch). The same
// arguments give the same batches. REQUIRES: seconds[i] >= 0 for every i in
// order, max_seconds > 0, max_samples >= 1, window >= 1.
std::vector<std::vector<int64_t>> BatchByLength(const std::vector<int64_t>& order,
                                                const std::vector<double>& seconds,
                                                const LengthBatching& options, uint64_t seed,
                                                uint64_t epoch, bool shuffle);

// The batches rank `rank` of `world_size` takes of `batches`: every
// world_size-th from `rank`, after the list is padded with its own first
// batches (kPad) or cut (kDrop) to a multiple of world_size, so that every
// rank runs as many batches (kUneven: counts differ by one).
std::vector<std::vector<int64_t>> RankBatches(const std::vector<std::vector<int64_t>>& batches,
                                              int rank, int world_size, RankSplit split);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_EPOCH_ORDER_H_
