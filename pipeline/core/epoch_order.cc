#include "pipeline/core/epoch_order.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>

#include "pipeline/core/rng.h"

namespace prepflow {

namespace {

// The entries of the permutation dealt to the ranks.
int64_t DealtEntries(int64_t n, int world_size, RankSplit split) {
  switch (split) {
    case RankSplit::kPad:
      return (n + world_size - 1) / world_size * world_size;
    case RankSplit::kDrop:
      return n / world_size * world_size;
    case RankSplit::kUneven:
      break;
  }
  return n;
}

}  // namespace

int64_t RankSamples(int64_t n, int rank, int world_size, RankSplit split) {
  if (world_size <= 1 || n == 0) return n;
  const int64_t dealt = DealtEntries(n, world_size, split);
  return dealt / world_size + (rank < dealt % world_size ? 1 : 0);
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle, int rank,
                                int world_size, RankSplit split) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    EpochRng rng(seed, epoch);
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[rng.UniformInt(0, i)]);
    }
  }
  DealToRank(&order, nullptr, rank, world_size, split);
  return order;
}

void DealToRank(std::vector<int64_t>* order, std::vector<uint32_t>* copies, int rank,
                int world_size, RankSplit split) {
  const auto n = static_cast<int64_t>(order->size());
  if (world_size <= 1 || n == 0) return;
  const bool with_copies = copies != nullptr && !copies->empty();
  const int64_t dealt = DealtEntries(n, world_size, split);
  std::vector<int64_t> mine;
  std::vector<uint32_t> my_copies;
  mine.reserve(static_cast<size_t>(dealt / world_size + 1));
  // Padding wraps around to the permutation's first entries.
  for (int64_t i = rank; i < dealt; i += world_size) {
    mine.push_back((*order)[i % n]);
    if (with_copies) my_copies.push_back((*copies)[i % n]);
  }
  *order = std::move(mine);
  if (with_copies) *copies = std::move(my_copies);
}

void EchoOrder(std::vector<int64_t>* order, std::vector<uint32_t>* copies, int factor,
               int64_t window, uint64_t seed, uint64_t epoch) {
  if (factor <= 1) {  // nothing to echo: the order as it is
    copies->assign(order->size(), 0);
    return;
  }
  const std::vector<int64_t> fresh = std::move(*order);
  order->clear();
  copies->clear();
  order->reserve(fresh.size() * static_cast<size_t>(factor));
  copies->reserve(fresh.size() * static_cast<size_t>(factor));
  for (size_t start = 0; start < fresh.size(); start += static_cast<size_t>(window)) {
    const size_t end = std::min(fresh.size(), start + static_cast<size_t>(window));
    const size_t first = order->size();
    for (size_t i = start; i < end; ++i) {
      for (int c = 0; c < factor; ++c) {
        order->push_back(fresh[i]);
        copies->push_back(static_cast<uint32_t>(c));
      }
    }
    // Each block its own stream: that of the last stage number (the Loader
    // places samples with its copy 0), copy 1, indexed by the block.
    SampleRng rng(seed, epoch, start / static_cast<size_t>(window), kMaxStages - 1, 1);
    for (size_t i = order->size() - 1; i > first; --i) {
      const auto j =
          first + static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(i - first)));
      std::swap((*order)[i], (*order)[j]);
      std::swap((*copies)[i], (*copies)[j]);
    }
  }
}

std::vector<std::vector<int64_t>> BatchByLength(const std::vector<int64_t>& order,
                                                const std::vector<double>& seconds,
                                                const LengthBatching& options, uint64_t seed,
                                                uint64_t epoch, bool shuffle) {
  std::vector<std::vector<int64_t>> batches;
  const auto window = static_cast<size_t>(options.window);
  for (size_t start = 0; start < order.size(); start += window) {
    std::vector<int64_t> sorted(
        order.begin() + static_cast<std::ptrdiff_t>(start),
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + window)));
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](int64_t a, int64_t b) { return seconds[a] < seconds[b]; });
    std::vector<int64_t> batch;
    for (const int64_t i : sorted) {
      // Sorted: this sample is the batch's longest so far.
      const auto padded = static_cast<double>(batch.size() + 1) * seconds[i];
      if (!batch.empty() && (padded > options.max_seconds ||
                             static_cast<int64_t>(batch.size()) >= options.max_samples)) {
        batches.push_back(std::move(batch));
        batch.clear();
      }
      batch.push_back(i);
    }
    if (!batch.empty()) batches.push_back(std::move(batch));
  }
  if (shuffle) {
    // A stream of its own: the last stage's, copy 2 (EchoOrder's blocks
    // draw copy 1's).
    SampleRng rng(seed, epoch, 0, kMaxStages - 1, 2);
    for (size_t i = batches.size(); i > 1; --i) {
      std::swap(batches[i - 1],
                batches[static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(i - 1)))]);
    }
  }
  return batches;
}

std::vector<std::vector<int64_t>> RankBatches(const std::vector<std::vector<int64_t>>& batches,
                                              int rank, int world_size, RankSplit split) {
  const auto n = static_cast<int64_t>(batches.size());
  if (world_size <= 1) return batches;
  const int64_t dealt = n == 0 ? 0 : DealtEntries(n, world_size, split);
  std::vector<std::vector<int64_t>> mine;
  for (int64_t i = rank; i < dealt; i += world_size) mine.push_back(batches[i % n]);
  return mine;
}

}  // namespace prepflow
