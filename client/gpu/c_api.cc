// A C interface to client/gpu, for ctypes: the standalone Python shim
// (python/prepflow_gpu.py) that tests the torch hand-off on a GPU machine
// where prepflow's full Python module cannot be built. Errors come back as
// 0 with a message in the caller's buffer.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "gpu.h"

namespace {

using prepflow::gpu::DeviceNormalizer;
using prepflow::gpu::NormalizeParams;

void Copy(const std::string& s, char* buffer, size_t size) {
  if (buffer == nullptr || size == 0) return;
  const size_t n = std::min(s.size(), size - 1);
  std::memcpy(buffer, s.data(), n);
  buffer[n] = '\0';
}

NormalizeParams Params(const float* mean, const float* std) {
  NormalizeParams p;
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = mean[c];
    p.std[c] = std[c];
  }
  return p;
}

}  // namespace

extern "C" {

typedef void (*pf_release_fn)(void* token);

int pf_gpu_available(char* why, size_t why_size) {
  std::string reason;
  const bool ok = prepflow::gpu::Available(&reason);
  Copy(reason, why, why_size);
  return ok ? 1 : 0;
}

int pf_gpu_batches_in_flight() { return DeviceNormalizer::kBatchesInFlight; }

void* pf_gpu_alloc_pinned(size_t bytes) { return prepflow::gpu::AllocatePinned(bytes); }
void pf_gpu_free_pinned(void* p) { prepflow::gpu::FreePinned(p); }

void pf_gpu_normalize_reference(const uint8_t* hwc, int64_t n, int h, int w, const float* mean,
                                const float* std, float* chw) {
  prepflow::gpu::NormalizeReference(hwc, n, h, w, Params(mean, std), chw);
}

void* pf_gpu_normalizer_create(int device, int64_t max_samples, int h, int w, const float* mean,
                               const float* std, char* error, size_t error_size) {
  std::string message;
  std::unique_ptr<DeviceNormalizer> n =
      DeviceNormalizer::Create(device, max_samples, h, w, Params(mean, std), &message);
  Copy(message, error, error_size);
  return n.release();
}

// `release(token)` runs once `host` may be reused (see DeviceNormalizer::Submit).
int pf_gpu_normalizer_submit(void* normalizer, const uint8_t* host, int64_t n, float* out,
                             void* consumer, pf_release_fn release, void* token, char* error,
                             size_t error_size) {
  std::string message;
  std::function<void()> done;
  if (release != nullptr) done = [release, token] { release(token); };
  const bool ok = static_cast<DeviceNormalizer*>(normalizer)
                      ->Submit(host, n, out, consumer, std::move(done), &message);
  Copy(message, error, error_size);
  return ok ? 1 : 0;
}

int pf_gpu_normalizer_synchronize(void* normalizer, char* error, size_t error_size) {
  std::string message;
  const bool ok = static_cast<DeviceNormalizer*>(normalizer)->Synchronize(&message);
  Copy(message, error, error_size);
  return ok ? 1 : 0;
}

void* pf_gpu_normalizer_stream(void* normalizer) {
  return static_cast<DeviceNormalizer*>(normalizer)->stream();
}

void pf_gpu_normalizer_destroy(void* normalizer) {
  delete static_cast<DeviceNormalizer*>(normalizer);
}

}  // extern "C"
