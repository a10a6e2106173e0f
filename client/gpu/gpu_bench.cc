// Benchmark of GPU delivery (a program, not a test; prints one JSON line).
//
// For batches of 256 images of 224 x 224: the DeviceNormalizer (uint8 copy +
// normalize kernel, double-buffered) against plain cudaMemcpy from pinned
// memory of the same batch as uint8 and as the float32 tensor a CPU-only
// path would ship.
//
//   gpu_bench [--batches 50] [--batch 256] [--size 224]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

// Seconds per copy of `bytes` from pinned host memory, median-free mean over `reps`.
double PinnedCopySeconds(size_t bytes, int reps) {
  void* host = prepflow::gpu::AllocatePinned(bytes);
  void* dev = nullptr;
  if (host == nullptr || cudaMalloc(&dev, bytes) != cudaSuccess) Die("allocation failed");
  std::memset(host, 1, bytes);
  cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
  const double s = Seconds(t0) / reps;
  cudaFree(dev);
  prepflow::gpu::FreePinned(host);
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

  std::printf(
      "{\"device\": \"%s\", \"batch\": %d, \"size\": %d, \"batches\": %d, "
      "\"pinned_copy_uint8_gb_s\": %.2f, \"pinned_copy_float32_gb_s\": %.2f, "
      "\"normalizer_images_per_s\": %.0f, \"float32_copy_images_per_s\": %.0f, "
      "\"uint8_copy_images_per_s\": %.0f, \"normalizer_vs_float32_copy\": %.2f, "
      "\"normalizer_vs_uint8_copy\": %.2f}\n",
      prop.name, batch, size, batches, u8_bytes / u8_copy / 1e9, f32_bytes / f32_copy / 1e9,
      batch / normalizer_s, batch / f32_copy, batch / u8_copy, f32_copy / normalizer_s,
      u8_copy / normalizer_s);
  for (auto h : hosts) prepflow::gpu::FreePinned(h);
  for (auto o : outs) cudaFree(o);
  return 0;
}
