// Benchmark of GPU delivery (a program, not a test; prints one JSON line).
//
// For batches of 256 images of 224 x 224: the DeviceNormalizer (uint8 copy +
// normalize kernel, double-buffered) against plain back-to-back
// cudaMemcpyAsync from pinned memory of the same batch as uint8 (the
// normalizer's ceiling: goal >= 0.9 of it) and as the float32 tensor a
// CPU-only path would ship; then the same batches taken by a consumer that
// works for as long as a copy after each, against the same consumer with
// every copy held back until the step before has ended (copy_step_overlap:
// the share of a copy hidden behind the step, 1 when none of it adds to a
// step).
//
//   gpu_bench [--batches 50] [--batch 256] [--size 224]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu.h"

namespace {

double Seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Die(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::exit(1);
}

// Seconds per copy of `bytes` from pinned host memory: back-to-back
// cudaMemcpyAsync on one stream, the rate the link gives a copy engine that
// is never idle (the normalizer's ceiling), mean over `reps`.
double PinnedCopySeconds(size_t bytes, int reps) {
  void* host = prepflow::gpu::AllocatePinned(bytes);
  void* dev = nullptr;
  cudaStream_t stream = nullptr;
  if (host == nullptr || cudaMalloc(&dev, bytes) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    Die("allocation failed");
  }
  std::memset(host, 1, bytes);
  cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream);  // warm-up
  cudaStreamSynchronize(stream);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) Die("copy failed");
  const double s = Seconds(t0) / reps;
  cudaStreamDestroy(stream);
  cudaFree(dev);
  prepflow::gpu::FreePinned(host);
  return s;
}

void CUDART_CB SleepFor(void* microseconds) {
  std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<intptr_t>(microseconds)));
}

// Seconds per batch when a consumer takes each batch and then works for
// `step` seconds on its own stream (a training step; here a host function
// that holds the stream, so the GPU itself stays free for the copies). The
// kernel always waits for the step before (it may reuse what the step
// reads); the copy need not: with the next copy hidden behind the step this
// is step + kernel, and `serial` (each copy starts only once the step before
// has ended) gives step + copy + kernel.
double SecondsPerStep(prepflow::gpu::DeviceNormalizer& normalizer, uint8_t* const* hosts,
                      float* const* outs, int batch, int batches, double step, bool serial) {
  cudaStream_t consumer = nullptr;
  cudaEvent_t ready = nullptr;
  if (cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess) {
    Die("stream creation failed");
  }
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < batches; ++i) {
    if (serial) cudaStreamSynchronize(consumer);
    if (!normalizer.Submit(hosts[i % 2], batch, outs[i % 2], consumer, nullptr, &error)) Die(error);
    cudaEventRecord(ready, static_cast<cudaStream_t>(normalizer.stream()));
    cudaStreamWaitEvent(consumer, ready, 0);
    cudaLaunchHostFunc(consumer, SleepFor,
                       reinterpret_cast<void*>(static_cast<intptr_t>(step * 1e6)));
  }
  cudaStreamSynchronize(consumer);
  const double s = Seconds(t0) / batches;
  if (!normalizer.Synchronize(&error)) Die(error);
  cudaEventDestroy(ready);
  cudaStreamDestroy(consumer);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int batches = 50, batch = 256, size = 224;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--batches")
      batches = value;
    else if (flag == "--batch")
      batch = value;
    else if (flag == "--size")
      size = value;
    else
      Die("unknown flag " + flag);
  }
  std::string why;
  if (!prepflow::gpu::Available(&why)) Die(why);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);

  const size_t image = static_cast<size_t>(size) * size * 3;
  const size_t u8_bytes = image * batch, f32_bytes = u8_bytes * sizeof(float);
  const double u8_copy = PinnedCopySeconds(u8_bytes, batches);
  const double f32_copy = PinnedCopySeconds(f32_bytes, batches);

  std::string error;
  auto normalizer = prepflow::gpu::DeviceNormalizer::Create(
      0, batch, size, size, prepflow::gpu::NormalizeParams(), &error);
  if (normalizer == nullptr) Die(error);
  std::vector<uint8_t*> hosts(2);
  for (auto& h : hosts) {
    h = static_cast<uint8_t*>(prepflow::gpu::AllocatePinned(u8_bytes));
    if (h == nullptr) Die("pinned allocation failed");
    std::memset(h, 7, u8_bytes);
  }
  float* outs[2];
  for (auto& o : outs) {
    if (cudaMalloc(&o, f32_bytes) != cudaSuccess) Die("cudaMalloc failed");
  }
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (!normalizer->Submit(hosts[i % 2], batch, outs[i % 2], nullptr, nullptr, &error)) {
        Die(error);
      }
    }
    if (!normalizer->Synchronize(&error)) Die(error);
  };
  run(4);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  run(batches);
  const double normalizer_s = Seconds(t0) / batches;
  // A step as long as the copy; overlap is the share of the copy hidden
  // behind it (1: none of it adds to the step, 0: all of it does).
  const double step = u8_copy;
  const double per_step =
      SecondsPerStep(*normalizer, hosts.data(), outs, batch, batches, step, false);
  const double per_step_serial =
      SecondsPerStep(*normalizer, hosts.data(), outs, batch, batches, step, true);
  const double overlap = std::clamp((per_step_serial - per_step) / u8_copy, 0.0, 1.0);

  std::printf(
      "{\"device\": \"%s\", \"batch\": %d, \"size\": %d, \"batches\": %d, "
      "\"pinned_copy_uint8_gb_s\": %.2f, \"pinned_copy_float32_gb_s\": %.2f, "
      "\"normalizer_images_per_s\": %.0f, \"normalizer_uint8_gb_s\": %.2f, "
      "\"float32_copy_images_per_s\": %.0f, "
      "\"uint8_copy_images_per_s\": %.0f, \"normalizer_vs_float32_copy\": %.2f, "
      "\"normalizer_vs_uint8_copy\": %.2f, \"step_ms\": %.3f, \"seconds_per_step_ms\": %.3f, "
      "\"seconds_per_step_serial_ms\": %.3f, "
      "\"copy_step_overlap\": %.2f}\n",
      prop.name, batch, size, batches, u8_bytes / u8_copy / 1e9, f32_bytes / f32_copy / 1e9,
      batch / normalizer_s, u8_bytes / normalizer_s / 1e9, batch / f32_copy, batch / u8_copy,
      f32_copy / normalizer_s, u8_copy / normalizer_s, step * 1e3, per_step * 1e3,
      per_step_serial * 1e3, overlap);
  for (auto h : hosts) prepflow::gpu::FreePinned(h);
  for (auto o : outs) cudaFree(o);
  return 0;
}
