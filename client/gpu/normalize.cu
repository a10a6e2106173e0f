// DeviceNormalizer and the normalize kernel (see gpu.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "gpu.h"

namespace prepflow::gpu {
namespace {

constexpr int kSlots = 2;  // batches in flight: double buffering

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error != nullptr) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

struct Params {
  float mean[3];
  float std[3];
};

// One thread per output pixel of one channel: coalesced float stores; the
// uint8 loads stride by 3 but come from L1/L2. IEEE division and
// subtraction with round-to-nearest, as the CPU computes them.
__global__ void NormalizeKernel(const uint8_t* __restrict__ in, float* __restrict__ out,
                                int64_t plane, int64_t total, Params p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t sample = i / (3 * plane);
    const int64_t rest = i - sample * 3 * plane;
    const int c = static_cast<int>(rest / plane);
    const int64_t pixel = rest - c * plane;
    const float x = static_cast<float>(in[sample * 3 * plane + 3 * pixel + c]);
    out[i] = __fdiv_rn(__fsub_rn(__fdiv_rn(x, 255.0f), p.mean[c]), p.std[c]);
  }
}

}  // namespace

bool Available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

void* AllocatePinned(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void FreePinned(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}

struct DeviceNormalizer::Impl {
  cudaStream_t stream = nullptr;
  cudaEvent_t consumer = nullptr;  // recorded on `after`, waited on by `stream`
  struct Slot {
    uint8_t* staging = nullptr;  // device copy of the batch's uint8 images
    cudaEvent_t done = nullptr;  // its copy and kernel are done: host and staging are free
    std::function<void()> release;
  } slots[kSlots];
  int next = 0;
  Params params{};
};

DeviceNormalizer::DeviceNormalizer(int device, int64_t max_samples, int h, int w)
    : device_(device), max_samples_(max_samples), h_(h), w_(w), impl_(new Impl) {}

std::unique_ptr<DeviceNormalizer> DeviceNormalizer::Create(int device, int64_t max_samples, int h,
                                                           int w, const NormalizeParams& params,
                                                           std::string* error) {
  if (max_samples < 1 || h < 1 || w < 1) {
    if (error != nullptr) *error = "DeviceNormalizer: max_samples, height and width must be >= 1";
    return nullptr;
  }
  std::string why;
  if (!Available(&why)) {
    if (error != nullptr) *error = why;
    return nullptr;
  }
  std::unique_ptr<DeviceNormalizer> n(new DeviceNormalizer(device, max_samples, h, w));
  Impl& m = *n->impl_;
  for (int c = 0; c < 3; ++c) {
    m.params.mean[c] = params.mean[c];
    m.params.std[c] = params.std[c];
  }
  const size_t bytes = static_cast<size_t>(max_samples) * h * w * 3;
  if (!Check(cudaSetDevice(device), "cudaSetDevice", error) ||
      !Check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate",
             error) ||
      !Check(cudaEventCreateWithFlags(&m.consumer, cudaEventDisableTiming), "cudaEventCreate",
             error)) {
    return nullptr;
  }
  for (Impl::Slot& s : m.slots) {
    if (!Check(cudaMalloc(&s.staging, bytes), "cudaMalloc", error) ||
        !Check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate",
               error)) {
      return nullptr;
    }
  }
  return n;
}

DeviceNormalizer::~DeviceNormalizer() {
  Impl& m = *impl_;
  cudaSetDevice(device_);
  if (m.stream != nullptr) cudaStreamSynchronize(m.stream);
  for (Impl::Slot& s : m.slots) {
    if (s.release) s.release();
    if (s.staging != nullptr) cudaFree(s.staging);
    if (s.done != nullptr) cudaEventDestroy(s.done);
  }
  if (m.consumer != nullptr) cudaEventDestroy(m.consumer);
  if (m.stream != nullptr) cudaStreamDestroy(m.stream);
}

bool DeviceNormalizer::Submit(const uint8_t* host, int64_t n, float* out, void* after,
                              std::function<void()> release, std::string* error) {
  if (n < 1 || n > max_samples_ || host == nullptr || out == nullptr) {
    if (error != nullptr) {
      *error = "DeviceNormalizer::Submit: need 1 <= n <= " + std::to_string(max_samples_) +
               " and non-null buffers, got n = " + std::to_string(n);
    }
    return false;
  }
  Impl& m = *impl_;
  Impl::Slot& slot = m.slots[m.next];
  m.next = (m.next + 1) % kSlots;
  if (!Check(cudaSetDevice(device_), "cudaSetDevice", error)) return false;
  // The slot's previous batch: its staging buffer must be free, and its host
  // memory can go back to its owner once copied.
  if (!Check(cudaEventSynchronize(slot.done), "cudaEventSynchronize", error)) return false;
  if (slot.release) std::exchange(slot.release, nullptr)();
  if (after != nullptr) {
    // `out` may still be read by the consumer's earlier work.
    auto* consumer = static_cast<cudaStream_t>(after);
    if (!Check(cudaEventRecord(m.consumer, consumer), "cudaEventRecord", error) ||
        !Check(cudaStreamWaitEvent(m.stream, m.consumer, 0), "cudaStreamWaitEvent", error)) {
      return false;
    }
  }
  const int64_t plane = static_cast<int64_t>(h_) * w_;
  const size_t bytes = static_cast<size_t>(n * plane * 3);
  if (!Check(cudaMemcpyAsync(slot.staging, host, bytes, cudaMemcpyHostToDevice, m.stream),
             "cudaMemcpyAsync", error)) {
    return false;
  }
  const int64_t total = n * plane * 3;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 65535));
  NormalizeKernel<<<blocks, threads, 0, m.stream>>>(slot.staging, out, plane, total, m.params);
  if (!Check(cudaGetLastError(), "normalize kernel launch", error) ||
      !Check(cudaEventRecord(slot.done, m.stream), "cudaEventRecord", error)) {
    return false;
  }
  slot.release = std::move(release);
  return true;
}

bool DeviceNormalizer::Synchronize(std::string* error) {
  return Check(cudaSetDevice(device_), "cudaSetDevice", error) &&
         Check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize", error);
}

void* DeviceNormalizer::stream() const { return impl_->stream; }

}  // namespace prepflow::gpu
