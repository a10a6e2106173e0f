// DeviceNormalizer and the normalize kernel (see gpu.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "gpu.h"

namespace prepflow::gpu {
namespace {

constexpr int kSlots = DeviceNormalizer::kBatchesInFlight;  // double buffering

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error != nullptr) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

// Every value a channel's byte can normalize to: (x / 255 - mean) / std,
// computed here on the host in IEEE single precision by the formula of the
// CPU's normalize (pipeline/ops/image/image_ops.cc, NormalizeHwcToChw), so
// the kernel, which only looks values up, gives the CPU's bits by
// construction (and gpu_test checks them against NormalizeReference).
constexpr int kTableSize = 3 * 256;

void FillTable(const NormalizeParams& p, float* table) {
  for (int c = 0; c < 3; ++c) {
    for (int x = 0; x < 256; ++x) {
      table[c * 256 + x] = (static_cast<float>(x) / 255.0f - p.mean[c]) / p.std[c];
    }
  }
}

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535;

// One thread per pixel: its three bytes in, one float to each channel plane
// out, so a warp's stores are three coalesced runs. Pixels on grid x,
// samples on grid y (both looped past the grid's limits), no division per
// element; the 3 KiB table stays in L1. On an H200 a batch of 256 x 224 x
// 224 takes 58 us (2.8 TB/s), against 192 us for one thread per output
// value with IEEE division and 109 us for this layout with it
// (docs/benchmarks.md).
__global__ void NormalizeKernel(const uint8_t* __restrict__ in, float* __restrict__ out,
                                int64_t plane, int64_t samples, const float* __restrict__ table) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t s = blockIdx.y; s < samples; s += gridDim.y) {
    const uint8_t* src = in + s * 3 * plane;
    float* dst = out + s * 3 * plane;
    for (int64_t i = first; i < plane; i += stride) {
#pragma unroll
      for (int c = 0; c < 3; ++c) dst[c * plane + i] = __ldg(&table[c * 256 + src[3 * i + c]]);
    }
  }
}

// 13000 -> "13.0".
std::string CudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

bool Available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    if (why == nullptr) return false;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver == 0) {
      *why = "no CUDA driver is installed (no NVIDIA GPU here)";
    } else if (driver < runtime) {
      *why = "the CUDA driver (" + CudaVersion(driver) +
             ") is older than prepflow's CUDA runtime (" + CudaVersion(runtime) +
             "): update the NVIDIA driver";
    } else {
      *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    }
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

bool DriverInstalled() {
  int version = 0;
  return cudaDriverGetVersion(&version) == cudaSuccess && version > 0;
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

// Makes `device` current for the scope and restores the caller's device
// after: a loader on cuda:1 must not move torch's current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// Two streams: copies on one, kernels on the other, so that the copy of
// batch k + 1 overlaps the kernel of batch k and the training step. Each
// slot's events order its reuse on the device, never by blocking the CPU,
// except that its host memory goes back once its copy is done.
struct DeviceNormalizer::Impl {
  cudaStream_t copy_stream = nullptr;
  cudaStream_t stream = nullptr;   // kernels; the consumer waits on this one
  cudaEvent_t consumer = nullptr;  // recorded on the consumer's stream each Submit
  struct Slot {
    uint8_t* staging = nullptr;    // device copy of the batch's uint8 images
    cudaEvent_t copied = nullptr;  // its copy is done: the host memory is free
    cudaEvent_t done = nullptr;    // its kernel is done: the staging buffer is free
    std::function<void()> release;
  } slots[kSlots];
  int next = 0;
  float* table = nullptr;  // device memory, kTableSize floats (FillTable)
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
  cudaGetLastError();  // an earlier failure is not this one's
  DeviceGuard guard(device);
  if (!Check(guard.status(), "cudaSetDevice", error)) return nullptr;
  // A GPU this build has no code for (and no PTX it can compile) fails here,
  // not at the first batch.
  cudaFuncAttributes attributes;
  if (!Check(cudaFuncGetAttributes(&attributes, NormalizeKernel),
             "no normalize kernel for this GPU (prepflow's CUDA architectures do not cover it)",
             error)) {
    cudaGetLastError();
    return nullptr;
  }
  std::unique_ptr<DeviceNormalizer> n(new DeviceNormalizer(device, max_samples, h, w));
  Impl& m = *n->impl_;
  const size_t bytes = static_cast<size_t>(max_samples) * h * w * 3;
  float table[kTableSize];
  FillTable(params, table);
  if (!Check(cudaMalloc(&m.table, sizeof(table)), "cudaMalloc", error) ||
      !Check(cudaMemcpy(m.table, table, sizeof(table), cudaMemcpyHostToDevice), "cudaMemcpy",
             error)) {
    return nullptr;
  }
  if (!Check(cudaStreamCreateWithFlags(&m.copy_stream, cudaStreamNonBlocking), "cudaStreamCreate",
             error) ||
      !Check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate",
             error) ||
      !Check(cudaEventCreateWithFlags(&m.consumer, cudaEventDisableTiming), "cudaEventCreate",
             error)) {
    return nullptr;
  }
  for (Impl::Slot& s : m.slots) {
    if (!Check(cudaMalloc(&s.staging, bytes), "cudaMalloc", error) ||
        // The CPU waits on `copied` (to hand host memory back): blocking,
        // so that the wait does not spin a core the pipeline needs.
        !Check(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming | cudaEventBlockingSync),
               "cudaEventCreate", error) ||
        !Check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate",
               error)) {
      return nullptr;
    }
  }
  return n;
}

DeviceNormalizer::~DeviceNormalizer() {
  Impl& m = *impl_;
  DeviceGuard guard(device_);
  if (m.copy_stream != nullptr) cudaStreamSynchronize(m.copy_stream);
  if (m.stream != nullptr) cudaStreamSynchronize(m.stream);
  for (Impl::Slot& s : m.slots) {
    if (s.release) s.release();
    if (s.staging != nullptr) cudaFree(s.staging);
    if (s.copied != nullptr) cudaEventDestroy(s.copied);
    if (s.done != nullptr) cudaEventDestroy(s.done);
  }
  if (m.table != nullptr) cudaFree(m.table);
  if (m.consumer != nullptr) cudaEventDestroy(m.consumer);
  if (m.stream != nullptr) cudaStreamDestroy(m.stream);
  if (m.copy_stream != nullptr) cudaStreamDestroy(m.copy_stream);
  cudaGetLastError();  // errors here have no one to go to
}

bool DeviceNormalizer::Submit(const uint8_t* host, int64_t n, float* out, void* consumer,
                              std::function<void()> release, std::string* error) {
  if (n < 0 || n > max_samples_ || (n > 0 && (host == nullptr || out == nullptr))) {
    if (error != nullptr) {
      *error = "DeviceNormalizer::Submit: need 0 <= n <= " + std::to_string(max_samples_) +
               " and non-null buffers, got n = " + std::to_string(n);
    }
    return false;
  }
  if (n == 0) {  // an empty batch (on_error=skip can deliver one): nothing to copy
    if (release) release();
    return true;
  }
  cudaGetLastError();  // a failure before this call is not this call's
  Impl& m = *impl_;
  DeviceGuard guard(device_);
  if (!Check(guard.status(), "cudaSetDevice", error)) return false;
  Impl::Slot& slot = m.slots[m.next];
  m.next = (m.next + 1) % kSlots;
  // The slot's previous batch: its host memory goes back once its copy is
  // done (the CPU waits for that copy only); its staging buffer is reused
  // once its kernel is done (the copy stream waits for that on the device).
  if (!Check(cudaEventSynchronize(slot.copied), "cudaEventSynchronize", error)) return false;
  if (slot.release) std::exchange(slot.release, nullptr)();
  if (!Check(cudaStreamWaitEvent(m.copy_stream, slot.done, 0), "cudaStreamWaitEvent", error)) {
    return false;
  }
  const int64_t plane = static_cast<int64_t>(h_) * w_;
  const size_t bytes = static_cast<size_t>(n * plane * 3);
  if (!Check(cudaMemcpyAsync(slot.staging, host, bytes, cudaMemcpyHostToDevice, m.copy_stream),
             "cudaMemcpyAsync", error)) {
    return false;
  }
  // From here the copy may read `host`: whatever fails below, it goes back
  // only after the copy (a later Submit, Synchronize's caller or the
  // destructor).
  slot.release = std::move(release);
  if (!Check(cudaEventRecord(slot.copied, m.copy_stream), "cudaEventRecord", error)) return false;
  // The kernel writes `out`: after the consumer's work enqueued so far
  // (which may still read the memory `out` reuses; a null stream is the
  // legacy default stream, torch's usual one) and after the copy.
  auto* consumer_stream = static_cast<cudaStream_t>(consumer);
  if (!Check(cudaEventRecord(m.consumer, consumer_stream), "cudaEventRecord (consumer)", error) ||
      !Check(cudaStreamWaitEvent(m.stream, m.consumer, 0), "cudaStreamWaitEvent", error) ||
      !Check(cudaStreamWaitEvent(m.stream, slot.copied, 0), "cudaStreamWaitEvent", error)) {
    return false;
  }
  const dim3 grid(static_cast<unsigned>(std::min((plane + kThreads - 1) / kThreads, kMaxGrid)),
                  static_cast<unsigned>(std::min(n, kMaxGrid)));
  NormalizeKernel<<<grid, kThreads, 0, m.stream>>>(slot.staging, out, plane, n, m.table);
  return Check(cudaGetLastError(), "normalize kernel launch", error) &&
         Check(cudaEventRecord(slot.done, m.stream), "cudaEventRecord", error);
}

bool DeviceNormalizer::Synchronize(std::string* error) {
  cudaGetLastError();
  DeviceGuard guard(device_);
  return Check(guard.status(), "cudaSetDevice", error) &&
         Check(cudaStreamSynchronize(impl_->copy_stream), "cudaStreamSynchronize", error) &&
         Check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize", error);
}

void* DeviceNormalizer::stream() const { return impl_->stream; }

}  // namespace prepflow::gpu
