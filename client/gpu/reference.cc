#include "gpu.h"

namespace prepflow::gpu {

void NormalizeReference(const uint8_t* hwc, int64_t n, int h, int w, const NormalizeParams& p,
                        float* chw) {
  const int64_t plane = static_cast<int64_t>(h) * w;
  for (int64_t s = 0; s < n; ++s) {
    const uint8_t* in = hwc + s * plane * 3;
    float* out = chw + s * plane * 3;
    for (int c = 0; c < 3; ++c) {
      for (int64_t i = 0; i < plane; ++i) {
        out[c * plane + i] = (static_cast<float>(in[3 * i + c]) / 255.0f - p.mean[c]) / p.std[c];
      }
    }
  }
}

}  // namespace prepflow::gpu
