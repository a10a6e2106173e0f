// GPU delivery: batches of uint8 HWC images copied to the GPU and turned
// into normalized float32 CHW there, so that the network and PCIe carry
// uint8 (a quarter of the bytes) and the trainer's CPUs do no conversion.
//
// This folder builds on its own (CUDA and a C++ compiler, nothing else) so it
// can be built and tested on a GPU machine without prepflow's other
// dependencies; in prepflow's build it is compiled when a CUDA toolkit is
// found. Without CUDA, or without a usable device, Available() says why and
// callers deliver on the CPU instead. This header has no CUDA types in it.
//
// Bit-exactness: the kernel does no arithmetic. It looks each byte up in a
// table of the 3 x 256 values (x / 255 - mean) / std, computed on the host
// in IEEE single precision by the formula of the CPU's normalize
// (pipeline/ops/image/image_ops.cc), so a sample normalized on the GPU has
// the same bits as one normalized anywhere else.
//
// Thread-safety: Available() and the allocation functions from any thread;
// a DeviceNormalizer from one thread at a time.
#ifndef PREPFLOW_CLIENT_GPU_GPU_H_
#define PREPFLOW_CLIENT_GPU_GPU_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace prepflow::gpu {

// Whether this build has CUDA and a device can be used; if not, `*why`
// (may be null) says why ("built without CUDA", "no CUDA device", the
// driver's error).
bool Available(std::string* why);

// Whether a CUDA driver is installed at all. With a driver but no usable
// device (a driver older than this build's runtime, a broken install) the
// machine has a GPU that prepflow cannot use: a test that needs one fails
// loudly instead of skipping.
bool DriverInstalled();

// Page-locked host memory (cudaHostAlloc), which the GPU copies from
// asynchronously at full speed; null (with `*error`) on failure or without
// CUDA. Plain function pointers, so that code with no CUDA in it can take
// them as an allocator.
void* AllocatePinned(size_t bytes);
void FreePinned(void* p);

struct NormalizeParams {
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// The CPU reference: `n` images of h x w x 3 uint8 -> n x 3 x h x w float32.
void NormalizeReference(const uint8_t* hwc, int64_t n, int h, int w, const NormalizeParams& p,
                        float* chw);

// Copies batches of up to `max_samples` h x w x 3 uint8 images from host
// memory (pinned for asynchronous copies) to the device and normalizes them
// into float32 CHW. Copies run on one CUDA stream and kernels on another,
// two batches in flight: the copy of batch k + 1 overlaps the kernel of
// batch k and the consumer's work, and a batch's host memory is handed back
// (its `release` runs) once its copy is done. Every call makes its device
// current and restores the caller's after.
class DeviceNormalizer {
 public:
  // Batches whose host memory a normalizer keeps after Submit returns (their
  // copies may still be running); a loader feeding one makes that many more
  // batch buffers up front, so that no page-locked memory is allocated
  // mid-training (allocating or freeing it synchronises the device).
  static constexpr int kBatchesInFlight = 2;

  // Null, with `*error`, if the device cannot be used.
  static std::unique_ptr<DeviceNormalizer> Create(int device, int64_t max_samples, int h, int w,
                                                  const NormalizeParams& params,
                                                  std::string* error);
  ~DeviceNormalizer();  // waits for the work in flight and releases its batches
  DeviceNormalizer(const DeviceNormalizer&) = delete;
  DeviceNormalizer& operator=(const DeviceNormalizer&) = delete;

  // Enqueues: copy n images from `host`, and once that copy and the work
  // enqueued so far on `consumer` (a cudaStream_t on this device, e.g. the
  // trainer's current stream, whose earlier work may still use the memory
  // `out` reuses; null is the legacy default stream, torch's usual one) are
  // done, normalize them into `out` (device memory for n * 3 * h * w floats).
  // n = 0 does nothing (release runs at once). Returns false with `*error`
  // for bad arguments or a CUDA error of this call (errors left by earlier
  // calls are cleared first). `release` runs (on this thread, in a later
  // Submit or in the destructor) once `host` may be reused, also when the
  // call fails after its copy was enqueued. The consumer waits on stream()
  // before reading `out`.
  bool Submit(const uint8_t* host, int64_t n, float* out, void* consumer,
              std::function<void()> release, std::string* error);
  // Waits for everything enqueued. False with `*error` on a CUDA error.
  bool Synchronize(std::string* error);

  void* stream() const;  // cudaStream_t of the kernels
  int device() const { return device_; }
  int64_t max_samples() const { return max_samples_; }
  int height() const { return h_; }
  int width() const { return w_; }

 private:
  struct Impl;
  DeviceNormalizer(int device, int64_t max_samples, int h, int w);
  int device_;
  int64_t max_samples_;
  int h_, w_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prepflow::gpu

#endif  // PREPFLOW_CLIENT_GPU_GPU_H_
