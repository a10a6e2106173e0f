// Pillow's resize (Resample.c's ImagingResample) on RGB images: its filters,
// their coefficients in 22-bit fixed point, a horizontal pass rounded to 8
// bits and then a vertical one. Every sum is an integer, so the SIMD passes
// (SSE2, and AVX2 where the CPU has it) give Pillow's bits exactly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "pipeline/ops/image/geometry.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#ifdef __x86_64__
#include <immintrin.h>
#endif

namespace prepflow {
namespace {

// Resample.c's filters and fixed point.
constexpr int kPrecisionBits = 32 - 8 - 2;

// Pillow's resize filters (Resample.c), each with its support.
double BoxWeight(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double BilinearWeight(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double HammingWeight(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x *= M_PI;
  // Pillow writes the window's constants as floats (0.54f, 0.46f).
  return std::sin(x) / x * (static_cast<double>(0.54f) + static_cast<double>(0.46f) * std::cos(x));
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double LanczosWeight(double x) { return -3.0 <= x && x < 3.0 ? Sinc(x) * Sinc(x / 3.0) : 0.0; }

double BicubicWeight(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// precompute_coeffs + normalize_coeffs_8bpc for one axis: output i reads
// `ksize` fixed-point weights from first[i] on (count[i] of them non-zero).
struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

struct ResizeFilter {
  double (*weight)(double);
  double support;
};

ResizeFilter FilterOf(Resample resample) {
  switch (resample) {
    case Resample::kBox:
      return {BoxWeight, 0.5};
    case Resample::kHamming:
      return {HammingWeight, 1.0};
    case Resample::kBicubic:
      return {BicubicWeight, 2.0};
    case Resample::kLanczos:
      return {LanczosWeight, 3.0};
    default:
      return {BilinearWeight, 1.0};
  }
}

AxisCoeffs Coefficients(int in_size, int out_size, Resample resample) {
  const ResizeFilter filter = FilterOf(resample);
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  AxisCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double t = (x + xmin - center + 0.5) * ss;
      w[x] = filter.weight(t);
      ww += w[x];
    }
    int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                        : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = std::max(xmax, 0);
  }
  return c;
}

inline uint8_t Clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// One output row of the vertical pass: out[i] = clip8(2^21 + sum_j
// rows[j][i] * k[j]) over `count` rows `stride` bytes apart. The sums are
// integers, so any order gives Pillow's bits. With SSE2 each 22-bit weight
// is split into 11-bit halves (k = hi * 2^11 + lo) so that pairs of rows go
// through pmaddwd, 16-bit products summed in 32 bits:
// sum rows * k = 2^11 * sum rows * hi + sum rows * lo, exactly.
void VerticalSums(const uint8_t* rows, size_t stride, const int32_t* k, int count, uint8_t* out,
                  size_t width) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128i zero = _mm_setzero_si128();
  for (; i + 16 <= width; i += 16) {
    __m128i hi[4] = {zero, zero, zero, zero}, lo[4] = {zero, zero, zero, zero};
    for (int j = 0; j < count; j += 2) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + j * stride + i));
      const __m128i b =
          j + 1 < count
              ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + (j + 1) * stride + i))
              : zero;
      const int32_t kb = j + 1 < count ? k[j + 1] : 0;
      // (weight of a, weight of b) in each 32-bit lane, as int16 pairs.
      const __m128i whi = _mm_set1_epi32(
          static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint16_t>(kb >> 11)) << 16) |
                               static_cast<uint16_t>(k[j] >> 11)));
      const __m128i wlo = _mm_set1_epi32(
          static_cast<int32_t>((static_cast<uint32_t>(kb & 2047) << 16) | (k[j] & 2047)));
      const __m128i ab[2] = {_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)};
      for (int h = 0; h < 2; ++h) {
        const __m128i p0 = _mm_unpacklo_epi8(ab[h], zero), p1 = _mm_unpackhi_epi8(ab[h], zero);
        hi[2 * h] = _mm_add_epi32(hi[2 * h], _mm_madd_epi16(p0, whi));
        hi[2 * h + 1] = _mm_add_epi32(hi[2 * h + 1], _mm_madd_epi16(p1, whi));
        lo[2 * h] = _mm_add_epi32(lo[2 * h], _mm_madd_epi16(p0, wlo));
        lo[2 * h + 1] = _mm_add_epi32(lo[2 * h + 1], _mm_madd_epi16(p1, wlo));
      }
    }
    // Clip8 on 16 sums: the arithmetic shift keeps a negative sum negative
    // and the saturating packs take it to 0, and anything from 255 << 22 on
    // to 255.
    __m128i v[4];
    for (int q = 0; q < 4; ++q) {
      const __m128i total = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi[q], 11), lo[q]),
                                          _mm_set1_epi32(1 << (kPrecisionBits - 1)));
      v[q] = _mm_srai_epi32(total, kPrecisionBits);
    }
    const __m128i packed =
        _mm_packus_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
#endif
  for (; i < width; ++i) {
    int32_t acc = 1 << (kPrecisionBits - 1);
    for (int j = 0; j < count; ++j) acc += rows[j * stride + i] * k[j];
    out[i] = Clip8(acc);
  }
}

// Output pixel xx of one row: its three sums, clipped.
inline void HorizontalPixel(const uint8_t* src, const AxisCoeffs& c, int xx, uint8_t* dst) {
  const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
  const uint8_t* p = src + 3 * c.first[xx];
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int x = 0; x < c.count[xx]; ++x, p += 3) {
    s0 += p[0] * k[x];
    s1 += p[1] * k[x];
    s2 += p[2] * k[x];
  }
  dst[3 * xx] = Clip8(s0);
  dst[3 * xx + 1] = Clip8(s1);
  dst[3 * xx + 2] = Clip8(s2);
}

// The horizontal pass over `n` rows `in_stride` bytes apart into `dst`
// (packed rows of out_w pixels).
void HorizontalPass(const uint8_t* rows, size_t in_stride, int n, const AxisCoeffs& c, int out_w,
                    uint8_t* dst) {
  for (int y = 0; y < n; ++y) {
    const uint8_t* src = rows + static_cast<size_t>(y) * in_stride;
    uint8_t* out = dst + static_cast<size_t>(y) * out_w * 3;
    for (int xx = 0; xx < out_w; ++xx) HorizontalPixel(src, c, xx, out);
  }
}

#ifdef __x86_64__
// The weights of the horizontal pass as pmaddwd takes them: for each output
// pixel, its taps in pairs (j, j + 1), each 22-bit weight split into 11-bit
// halves (k = hi * 2^11 + lo, as VerticalSums does), (hi_j, hi_j+1) and
// (lo_j, lo_j+1) as int16 pairs in one 32-bit word; an odd tap pairs with 0.
struct TapPairs {
  int pairs = 0;  // per output pixel
  std::vector<int32_t> hi, lo;
};

TapPairs PairTaps(const AxisCoeffs& c, int out_w) {
  TapPairs t;
  t.pairs = (c.ksize + 1) / 2;
  t.hi.assign(static_cast<size_t>(out_w) * t.pairs, 0);
  t.lo.assign(t.hi.size(), 0);
  const auto pack = [](int32_t a, int32_t b) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16 |
                                static_cast<uint16_t>(a));
  };
  for (int xx = 0; xx < out_w; ++xx) {
    const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int j = 0; j < c.count[xx]; j += 2) {
      const int32_t a = k[j], b = j + 1 < c.count[xx] ? k[j + 1] : 0;
      const size_t at = static_cast<size_t>(xx) * t.pairs + j / 2;
      t.hi[at] = pack(a >> 11, b >> 11);
      t.lo[at] = pack(a & 2047, b & 2047);
    }
  }
  return t;
}

// Two adjacent pixels of a row (6 bytes) at `p`, as a word; 8 bytes read at
// once where `whole` (two more bytes follow in the row), else the 6 (or,
// for a last odd tap, 3) that exist.
inline uint64_t TwoPixels(const uint8_t* p, bool whole, bool pair) {
  uint64_t v = 0;
  if (whole) {
    std::memcpy(&v, p, 8);  // constant sizes: one load, not a call
  } else if (pair) {
    std::memcpy(&v, p, 6);
  } else {
    std::memcpy(&v, p, 3);
  }
  return v;
}

// As HorizontalPass, two rows at a time, two taps at a time: each pair of
// pixels (R0 G0 B0 R1 G1 B1) of both rows is shuffled to (R0 R1, G0 G1,
// B0 B1, -) as int16 pairs and multiplied-and-added by pmaddwd with the
// pair's weight halves, giving the R, G and B sums of both rows in 8 lanes.
// The same integer sums as the scalar pass, so Pillow's bits.
__attribute__((target("avx2"))) void HorizontalPassAvx2(const uint8_t* rows, size_t in_stride,
                                                        int n, const AxisCoeffs& c, int in_w,
                                                        int out_w, uint8_t* dst) {
  const TapPairs taps = PairTaps(c, out_w);
  const __m256i round = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const __m128i interleave = _mm_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, 8, 11, 9, 12, 10, 13, -1, -1);
  const size_t out_stride = static_cast<size_t>(out_w) * 3;
  int y = 0;
  for (; y + 2 <= n; y += 2) {
    const uint8_t* r0 = rows + static_cast<size_t>(y) * in_stride;
    const uint8_t* r1 = r0 + in_stride;
    uint8_t* d0 = dst + static_cast<size_t>(y) * out_stride;
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* hi = &taps.hi[static_cast<size_t>(xx) * taps.pairs];
      const int32_t* lo = &taps.lo[static_cast<size_t>(xx) * taps.pairs];
      const int first = c.first[xx], count = c.count[xx];
      __m256i acc_hi = _mm256_setzero_si256(), acc_lo = _mm256_setzero_si256();
      for (int j = 0; j < count; j += 2) {
        const int x = first + j;
        const bool whole = x + 3 <= in_w;  // pixels x, x + 1 and a byte of x + 2
        const bool pair = j + 1 < count;
        const size_t at = 3 * static_cast<size_t>(x);
        const __m128i both =
            _mm_shuffle_epi8(_mm_set_epi64x(static_cast<int64_t>(TwoPixels(r1 + at, whole, pair)),
                                            static_cast<int64_t>(TwoPixels(r0 + at, whole, pair))),
                             interleave);
        const __m256i px = _mm256_cvtepu8_epi16(both);
        acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(px, _mm256_set1_epi32(hi[j / 2])));
        acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(px, _mm256_set1_epi32(lo[j / 2])));
      }
      const __m256i total =
          _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(acc_hi, 11), acc_lo), round);
      const __m256i v = _mm256_srai_epi32(total, kPrecisionBits);
      const __m128i words =
          _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      const uint64_t bytes =
          static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(words, words)));
      const uint32_t p0 = static_cast<uint32_t>(bytes), p1 = static_cast<uint32_t>(bytes >> 32);
      std::memcpy(d0 + 3 * xx, &p0, 3);
      std::memcpy(d0 + out_stride + 3 * xx, &p1, 3);
    }
  }
  if (y < n) HorizontalPass(rows + y * in_stride, in_stride, n - y, c, out_w, dst + y * out_stride);
}

// VerticalSums 32 bytes at a time (each step as the SSE2 one, lane by lane:
// unpacks and packs stay within 128-bit lanes, so the bytes keep their
// places); the rest of the row as VerticalSums.
__attribute__((target("avx2"))) void VerticalSumsAvx2(const uint8_t* rows, size_t stride,
                                                      const int32_t* k, int count, uint8_t* out,
                                                      size_t width) {
  const __m256i zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= width; i += 32) {
    __m256i hi[4] = {zero, zero, zero, zero}, lo[4] = {zero, zero, zero, zero};
    for (int j = 0; j < count; j += 2) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + j * stride + i));
      const __m256i b =
          j + 1 < count
              ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (j + 1) * stride + i))
              : zero;
      const int32_t kb = j + 1 < count ? k[j + 1] : 0;
      const __m256i whi = _mm256_set1_epi32(
          static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint16_t>(kb >> 11)) << 16) |
                               static_cast<uint16_t>(k[j] >> 11)));
      const __m256i wlo = _mm256_set1_epi32(
          static_cast<int32_t>((static_cast<uint32_t>(kb & 2047) << 16) | (k[j] & 2047)));
      const __m256i ab[2] = {_mm256_unpacklo_epi8(a, b), _mm256_unpackhi_epi8(a, b)};
      for (int h = 0; h < 2; ++h) {
        const __m256i p0 = _mm256_unpacklo_epi8(ab[h], zero);
        const __m256i p1 = _mm256_unpackhi_epi8(ab[h], zero);
        hi[2 * h] = _mm256_add_epi32(hi[2 * h], _mm256_madd_epi16(p0, whi));
        hi[2 * h + 1] = _mm256_add_epi32(hi[2 * h + 1], _mm256_madd_epi16(p1, whi));
        lo[2 * h] = _mm256_add_epi32(lo[2 * h], _mm256_madd_epi16(p0, wlo));
        lo[2 * h + 1] = _mm256_add_epi32(lo[2 * h + 1], _mm256_madd_epi16(p1, wlo));
      }
    }
    __m256i v[4];
    for (int q = 0; q < 4; ++q) {
      const __m256i total = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi[q], 11), lo[q]),
                                             _mm256_set1_epi32(1 << (kPrecisionBits - 1)));
      v[q] = _mm256_srai_epi32(total, kPrecisionBits);
    }
    const __m256i packed =
        _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  if (i < width) VerticalSums(rows + i, stride, k, count, out + i, width - i);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

void PillowResize(const uint8_t* in, int in_h, int in_w, size_t in_stride, uint8_t* out, int out_h,
                  int out_w, Resample resample) {
  const AxisCoeffs horiz = Coefficients(in_w, out_w, resample);
  const AxisCoeffs vert = Coefficients(in_h, out_h, resample);
  // The rows the vertical pass reads, and the horizontal pass into them.
  const int y_first = vert.first[0];
  const int y_last = vert.first[out_h - 1] + vert.count[out_h - 1];
  const bool need_horizontal = out_w != in_w, need_vertical = out_h != in_h;
  std::unique_ptr<uint8_t[]> temp;  // not zero-filled: every byte is written
  const uint8_t* rows = in + static_cast<size_t>(y_first) * in_stride;
  size_t stride = in_stride;
  if (need_horizontal) {
    const int n = y_last - y_first;
    temp.reset(new uint8_t[static_cast<size_t>(n) * out_w * 3]);
#ifdef __x86_64__
    if (HasAvx2()) {
      HorizontalPassAvx2(rows, in_stride, n, horiz, in_w, out_w, temp.get());
    } else {
      HorizontalPass(rows, in_stride, n, horiz, out_w, temp.get());
    }
#else
    HorizontalPass(rows, in_stride, n, horiz, out_w, temp.get());
#endif
    rows = temp.get();
    stride = static_cast<size_t>(out_w) * 3;
  }
  const size_t width = static_cast<size_t>(out_w) * 3;
  if (!need_vertical) {  // the rows are the output's (y_first is 0 then)
    for (int y = 0; y < out_h; ++y) std::memcpy(out + y * width, rows + y * stride, width);
    return;
  }
#ifdef __x86_64__
  const auto sums = HasAvx2() ? VerticalSumsAvx2 : VerticalSums;
#else
  const auto sums = VerticalSums;
#endif
  for (int yy = 0; yy < out_h; ++yy) {
    const uint8_t* first = rows + static_cast<size_t>(vert.first[yy] - y_first) * stride;
    sums(first, stride, &vert.k[static_cast<size_t>(yy) * vert.ksize], vert.count[yy],
         out + static_cast<size_t>(yy) * width, width);
  }
}

}  // namespace prepflow
