#include "pipeline/ops/audio/fft.h"

#include <cmath>

namespace prepflow {
namespace {

using Lanes = float __attribute__((vector_size(4 * LaneRealFft::kLanes)));

Lanes Splat(float v) {
  Lanes out;
  for (int j = 0; j < LaneRealFft::kLanes; ++j) out[j] = v;
  return out;
}

}  // namespace

LaneRealFft::LaneRealFft(int n) : half_(n / 2) {
  int bits = 0;
  while ((1 << bits) < half_) ++bits;
  reversed_.resize(half_);
  for (int k = 0; k < half_; ++k) {
    int r = 0;
    for (int b = 0; b < bits; ++b) r |= ((k >> b) & 1) << (bits - 1 - b);
    reversed_[k] = r;
  }
  for (int k = 0; k < half_ / 2; ++k) {
    const double a = -2 * M_PI * k / half_;
    tw_re_.push_back(static_cast<float>(std::cos(a)));
    tw_im_.push_back(static_cast<float>(std::sin(a)));
  }
  // Per span 4, 8, ..., half_: its twiddles (tw_ entries k x half_ / span)
  // in every lane, re and im interleaved.
  for (int span = 4; span <= half_; span *= 2) {
    for (int k = 0; k < span / 2; ++k) {
      for (const float v : {tw_re_[k * (half_ / span)], tw_im_[k * (half_ / span)]}) {
        for (int j = 0; j < kLanes; ++j) lane_twiddles_.push_back(v);
      }
    }
  }
  for (int k = 0; k <= half_; ++k) {
    const double a = -2 * M_PI * k / n;
    post_re_.push_back(static_cast<float>(std::cos(a)));
    post_im_.push_back(static_cast<float>(std::sin(a)));
  }
}

void LaneRealFft::Power(const float* const* frames, int count, float* const* power) const {
  const int m = half_;
  thread_local std::vector<Lanes> re_buffer, im_buffer;
  re_buffer.resize(m);
  im_buffer.resize(m);
  Lanes* __restrict re = re_buffer.data();
  Lanes* __restrict im = im_buffer.data();
  // z[t] = x[2t] + i x[2t + 1], stored bit-reversed, one frame a lane.
  for (int t = 0; t < m; ++t) {
    Lanes a = Splat(0), b = Splat(0);
    for (int j = 0; j < count; ++j) {
      a[j] = frames[j][2 * t];
      b[j] = frames[j][2 * t + 1];
    }
    re[reversed_[t]] = a;
    im[reversed_[t]] = b;
  }
  // Radix-2 butterflies, spans 2, 4, ..., m; span 2's twiddle is 1.
  for (int a = 0; a < m; a += 2) {
    const Lanes tr = re[a + 1], ti = im[a + 1];
    re[a + 1] = re[a] - tr;
    im[a + 1] = im[a] - ti;
    re[a] = re[a] + tr;
    im[a] = im[a] + ti;
  }
  const Lanes* twiddles = reinterpret_cast<const Lanes*>(lane_twiddles_.data());
  for (int span = 4; span <= m; span *= 2) {
    const int half = span / 2;
    // This span's twiddles, exp(-2 pi i k / span) for k < half, each in
    // every lane (re then im), follow the previous span's.
    const Lanes* w = twiddles + 2 * (half - 2);
    for (int i = 0; i < m; i += span) {
      Lanes* __restrict ra = re + i;
      Lanes* __restrict ia = im + i;
      Lanes* __restrict rb = re + i + half;
      Lanes* __restrict ib = im + i + half;
      for (int k = 0; k < half; ++k) {
        const Lanes wr = w[2 * k], wi = w[2 * k + 1];
        const Lanes tr = rb[k] * wr - ib[k] * wi, ti = rb[k] * wi + ib[k] * wr;
        rb[k] = ra[k] - tr;
        ib[k] = ia[k] - ti;
        ra[k] = ra[k] + tr;
        ia[k] = ia[k] + ti;
      }
    }
  }
  // X[k] = E[k] + W^k O[k]: E = (Z[k] + conj Z[m - k]) / 2 and
  // O = (Z[k] - conj Z[m - k]) / 2i, with Z[m] = Z[0].
  const Lanes half_lane = Splat(0.5f);
  for (int k = 0; k <= m; ++k) {
    const int p = k % m, q = (m - k) % m;
    const Lanes er = (re[p] + re[q]) * half_lane, ei = (im[p] - im[q]) * half_lane;
    const Lanes orr = (im[p] + im[q]) * half_lane, oi = (re[q] - re[p]) * half_lane;
    const Lanes wr = Splat(post_re_[k]), wi = Splat(post_im_[k]);
    const Lanes xr = er + (wr * orr - wi * oi), xi = ei + (wr * oi + wi * orr);
    const Lanes sq = xr * xr + xi * xi;
    for (int j = 0; j < count; ++j) power[j][k] = sq[j];
  }
}

}  // namespace prepflow
