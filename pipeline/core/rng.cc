#include "pipeline/core/rng.h"

#include <cmath>

namespace prepflow {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;
constexpr uint32_t kW1 = 0xBB67AE85u;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Sample streams put the stage in the top byte of word 3 and the block number
// in its low 24 bits (16M blocks = 64M draws per sample and stage).
constexpr uint32_t kShuffleTag = 0xFF000000u;

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kM0, c[0], &hi0, &lo0);
    MulHiLo(kM1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

SampleRng::SampleRng(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t stage, uint32_t copy)
    // Word 1 holds the index's bits 32 to 47 and the copy above them: copy 0
    // draws what the sample drew before echoing existed.
    : SampleRng({static_cast<uint32_t>(index),
                 static_cast<uint32_t>((index >> 32) & 0xFFFFu) | (copy & 0xFFFFu) << 16,
                 static_cast<uint32_t>(epoch), (stage & 0xFFu) << 24},
                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}) {}

SampleRng::SampleRng(std::array<uint32_t, 4> base, std::array<uint32_t, 2> key)
    : base_(base), key_(key) {}

SampleRng SampleRng::Substream(uint64_t id) const {
  std::array<uint32_t, 4> last = base_;
  last[3] |= 0xFFFFFFu;
  const std::array<uint32_t, 4> r = Philox4x32(last, key_);
  return SampleRng(base_,
                   {r[0] ^ static_cast<uint32_t>(id), r[1] ^ static_cast<uint32_t>(id >> 32)});
}

void SampleRng::Refill() {
  std::array<uint32_t, 4> c = base_;
  if ((base_[3] & kShuffleTag) == kShuffleTag) {
    // Epoch stream: the block number fills words 0 and 1.
    c[0] = static_cast<uint32_t>(block_);
    c[1] = static_cast<uint32_t>(block_ >> 32);
  } else {
    c[3] |= static_cast<uint32_t>(block_ & 0xFFFFFFu);
  }
  out_ = Philox4x32(c, key_);
  ++block_;
  used_ = 0;
}

uint32_t SampleRng::NextU32() {
  if (used_ == 4) Refill();
  return out_[used_++];
}

uint64_t SampleRng::NextU64() {
  const uint64_t hi = NextU32();
  return (hi << 32) | NextU32();
}

double SampleRng::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double SampleRng::Normal() {
  const double u1 = 1.0 - Uniform();  // (0, 1]: the logarithm is finite
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double SampleRng::Gamma(double shape) {
  if (shape < 1) {
    const double u = 1.0 - Uniform();  // (0, 1]
    return Gamma(shape + 1) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (int attempt = 0; attempt < 1000; ++attempt) {  // accepts over 95% of the time
    const double x = Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - Uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
  return d;
}

int64_t SampleRng::UniformInt(int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (range == 0) return static_cast<int64_t>(NextU64());  // full 64-bit range
  // Lemire's multiply-and-reject: unbiased, one draw almost always.
  const uint64_t threshold = -range % range;
  while (true) {
    const uint64_t x = NextU64();
    const unsigned __int128 m = static_cast<unsigned __int128>(x) * range;
    if (static_cast<uint64_t>(m) >= threshold) {
      return lo + static_cast<int64_t>(m >> 64);
    }
  }
}

EpochRng::EpochRng(uint64_t seed, uint64_t epoch)
    : SampleRng({0, 0, static_cast<uint32_t>(epoch),
                 kShuffleTag | static_cast<uint32_t>((epoch >> 32) & 0xFFFFFFu)},
                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}) {}

}  // namespace prepflow
