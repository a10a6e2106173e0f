#include "pipeline/ops/image/geometry.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace prepflow {
namespace {

using Fill3 = std::array<uint8_t, 3>;

// Pillow's COORD and FLOOR (Geometry.c): COORD sends every negative
// coordinate to -1; FLOOR truncates non-negatives. Both saturate where
// Pillow's casts would overflow (a hostile shear or scale maps pixels past
// any int) and send NaN outside the image; the pixel is then the fill.
constexpr double kIntLimit = 2147483647.0;
inline int Coord(double v) {
  if (!(v >= 0.0)) return -1;  // negative or NaN
  return v < kIntLimit ? static_cast<int>(v) : INT_MAX;
}
inline int Floor(double v) {
  if (!(v > -kIntLimit)) return INT_MIN;  // very negative or NaN
  if (v >= kIntLimit) return INT_MAX;
  return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v);
}

void FillAll(uint8_t* out, size_t pixels, const Fill3& fill) {
  for (size_t i = 0; i < pixels; ++i) std::memcpy(out + 3 * i, fill.data(), 3);
}

inline const uint8_t* Pixel(const uint8_t* in, int w, int x, int y) {
  return in + (static_cast<size_t>(y) * w + x) * 3;
}

// ImagingScaleAffine: no rotation or shear terms; positions accumulate a0 and
// a4 from the first pixel centre, as Pillow's loop does.
void ScaleAffine(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                 const AffineMatrix& a) {
  const double x_start = a[2] + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5;
  for (int y = 0; y < out_h; ++y, yo += a[4]) {
    const int yi = Coord(yo);
    if (yi < 0 || yi >= in_h) continue;
    double xo = x_start;
    for (int x = 0; x < out_w; ++x, xo += a[0]) {
      const int xi = Coord(xo);
      if (xi >= 0 && xi < in_w)
        std::memcpy(out + (static_cast<size_t>(y) * out_w + x) * 3, Pixel(in, in_w, xi, yi), 3);
    }
  }
}

bool FitsFixedPoint(const AffineMatrix& a, int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
         std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// affine_fixed: the walk in 16.16 fixed point.
void FixedAffine(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                 const AffineMatrix& a) {
  auto fix = [](double v) { return Floor(v * 65536.0 + 0.5); };
  const int a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
  int a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  int a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  for (int y = 0; y < out_h; ++y, a2 += a1, a5 += a4) {
    int xx = a2, yy = a5;
    uint8_t* row = out + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x, xx += a0, yy += a3) {
      const int xi = xx >> 16, yi = yy >> 16;  // arithmetic shifts: floor
      if (xi >= 0 && xi < in_w && yi >= 0 && yi < in_h) {
        std::memcpy(row + 3 * x, Pixel(in, in_w, xi, yi), 3);
      }
    }
  }
}

// The float walk Pillow falls back to when coordinates leave 16.16's range.
void FloatAffine(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                 const AffineMatrix& a) {
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < out_h; ++y, xo += a[1], yo += a[4]) {
    double xx = xo, yy = yo;
    uint8_t* row = out + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x, xx += a[0], yy += a[3]) {
      const int xi = Coord(xx), yi = Coord(yy);
      if (xi >= 0 && xi < in_w && yi >= 0 && yi < in_h) {
        std::memcpy(row + 3 * x, Pixel(in, in_w, xi, yi), 3);
      }
    }
  }
}

inline int Clip(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

// bilinear_filter32RGB: false when (x, y) is outside the image.
bool Bilinear(const uint8_t* in, int h, int w, double x_in, double y_in, uint8_t* out) {
  if (!(x_in >= 0.0 && x_in < w && y_in >= 0.0 && y_in < h)) return false;  // NaN too
  x_in -= 0.5;
  y_in -= 0.5;
  const int x = Floor(x_in), y = Floor(y_in);
  const double dx = x_in - x, dy = y_in - y;
  const int x0 = Clip(x, w), x1 = Clip(x + 1, w);
  const uint8_t* r0 = in + static_cast<size_t>(Clip(y, h)) * w * 3;
  const bool has_r1 = y + 1 >= 0 && y + 1 < h;
  const uint8_t* r1 = in + static_cast<size_t>(has_r1 ? y + 1 : 0) * w * 3;
  for (int b = 0; b < 3; ++b) {
    const int p0 = r0[3 * x0 + b], p1 = r0[3 * x1 + b];
    double v1 = p0 + (p1 - p0) * dx;
    double v2 = v1;
    if (has_r1) {
      const int q0 = r1[3 * x0 + b], q1 = r1[3 * x1 + b];
      v2 = q0 + (q1 - q0) * dx;
    }
    v1 = v1 + (v2 - v1) * dy;
    out[b] = static_cast<uint8_t>(v1);
  }
  return true;
}

inline double Cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// bicubic_filter32RGB: false when (x, y) is outside the image.
bool Bicubic(const uint8_t* in, int h, int w, double x_in, double y_in, uint8_t* out) {
  if (!(x_in >= 0.0 && x_in < w && y_in >= 0.0 && y_in < h)) return false;  // NaN too
  x_in -= 0.5;
  y_in -= 0.5;
  int x = Floor(x_in), y = Floor(y_in);
  const double dx = x_in - x, dy = y_in - y;
  --x;
  --y;
  const int xs[4] = {Clip(x, w), Clip(x + 1, w), Clip(x + 2, w), Clip(x + 3, w)};
  for (int b = 0; b < 3; ++b) {
    double v[4];
    for (int k = 0; k < 4; ++k) {
      // The first row is clipped into the image; a later row outside it
      // repeats the row before.
      const int row = k == 0 ? Clip(y, h) : y + k;
      if (k > 0 && (row < 0 || row >= h)) {
        v[k] = v[k - 1];
        continue;
      }
      const uint8_t* r = in + static_cast<size_t>(row) * w * 3 + b;
      v[k] = Cubic(r[3 * xs[0]], r[3 * xs[1]], r[3 * xs[2]], r[3 * xs[3]], dx);
    }
    const double value = Cubic(v[0], v[1], v[2], v[3], dy);
    out[b] = value <= 0.0 ? 0 : value >= 255.0 ? 255 : static_cast<uint8_t>(value);
  }
  return true;
}

// ImagingGenericTransform with affine_transform: each output pixel centre
// (x + 0.5, y + 0.5) mapped to (a0 x + a1 y + a2, a3 x + a4 y + a5), then
// filtered. The row's products are hoisted (each is the same value wherever
// it is computed); the sums stay in Pillow's order.
template <bool kBicubic>
void FilteredAffine(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                    const AffineMatrix& a) {
  for (int y = 0; y < out_h; ++y) {
    const double by = a[1] * (y + 0.5), ey = a[4] * (y + 0.5);
    uint8_t* row = out + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const double xx = a[0] * (x + 0.5) + by + a[2];
      const double yy = a[3] * (x + 0.5) + ey + a[5];
      if (kBicubic) {
        Bicubic(in, in_h, in_w, xx, yy, row + 3 * x);  // outside: the fill stays
      } else {
        Bilinear(in, in_h, in_w, xx, yy, row + 3 * x);
      }
    }
  }
}

// ImagingGenericTransform with perspective_transform.
void FilteredPerspective(const uint8_t* in, int h, int w, uint8_t* out, const PerspectiveCoeffs& a,
                         Resample resample) {
  for (int y = 0; y < h; ++y) {
    uint8_t* row = out + static_cast<size_t>(y) * w * 3;
    const double yin = y + 0.5;
    for (int x = 0; x < w; ++x) {
      const double xin = x + 0.5;
      const double d = a[6] * xin + a[7] * yin + 1;
      const double xx = (a[0] * xin + a[1] * yin + a[2]) / d;
      const double yy = (a[3] * xin + a[4] * yin + a[5]) / d;
      if (resample == Resample::kBicubic) {
        Bicubic(in, h, w, xx, yy, row + 3 * x);  // outside: the fill stays
      } else if (resample == Resample::kBilinear) {
        Bilinear(in, h, w, xx, yy, row + 3 * x);
      } else {
        const int xi = Coord(xx), yi = Coord(yy);
        if (xi >= 0 && xi < w && yi >= 0 && yi < h)
          std::memcpy(row + 3 * x, Pixel(in, w, xi, yi), 3);
      }
    }
  }
}

// A map that only moves the image by whole pixels: every filter then reads
// one source pixel with zero weights on the others, so each is a copy.
bool IsWholePixelShift(const AffineMatrix& m) {
  return m[0] == 1 && m[1] == 0 && m[3] == 0 && m[4] == 1 && m[2] == std::floor(m[2]) &&
         m[5] == std::floor(m[5]) && std::fabs(m[2]) < (1 << 30) && std::fabs(m[5]) < (1 << 30);
}

void ShiftedCopy(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w, int tx,
                 int ty) {
  for (int y = 0; y < out_h; ++y) {
    const int sy = y + ty;
    if (sy < 0 || sy >= in_h) continue;
    const int x0 = std::max(0, -tx), x1 = std::min(out_w, in_w - tx);
    if (x0 >= x1) continue;
    std::memcpy(out + (static_cast<size_t>(y) * out_w + x0) * 3, Pixel(in, in_w, x0 + tx, sy),
                static_cast<size_t>(x1 - x0) * 3);
  }
}

// Python's round(v, 15): the nearest double to v's 15-decimal rounding.
double Round15(double v) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.15f", v);
  return std::strtod(text, nullptr);
}

// Python's float % for a positive divisor: the result is in [0, m).
double PyMod(double v, double m) {
  double r = std::fmod(v, m);
  if (r != 0 && r < 0) r += m;
  return r == 0 ? 0.0 : r;
}

// Python's math.radians.
inline double Radians(double degrees) { return degrees * (M_PI / 180.0); }

}  // namespace

void PerspectiveTransform(const uint8_t* in, int h, int w, uint8_t* out, const PerspectiveCoeffs& c,
                          Resample resample, const std::array<uint8_t, 3>& fill) {
  FillAll(out, static_cast<size_t>(h) * w, fill);
  FilteredPerspective(in, h, w, out, c, resample);
}

bool PerspectiveCoefficients(const std::array<std::array<int, 2>, 4>& startpoints,
                             const std::array<std::array<int, 2>, 4>& endpoints,
                             PerspectiveCoeffs* c) {
  // The rows _get_perspective_coeffs builds, solved by Gaussian elimination
  // with partial pivoting (the system is square: least squares is exact).
  double m[8][9];
  for (int i = 0; i < 4; ++i) {
    const double x = endpoints[i][0], y = endpoints[i][1];
    const double u = startpoints[i][0], v = startpoints[i][1];
    const double r0[9] = {x, y, 1, 0, 0, 0, -u * x, -u * y, u};
    const double r1[9] = {0, 0, 0, x, y, 1, -v * x, -v * y, v};
    std::copy(r0, r0 + 9, m[2 * i]);
    std::copy(r1, r1 + 9, m[2 * i + 1]);
  }
  for (int col = 0; col < 8; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 8; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    if (!(std::fabs(m[pivot][col]) > 1e-12)) return false;
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < 8; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int k = col; k < 9; ++k) m[r][k] -= f * m[col][k];
    }
  }
  for (int i = 0; i < 8; ++i) (*c)[i] = static_cast<float>(m[i][8] / m[i][i]);
  return true;
}

int PadIndex(int i, int before, int n, PadMode mode) {
  const int j = i - before;
  if (j >= 0 && j < n) return j;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return j < 0 ? 0 : n - 1;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int period = 2 * (n - 1);
      int k = j % period;
      if (k < 0) k += period;
      return k < n ? k : period - k;
    }
    case PadMode::kSymmetric: {
      const int period = 2 * n;
      int k = j % period;
      if (k < 0) k += period;
      return k < n ? k : period - 1 - k;
    }
  }
  return -1;
}

void Remap(const uint8_t* in, int in_width, const int* row_map, int rows, const int* col_map,
           int cols, const std::array<uint8_t, 3>& fill, uint8_t* out) {
  for (int y = 0; y < rows; ++y) {
    uint8_t* o = out + static_cast<size_t>(y) * cols * 3;
    if (row_map[y] < 0) {
      FillAll(o, cols, fill);
      continue;
    }
    const uint8_t* r = in + static_cast<size_t>(row_map[y]) * in_width * 3;
    for (int x = 0; x < cols; ++x) {
      std::memcpy(o + 3 * x, col_map[x] < 0 ? fill.data() : r + 3 * col_map[x], 3);
    }
  }
}

void AffineTransform(const uint8_t* in, int in_h, int in_w, uint8_t* out, int out_h, int out_w,
                     const AffineMatrix& m, Resample resample, const std::array<uint8_t, 3>& fill) {
  FillAll(out, static_cast<size_t>(out_h) * out_w, fill);
  if (IsWholePixelShift(m)) {
    ShiftedCopy(in, in_h, in_w, out, out_h, out_w, static_cast<int>(m[2]), static_cast<int>(m[5]));
  } else if (resample != Resample::kNearest) {
    if (resample == Resample::kBicubic) {
      FilteredAffine<true>(in, in_h, in_w, out, out_h, out_w, m);
    } else {
      FilteredAffine<false>(in, in_h, in_w, out, out_h, out_w, m);
    }
  } else if (m[1] == 0 && m[3] == 0) {
    ScaleAffine(in, in_h, in_w, out, out_h, out_w, m);
  } else if (FitsFixedPoint(m, 0, 0) && FitsFixedPoint(m, out_w, out_h) &&
             FitsFixedPoint(m, 0, out_h) && FitsFixedPoint(m, out_w, 0)) {
    FixedAffine(in, in_h, in_w, out, out_h, out_w, m);
  } else {
    FloatAffine(in, in_h, in_w, out, out_h, out_w, m);
  }
}

RotationPlan PlanRotation(double degrees, int w, int h, bool expand,
                          const std::pair<double, double>* center) {
  RotationPlan plan;
  plan.out_w = w;
  plan.out_h = h;
  const double angle = PyMod(degrees, 360.0);
  if (center == nullptr) {
    if (angle == 0) return plan;
    if (angle == 180) {
      plan.kind = RotationPlan::kRotate180;
      return plan;
    }
    if ((angle == 90 || angle == 270) && (expand || w == h)) {
      plan.kind = angle == 90 ? RotationPlan::kRotate90 : RotationPlan::kRotate270;
      std::swap(plan.out_w, plan.out_h);
      return plan;
    }
  }
  plan.kind = RotationPlan::kAffine;
  const double cx = center ? center->first : w / 2.0, cy = center ? center->second : h / 2.0;
  const double r = -Radians(angle);
  AffineMatrix& m = plan.matrix;
  m = {Round15(std::cos(r)),  Round15(std::sin(r)), 0.0,
       Round15(-std::sin(r)), Round15(std::cos(r)), 0.0};
  auto apply = [&m](double x, double y, double* ox, double* oy) {
    *ox = m[0] * x + m[1] * y + m[2];
    *oy = m[3] * x + m[4] * y + m[5];
  };
  double tx, ty;
  apply(-cx - 0, -cy - 0, &tx, &ty);
  m[2] = tx + cx;
  m[5] = ty + cy;
  if (expand) {
    double min_x = HUGE_VAL, max_x = -HUGE_VAL, min_y = HUGE_VAL, max_y = -HUGE_VAL;
    for (auto [x, y] : {std::pair{0, 0}, std::pair{w, 0}, std::pair{w, h}, std::pair{0, h}}) {
      double px, py;
      apply(x, y, &px, &py);
      min_x = std::min(min_x, px), max_x = std::max(max_x, px);
      min_y = std::min(min_y, py), max_y = std::max(max_y, py);
    }
    const int nw = static_cast<int>(std::ceil(max_x) - std::floor(min_x));
    const int nh = static_cast<int>(std::ceil(max_y) - std::floor(min_y));
    apply(-(nw - w) / 2.0, -(nh - h) / 2.0, &tx, &ty);
    m[2] = tx;
    m[5] = ty;
    plan.out_w = nw;
    plan.out_h = nh;
  }
  return plan;
}

void Rotate(const RotationPlan& plan, const uint8_t* in, int h, int w, uint8_t* out,
            Resample resample, const std::array<uint8_t, 3>& fill) {
  if (plan.kind == RotationPlan::kAffine) {
    AffineTransform(in, h, w, out, plan.out_h, plan.out_w, plan.matrix, resample, fill);
    return;
  }
  // Pillow's transposes: ROTATE_90 turns counter-clockwise.
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int oy = y, ox = x;
      switch (plan.kind) {
        case RotationPlan::kRotate90:
          oy = w - 1 - x, ox = y;
          break;
        case RotationPlan::kRotate180:
          oy = h - 1 - y, ox = w - 1 - x;
          break;
        case RotationPlan::kRotate270:
          oy = x, ox = h - 1 - y;
          break;
        default:
          break;
      }
      std::memcpy(out + (static_cast<size_t>(oy) * plan.out_w + ox) * 3, Pixel(in, w, x, y), 3);
    }
  }
}

AffineMatrix InverseAffineMatrix(double cx, double cy, double degrees, double tx, double ty,
                                 double scale, double shear_x, double shear_y) {
  const double rot = Radians(degrees), sx = Radians(shear_x), sy = Radians(shear_y);
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  AffineMatrix m = {d / scale, -b / scale, 0.0 / scale, -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

}  // namespace prepflow
