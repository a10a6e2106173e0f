// LaneRealFft: the power spectrum of a real frame, as a DFT in double gives
// it, and the same floats in whichever lane a frame runs, beside whatever
// the other lanes hold.
#include "pipeline/ops/audio/fft.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace prepflow {
namespace {

std::vector<float> Frame(int n, uint32_t seed) {
  std::vector<float> x(n);
  uint32_t s = seed * 2654435761u + 1;
  for (int t = 0; t < n; ++t) {
    s = s * 1664525u + 1013904223u;
    x[t] = static_cast<float>(s >> 8) / (1 << 24) - 0.5f +
           0.3f * static_cast<float>(std::sin(0.37 * t * (1 + seed % 5)));
  }
  return x;
}

std::vector<double> DftPower(const std::vector<float>& x) {
  const int n = static_cast<int>(x.size());
  std::vector<double> p(n / 2 + 1);
  for (int k = 0; k <= n / 2; ++k) {
    double re = 0, im = 0;
    for (int t = 0; t < n; ++t) {
      re += x[t] * std::cos(2 * M_PI * k * t / n);
      im -= x[t] * std::sin(2 * M_PI * k * t / n);
    }
    p[k] = re * re + im * im;
  }
  return p;
}

TEST(LaneRealFft, PowerIsTheDftsAtEverySize) {
  for (const int n : {4, 8, 16, 64, 256, 512, 1024}) {
    const LaneRealFft fft(n);
    std::vector<std::vector<float>> frames, power;
    std::vector<const float*> in;
    std::vector<float*> out;
    for (int j = 0; j < LaneRealFft::kLanes; ++j) {
      frames.push_back(Frame(n, static_cast<uint32_t>(n + j)));
      power.emplace_back(n / 2 + 1);
    }
    for (int j = 0; j < LaneRealFft::kLanes; ++j) {
      in.push_back(frames[j].data());
      out.push_back(power[j].data());
    }
    fft.Power(in.data(), LaneRealFft::kLanes, out.data());
    for (int j = 0; j < LaneRealFft::kLanes; ++j) {
      const std::vector<double> want = DftPower(frames[j]);
      double peak = 0;
      for (const double v : want) peak = std::max(peak, v);
      for (int k = 0; k <= n / 2; ++k) {
        ASSERT_NEAR(power[j][k], want[k], 2e-6 * peak)
            << "n " << n << " lane " << j << " bin " << k;
      }
    }
  }
}

TEST(LaneRealFft, AFramesSpectrumIsTheSameInEveryLaneBesideAnything) {
  const int n = 512;
  const LaneRealFft fft(n);
  const std::vector<float> mine = Frame(n, 7);
  std::vector<float> alone(n / 2 + 1);
  const float* one[] = {mine.data()};
  float* alone_out[] = {alone.data()};
  fft.Power(one, 1, alone_out);
  for (int lane = 0; lane < LaneRealFft::kLanes; ++lane) {
    std::vector<std::vector<float>> frames, power;
    std::vector<const float*> in;
    std::vector<float*> out;
    for (int j = 0; j < LaneRealFft::kLanes; ++j) {
      frames.push_back(j == lane ? mine : Frame(n, static_cast<uint32_t>(100 + lane * 8 + j)));
      power.emplace_back(n / 2 + 1);
    }
    for (int j = 0; j < LaneRealFft::kLanes; ++j) {
      in.push_back(frames[j].data());
      out.push_back(power[j].data());
    }
    fft.Power(in.data(), LaneRealFft::kLanes, out.data());
    EXPECT_EQ(power[lane], alone) << "lane " << lane;
  }
}

}  // namespace
}  // namespace prepflow
