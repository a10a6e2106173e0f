// gpu.h for builds without a CUDA toolkit: nothing is available, and callers
// take their CPU path.
#include "gpu.h"

namespace prepflow::gpu {

bool Available(std::string* why) {
  if (why != nullptr) *why = "prepflow was built without CUDA";
  return false;
}

bool DriverInstalled() { return false; }

void* AllocatePinned(size_t) { return nullptr; }
void FreePinned(void*) {}

struct DeviceNormalizer::Impl {};

DeviceNormalizer::DeviceNormalizer(int device, int64_t max_samples, int h, int w)
    : device_(device), max_samples_(max_samples), h_(h), w_(w) {}
DeviceNormalizer::~DeviceNormalizer() = default;

std::unique_ptr<DeviceNormalizer> DeviceNormalizer::Create(int, int64_t, int, int,
                                                           const NormalizeParams&,
                                                           std::string* error) {
  Available(error);
  return nullptr;
}

bool DeviceNormalizer::Submit(const uint8_t*, int64_t, float*, void*, std::function<void()>,
                              std::string* error) {
  Available(error);
  return false;
}
bool DeviceNormalizer::Synchronize(std::string* error) {
  Available(error);
  return false;
}
void* DeviceNormalizer::stream() const { return nullptr; }

}  // namespace prepflow::gpu
