// Counter-based random numbers for placement-independent augmentation.
//
// Every random draw a stage makes is a pure function of
// (job seed, epoch, sample index, stage index, draw number), computed with the
// Philox4x32-10 generator (Salmon et al., SC'11). There is no generator state
// shared between samples, so results never depend on thread count, batch
// size, scheduling, or on which machine ran the stage.
//
// Thread-safety: SampleRng is a small value type; use one per (sample, stage)
// on one thread. The free functions are pure.
#ifndef PREPFLOW_PIPELINE_CORE_RNG_H_
#define PREPFLOW_PIPELINE_CORE_RNG_H_

#include <array>
#include <cstdint>

namespace prepflow {

// One Philox4x32-10 block: four 32-bit outputs for a 128-bit counter and a
// 64-bit key.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Stages are numbered below this; the top value of the stage byte names the
// per-epoch shuffle stream.
inline constexpr uint32_t kMaxStages = 255;
// Echoed copies of a sample are numbered below this (data echoing: the copy
// index joins the counter, so each copy draws its own numbers).
inline constexpr uint32_t kMaxCopies = 1u << 16;

class SampleRng {
 public:
  // The stream of stage `stage` (< kMaxStages) for sample `index` of `epoch`,
  // and of its echoed copy `copy` (< kMaxCopies; 0: the sample itself).
  // REQUIRES: index < 2^48.
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t stage, uint32_t copy = 0);

  uint32_t NextU32();
  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Standard normal, by Box-Muller from two uniforms (the sine half unused).
  double Normal();
  // Gamma(shape, 1), shape > 0, by Marsaglia and Tsang's method (shape < 1
  // boosted: Gamma(a) = Gamma(a + 1) * U^(1/a)).
  double Gamma(double shape);
  // Uniform integer in [lo, hi], unbiased. REQUIRES: lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi);

  // A stream of its own for `id` (> 0), independent of this one and of
  // every other id's: what the stages inside a composition draw from. Its
  // key is this stream's last block (which no stage draws that far to
  // reach) xor id; it starts at its first block.
  SampleRng Substream(uint64_t id) const;

 protected:
  SampleRng(std::array<uint32_t, 4> base, std::array<uint32_t, 2> key);

 private:
  void Refill();

  std::array<uint32_t, 4> base_;
  std::array<uint32_t, 2> key_;
  uint64_t block_ = 0;
  std::array<uint32_t, 4> out_{};
  int used_ = 4;
};

// splitmix64's finalizer: a stateless mixer of 64-bit keys, for ranking and
// hashing (cache priorities, rendezvous homes), not for drawing numbers.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The stream that shuffles `epoch`: up to 2^64 blocks, disjoint from every
// SampleRng stream of the same seed.
class EpochRng : public SampleRng {
 public:
  EpochRng(uint64_t seed, uint64_t epoch);
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_RNG_H_
