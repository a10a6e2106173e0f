// Geometry kernels on 8-bit RGB images (HWC, rows packed), for the geometry
// ops: padding, and Pillow's affine resampling that torchvision's rotate and
// affine call on PIL images.
//
// As with color.h, each kernel does Pillow's arithmetic (its fixed-point
// nearest-neighbour walk, its bilinear and bicubic filters in double with
// truncation, its fill), so results equal torchvision's bit for bit; and the
// matrices are computed with the same libm calls in the same order as
// torchvision's _get_inverse_affine_matrix and Pillow's Image.rotate.
// Thread-safe: pure functions.
#ifndef PREPFLOW_PIPELINE_OPS_IMAGE_GEOMETRY_H_
#define PREPFLOW_PIPELINE_OPS_IMAGE_GEOMETRY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace prepflow {

// How a padded axis maps back to the image (NumPy's pad modes, which
// torchvision's PIL path uses): -1 for the fill value.
enum class PadMode { kConstant, kEdge, kReflect, kSymmetric };

// The source index along an axis of length n (>= 1) for index i of the
// padded axis whose first n positions start at `before`.
int PadIndex(int i, int before, int n, PadMode mode);

// Writes rows x cols output pixels: pixel (y, x) is in[row_map[y]][col_map[x]],
// or `fill` where either map is -1. `in` has `in_width` pixels per row.
void Remap(const uint8_t* in, int in_width, const int* row_map, int rows, const int* col_map,
           int cols, const std::array<uint8_t, 3>& fill, uint8_t* out);

// Pillow's filters. Box, Hamming and Lanczos are resize filters only
// (PillowResize), as in Pillow, whose transforms refuse them.
enum class Resample { kNearest, kBilinear, kBicubic, kBox, kHamming, kLanczos };

// Pillow's AFFINE data: output pixel (x, y) samples the input at
// (a0 x + a1 y + a2, a3 x + a4 y + a5), pixel centres at +0.5.
using AffineMatrix = std::array<double, 6>;

// Image.transform((out_w, out_h), AFFINE, m, resample, fillcolor=fill) on an
// RGB image, with each of Pillow's paths: nearest uses its scale-only walk,
// its 16.16 fixed-point walk or (for coordinates past +-32768) its float
// walk; bilinear and bicubic its generic filters. Samples that fall outside
// the input are `fill`.
void AffineTransform(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                     const AffineMatrix& m, Resample resample, const std::array<uint8_t, 3>& fill);

// Image.resize((out_w, out_h), filter) on an RGB image, which
// torchvision's Resize and RandomResizedCrop call on PIL images: Pillow's
// separable antialiased filter (support widened by the scale when
// shrinking), its coefficients in 22-bit fixed point, the horizontal pass
// rounded to 8 bits before the vertical one. `in` rows are `in_stride`
// bytes apart (a crop's); `out` is packed. REQUIRES: resample is not
// kNearest, every size >= 1.
void PillowResize(const uint8_t* in, int in_h, int in_w, size_t in_stride, uint8_t* out, int out_h,
                  int out_w, Resample resample);

// Pillow's PERSPECTIVE data: output pixel (x, y) samples the input at
// ((a0 X + a1 Y + a2) / (a6 X + a7 Y + 1), (a3 X + a4 Y + a5) / (same)),
// X = x + 0.5, Y = y + 0.5.
using PerspectiveCoeffs = std::array<double, 8>;

// Image.transform((w, h), PERSPECTIVE, c, resample, fillcolor=fill) on a
// w x h RGB image: Pillow's generic transform with its nearest, bilinear or
// bicubic filter. Samples outside the input are `fill`.
void PerspectiveTransform(const uint8_t* in, int h, int w, uint8_t* out, const PerspectiveCoeffs& c,
                          Resample resample, const std::array<uint8_t, 3>& fill);

// torchvision's _get_perspective_coeffs(startpoints, endpoints): the c with
// which each endpoint maps to its startpoint, solved in double and rounded
// to float32 (torch solves the 8 x 8 system in float32). False when the
// corners make the system singular.
bool PerspectiveCoefficients(const std::array<std::array<int, 2>, 4>& startpoints,
                             const std::array<std::array<int, 2>, 4>& endpoints,
                             PerspectiveCoeffs* c);

// What Image.rotate(angle, expand=expand, center=center) does to a w x h
// image: without a center, a plain copy or transpose for multiples of 90
// degrees where Pillow takes that shortcut; else an affine transform into
// out_w x out_h about `center` ([x, y]; null: the image centre).
struct RotationPlan {
  enum Kind { kCopy, kRotate90, kRotate180, kRotate270, kAffine } kind = kCopy;
  int out_w = 0, out_h = 0;
  AffineMatrix matrix{};
};
RotationPlan PlanRotation(double degrees, int w, int h, bool expand,
                          const std::pair<double, double>* center = nullptr);
// Applies a plan to `in` (w x h); `out` holds out_w x out_h pixels.
void Rotate(const RotationPlan& plan, const uint8_t* in, int h, int w, uint8_t* out,
            Resample resample, const std::array<uint8_t, 3>& fill);

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
// shear) (inverted): the AFFINE data that rotates by `degrees`, translates by
// (tx, ty), scales and shears (degrees) about (cx, cy).
AffineMatrix InverseAffineMatrix(double cx, double cy, double degrees, double tx, double ty,
                                 double scale, double shear_x, double shear_y);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_IMAGE_GEOMETRY_H_
