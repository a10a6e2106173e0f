#include "pipeline/ops/image/color.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "pipeline/ops/image/geometry.h"

namespace prepflow {
namespace {

using Lut = std::array<uint8_t, 256>;

void ApplyLut(const uint8_t* in, uint8_t* out, size_t pixels, const Lut& lut) {
  for (size_t i = 0; i < pixels * 3; ++i) out[i] = lut[in[i]];
}

// Per-channel tables (ImageOps applies one 256-entry table per band).
void ApplyLuts(const uint8_t* in, uint8_t* out, size_t pixels, const std::array<Lut, 3>& luts) {
  for (size_t i = 0; i < pixels; ++i) {
    for (int c = 0; c < 3; ++c) out[3 * i + c] = luts[c][in[3 * i + c]];
  }
}

using Histogram = std::array<uint64_t, 256>;

std::array<Histogram, 3> Histograms(const uint8_t* in, size_t pixels) {
  std::array<Histogram, 3> h{};
  for (size_t i = 0; i < pixels; ++i) {
    for (int c = 0; c < 3; ++c) ++h[c][in[3 * i + c]];
  }
  return h;
}

// Image.blend(a, b, alpha) for one value: a + alpha (b - a) in float32,
// truncated toward zero and clamped, as Pillow's Blend.c computes it.
// The clamp is written with min and max (the same result as Pillow's
// comparisons) so that loops over it vectorize.
inline uint8_t Blend(int a, int b, float alpha) {
  const float t = static_cast<float>(a) + alpha * static_cast<float>(b - a);
  return static_cast<uint8_t>(static_cast<int>(std::min(std::max(t, 0.0f), 255.0f)));
}

// Blending every value with the constant `a`.
Lut BlendLut(int a, float alpha) {
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = Blend(a, v, alpha);
  return lut;
}

inline uint8_t Clip8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Pillow's RGB -> HSV (Convert.c, "following colorsys.py"); the float and
// double steps are Pillow's, which decide the truncations.
void RgbToHsv(const uint8_t* rgb, uint8_t* hsv) {
  const uint8_t r = rgb[0], g = rgb[1], b = rgb[2];
  const uint8_t maxc = std::max({r, g, b}), minc = std::min({r, g, b});
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = hsv[1] = 0;
    return;
  }
  const float cr = static_cast<float>(maxc - minc);
  const float s = cr / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / cr;
  const float gc = static_cast<float>(maxc - g) / cr;
  const float bc = static_cast<float>(maxc - b) / cr;
  float h;
  if (r == maxc) {
    h = bc - gc;
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + rc - bc);
  } else {
    h = static_cast<float>(4.0 + gc - rc);
  }
  h = static_cast<float>(std::fmod(h / 6.0 + 1.0, 1.0));
  hsv[0] = Clip8(static_cast<int>(h * 255.0));
  hsv[1] = Clip8(static_cast<int>(s * 255.0));
}

// Pillow's HSV -> RGB (Convert.c).
void HsvToRgb(const uint8_t* hsv, uint8_t* rgb) {
  const uint8_t h = hsv[0], s = hsv[1], v = hsv[2];
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const int i = static_cast<int>(std::floor(static_cast<float>(h) * 6.0 / 255.0));
  const float f = static_cast<float>(static_cast<float>(h) * 6.0 / 255.0 - static_cast<float>(i));
  const float fs = static_cast<float>(static_cast<float>(s) / 255.0);
  const float fv = static_cast<float>(v);
  const uint8_t p = Clip8(static_cast<int>(std::round(fv * (1.0 - fs))));
  const uint8_t q = Clip8(static_cast<int>(std::round(fv * (1.0 - fs * f))));
  const uint8_t t = Clip8(static_cast<int>(std::round(fv * (1.0 - fs * (1.0 - f)))));
  const uint8_t table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  std::memcpy(rgb, table[i % 6], 3);
}

// _get_gaussian_kernel1d in float32: exp(-0.5 (x / sigma)^2) at the integer
// offsets, divided by its sum.
std::array<double, kMaxGaussianKernel> GaussianKernel(int size, double sigma) {
  const float s = static_cast<float>(sigma);
  std::array<float, kMaxGaussianKernel> pdf;
  float sum = 0;
  for (int i = 0; i < size; ++i) {
    const float x = static_cast<float>(i - (size - 1) / 2) / s;
    pdf[i] = std::exp(-0.5f * (x * x));
    sum += pdf[i];
  }
  std::array<double, kMaxGaussianKernel> kernel;
  for (int i = 0; i < size; ++i) kernel[i] = pdf[i] / sum;
  return kernel;
}

}  // namespace

void ToGrayscale(const uint8_t* in, uint8_t* out, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, in += 3, out += 3) {
    out[0] = out[1] = out[2] = Luma(in);
  }
}

void AdjustBrightness(const uint8_t* in, uint8_t* out, size_t pixels, double factor) {
  ApplyLut(in, out, pixels, BlendLut(0, static_cast<float>(factor)));
}

void AdjustContrast(const uint8_t* in, uint8_t* out, size_t pixels, double factor) {
  // ImageStat's mean of the luma, rounded as int(mean + 0.5).
  uint64_t sum = 0;
  for (size_t i = 0; i < pixels; ++i) sum += Luma(in + 3 * i);
  const double mean = pixels == 0 ? 0 : static_cast<double>(sum) / static_cast<double>(pixels);
  ApplyLut(in, out, pixels, BlendLut(static_cast<int>(mean + 0.5), static_cast<float>(factor)));
}

void AdjustSaturation(const uint8_t* in, uint8_t* out, size_t pixels, double factor) {
  const float alpha = static_cast<float>(factor);
  for (size_t i = 0; i < pixels; ++i, in += 3, out += 3) {
    const int l = Luma(in);
    const uint8_t r = in[0], g = in[1], b = in[2];
    out[0] = Blend(l, r, alpha);
    out[1] = Blend(l, g, alpha);
    out[2] = Blend(l, b, alpha);
  }
}

void AdjustHue(const uint8_t* in, uint8_t* out, size_t pixels, double factor) {
  // NumPy's uint8(x) of a float: truncated toward zero, then modulo 256.
  const auto shift = static_cast<uint8_t>(static_cast<int>(factor * 255));
  for (size_t i = 0; i < pixels; ++i, in += 3, out += 3) {
    uint8_t hsv[3];
    RgbToHsv(in, hsv);
    hsv[0] = static_cast<uint8_t>(hsv[0] + shift);
    HsvToRgb(hsv, out);
  }
}

void AdjustSharpness(const uint8_t* in, uint8_t* out, int height, int width, double factor) {
  const float alpha = static_cast<float>(factor);
  const size_t row = static_cast<size_t>(width) * 3;
  // Pillow filters nothing in an image under 3x3, and copies its border.
  auto blend_row_unfiltered = [&](int y) {
    for (size_t i = 0; i < row; ++i)
      out[y * row + i] = Blend(in[y * row + i], in[y * row + i], alpha);
  };
  if (height < 3 || width < 3) {
    for (int y = 0; y < height; ++y) blend_row_unfiltered(y);
    return;
  }
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  blend_row_unfiltered(0);
  blend_row_unfiltered(height - 1);
  for (int y = 1; y < height - 1; ++y) {
    const uint8_t* above = in + (y - 1) * row;
    const uint8_t* mid = in + y * row;
    const uint8_t* below = in + (y + 1) * row;
    uint8_t* o = out + y * row;
    for (int c = 0; c < 3; ++c) {
      o[c] = mid[c];
      o[row - 3 + c] = mid[row - 3 + c];
    }
    for (size_t i = 3; i < row - 3; ++i) {
      // Pillow's order: the row below, this row, the row above, each summed
      // left to right in float32, plus 0.5 to round. The sum lies in
      // [0.5, 255.5], so truncation alone is Pillow's clip8.
      float ss = 0.5f;
      ss += static_cast<float>(below[i - 3]) * k1 + static_cast<float>(below[i]) * k1 +
            static_cast<float>(below[i + 3]) * k1;
      ss += static_cast<float>(mid[i - 3]) * k1 + static_cast<float>(mid[i]) * k5 +
            static_cast<float>(mid[i + 3]) * k1;
      ss += static_cast<float>(above[i - 3]) * k1 + static_cast<float>(above[i]) * k1 +
            static_cast<float>(above[i + 3]) * k1;
      o[i] = Blend(static_cast<int>(ss), mid[i], alpha);
    }
  }
}

void Posterize(const uint8_t* in, uint8_t* out, size_t pixels, int bits) {
  const int mask = ~((1 << (8 - bits)) - 1);
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
  ApplyLut(in, out, pixels, lut);
}

void Solarize(const uint8_t* in, uint8_t* out, size_t pixels, double threshold) {
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v < threshold ? v : 255 - v);
  ApplyLut(in, out, pixels, lut);
}

void Autocontrast(const uint8_t* in, uint8_t* out, size_t pixels) {
  const std::array<Histogram, 3> hist = Histograms(in, pixels);
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (lo < 255 && hist[c][lo] == 0) ++lo;
    while (hi > 0 && hist[c][hi] == 0) --hi;
    for (int v = 0; v < 256; ++v) {
      if (hi <= lo) {
        luts[c][v] = static_cast<uint8_t>(v);
        continue;
      }
      const double scale = 255.0 / (hi - lo);
      const double offset = -lo * scale;
      luts[c][v] = Clip8(static_cast<int>(v * scale + offset));
    }
  }
  ApplyLuts(in, out, pixels, luts);
}

void Equalize(const uint8_t* in, uint8_t* out, size_t pixels) {
  const std::array<Histogram, 3> hist = Histograms(in, pixels);
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    // The step is the pixel count without the last occupied bin, over 255.
    uint64_t total = 0, last = 0;
    int occupied = 0;
    for (uint64_t n : hist[c]) {
      if (n == 0) continue;
      total += n;
      last = n;
      ++occupied;
    }
    const uint64_t step = occupied <= 1 ? 0 : (total - last) / 255;
    uint64_t n = step / 2;
    for (int v = 0; v < 256; ++v) {
      // Pillow clips table entries to 8 bits when it applies them.
      luts[c][v] = step == 0 ? static_cast<uint8_t>(v)
                             : static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
      n += hist[c][v];
    }
  }
  ApplyLuts(in, out, pixels, luts);
}

void GaussianBlur(const uint8_t* in, uint8_t* out, int height, int width, int kx, int ky,
                  double sigma_x, double sigma_y, Buffer* scratch) {
  const std::array<double, kMaxGaussianKernel> wx = GaussianKernel(kx, sigma_x);
  const std::array<double, kMaxGaussianKernel> wy = GaussianKernel(ky, sigma_y);
  const size_t row = static_cast<size_t>(width) * 3;
  const size_t n_cols = static_cast<size_t>(width) + kx - 1;
  const size_t n_rows = static_cast<size_t>(height) + ky - 1;
  // Scratch: the horizontal pass in float32, then the reflected column
  // offsets and row numbers.
  uint8_t* mem = scratch->Reserve(row * height * sizeof(float) + (n_cols + n_rows) * sizeof(int));
  auto* tmp = reinterpret_cast<float*>(mem);
  int* cols = reinterpret_cast<int*>(tmp + row * height);
  int* rows = cols + n_cols;
  for (size_t i = 0; i < n_cols; ++i)
    cols[i] = 3 * PadIndex(static_cast<int>(i), kx / 2, width, PadMode::kReflect);
  for (size_t i = 0; i < n_rows; ++i)
    rows[i] = PadIndex(static_cast<int>(i), ky / 2, height, PadMode::kReflect);

  for (int y = 0; y < height; ++y) {
    const uint8_t* src = in + y * row;
    float* dst = tmp + y * row;
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (int j = 0; j < kx; ++j) acc += wx[j] * src[cols[x + j] + c];
        dst[3 * x + c] = static_cast<float>(acc);
      }
    }
  }
  for (int y = 0; y < height; ++y) {
    uint8_t* dst = out + y * row;
    for (size_t i = 0; i < row; ++i) {
      double acc = 0;
      for (int j = 0; j < ky; ++j) acc += wy[j] * tmp[rows[y + j] * row + i];
      dst[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(acc), 0.0, 255.0));
    }
  }
}

}  // namespace prepflow
