// Colour kernels on 8-bit RGB images (HWC, rows packed), for the colour ops.
//
// torchvision applies its colour transforms to PIL images, so what users train
// on is Pillow's arithmetic: ImageEnhance blends in float32 and truncates,
// HSV round trips through Pillow's own conversion, ImageOps builds 256-entry
// tables. Each kernel here does that arithmetic (the same operations, the same
// float widths, the same truncations), so its output equals torchvision's bit
// for bit; tests/python/test_parity.py holds each one to that. GaussianBlur is
// the exception: torchvision blurs in float32 with torch's conv2d, whose
// summation order is its own, so a value may differ by one level.
//
// Kernels marked "in place" accept out == in. None allocates except
// GaussianBlur, which uses the caller's scratch buffer. Thread-safe: pure
// functions.
#ifndef PREPFLOW_PIPELINE_OPS_IMAGE_COLOR_H_
#define PREPFLOW_PIPELINE_OPS_IMAGE_COLOR_H_

#include <cstddef>
#include <cstdint>

#include "pipeline/core/sample.h"

namespace prepflow {

// Pillow's convert('L') (ITU-R 601-2 luma in 16-bit fixed point, rounded).
inline uint8_t Luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

// The luma of every pixel in all three channels (Grayscale(3)). In place.
void ToGrayscale(const uint8_t* in, uint8_t* out, size_t pixels);

// ImageEnhance.Brightness: a blend with black. In place.
void AdjustBrightness(const uint8_t* in, uint8_t* out, size_t pixels, double factor);
// ImageEnhance.Contrast: a blend with the image's mean luma, rounded. In place.
void AdjustContrast(const uint8_t* in, uint8_t* out, size_t pixels, double factor);
// ImageEnhance.Color: a blend with each pixel's luma. In place.
void AdjustSaturation(const uint8_t* in, uint8_t* out, size_t pixels, double factor);
// torchvision's adjust_hue on PIL: to Pillow's 8-bit HSV, the hue byte plus
// uint8(factor * 255) modulo 256, back to RGB. REQUIRES: -0.5 <= factor <= 0.5.
// In place.
void AdjustHue(const uint8_t* in, uint8_t* out, size_t pixels, double factor);
// ImageEnhance.Sharpness: a blend with Pillow's SMOOTH filter (3x3, weights
// 1 1 1 / 1 5 1 / 1 1 1 over 13; the border rows and columns unfiltered).
// Not in place.
void AdjustSharpness(const uint8_t* in, uint8_t* out, int height, int width, double factor);

// ImageOps.posterize: keeps the top `bits` bits. REQUIRES: 0 <= bits <= 8. In place.
void Posterize(const uint8_t* in, uint8_t* out, size_t pixels, int bits);
// ImageOps.solarize: values >= threshold become 255 - value. In place.
void Solarize(const uint8_t* in, uint8_t* out, size_t pixels, double threshold);
// ImageOps.autocontrast (no cutoff): each channel stretched so its lowest
// value becomes 0 and its highest 255. In place.
void Autocontrast(const uint8_t* in, uint8_t* out, size_t pixels);
// ImageOps.equalize: each channel's histogram equalized. In place.
void Equalize(const uint8_t* in, uint8_t* out, size_t pixels);

// The largest Gaussian kernel side GaussianBlur takes (sigma up to ~40).
inline constexpr int kMaxGaussianKernel = 255;

// torchvision's gaussian_blur: a kx x ky Gaussian (normalised, as
// _get_gaussian_kernel1d builds it) with reflected borders (no edge repeated),
// rounded half to even. Separable, accumulated in double. REQUIRES: kx, ky
// odd, in [1, kMaxGaussianKernel]; sigma_x, sigma_y > 0. Not in place; `scratch` holds a
// float copy of one pass.
void GaussianBlur(const uint8_t* in, uint8_t* out, int height, int width, int kx, int ky,
                  double sigma_x, double sigma_y, Buffer* scratch);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_IMAGE_COLOR_H_
