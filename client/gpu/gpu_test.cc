// Tests of client/gpu, a plain program (no test framework: this folder must
// build with CUDA and a C++ compiler alone).
//
//   gpu_test cpu      the CPU reference and the no-device behaviour; always runs
//   gpu_test device   the kernel against the reference, double buffering and
//                     hand-back, the consumer-stream race, copies overlapping
//                     the consumer's work, a second device; exits 77 (skipped)
//                     on a machine with no CUDA driver, and fails where a
//                     driver is installed but no device can be used
#include "gpu.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef PREPFLOW_GPU_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

int failures = 0;

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

using prepflow::gpu::DeviceNormalizer;
using prepflow::gpu::NormalizeParams;

std::vector<uint8_t> RandomImages(int64_t n, int h, int w, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n) * h * w * 3);
  for (uint8_t& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

void CpuTests() {
  // Hand-computed: two pixels, (0, 128, 255) and (255, 0, 64), mean 0.5, std 0.25.
  NormalizeParams p;
  for (int c = 0; c < 3; ++c) p.mean[c] = 0.5f, p.std[c] = 0.25f;
  const uint8_t in[6] = {0, 128, 255, 255, 0, 64};
  float out[6];
  prepflow::gpu::NormalizeReference(in, 1, 1, 2, p, out);
  // CHW: R plane (0, 255), G plane (128, 0), B plane (255, 64).
  const float expected[6] = {-2.0f, 2.0f, (128.0f / 255.0f - 0.5f) / 0.25f,
                             -2.0f, 2.0f, (64.0f / 255.0f - 0.5f) / 0.25f};
  EXPECT(std::memcmp(out, expected, sizeof(out)) == 0);

  // Without a device (or without CUDA) everything says why and nothing crashes.
  std::string why;
  if (!prepflow::gpu::Available(&why)) {
    EXPECT(!why.empty());
    std::string error;
    EXPECT(DeviceNormalizer::Create(0, 8, 4, 4, NormalizeParams(), &error) == nullptr);
    EXPECT(!error.empty());
    EXPECT(prepflow::gpu::AllocatePinned(1024) == nullptr);
    std::printf("no device: %s\n", why.c_str());
  }
  std::string error;
  EXPECT(DeviceNormalizer::Create(0, 0, 4, 4, NormalizeParams(), &error) == nullptr);
  EXPECT(!error.empty());
}

#ifdef PREPFLOW_GPU_HAVE_CUDA
void CUDART_CB Sleep(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
}

// Batches of random images in pinned memory (`sizes[b]` images in batch
// b), each with its own output on the current device, checked bit for bit
// against the CPU reference.
struct Batches {
  Batches(const std::vector<int64_t>& sizes, int h, int w) : h(h), w(w) {
    for (size_t b = 0; b < sizes.size(); ++b) {
      inputs.push_back(RandomImages(sizes[b], h, w, 1000 + static_cast<unsigned>(b)));
      auto* host = static_cast<uint8_t*>(prepflow::gpu::AllocatePinned(inputs[b].size()));
      EXPECT(host != nullptr);
      if (host != nullptr) std::memcpy(host, inputs[b].data(), inputs[b].size());
      float* out = nullptr;
      EXPECT(cudaMalloc(&out, inputs[b].size() * sizeof(float)) == cudaSuccess);
      hosts.push_back(host);
      outs.push_back(out);
    }
  }
  Batches(int count, int64_t n, int h, int w)
      : Batches(std::vector<int64_t>(static_cast<size_t>(count), n), h, w) {}
  ~Batches() {
    for (uint8_t* host : hosts) prepflow::gpu::FreePinned(host);
    for (float* out : outs) cudaFree(out);
  }
  int64_t size(int b) const { return static_cast<int64_t>(inputs[b].size()) / (3 * h * w); }
  bool Exact(int b) const {
    std::vector<float> got(inputs[b].size()), want(inputs[b].size());
    if (cudaMemcpy(got.data(), outs[b], got.size() * sizeof(float), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return false;
    }
    prepflow::gpu::NormalizeReference(inputs[b].data(), size(b), h, w, NormalizeParams(),
                                      want.data());
    return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  }
  int h, w;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<uint8_t*> hosts;
  std::vector<float*> outs;
};

// The race of defect 1: the consumer (torch on its legacy default stream)
// still writes the memory `out` reuses when the batch is submitted. Here the
// consumer's stream is held for 200 ms and then fills `out` with 0xFF bytes;
// the normalize kernel must run after that, so `out` ends up normalized.
// Without the wait on the legacy stream the kernel runs first and the fill
// lands on top.
void ConsumerOrderTest() {
  const int h = 16, w = 16;
  std::string error;
  auto normalizer = DeviceNormalizer::Create(0, 1, h, w, NormalizeParams(), &error);
  EXPECT(normalizer != nullptr);
  if (normalizer == nullptr) return;
  Batches one(1, 1, h, w);
  int before = -1;
  cudaGetDevice(&before);
  EXPECT(cudaLaunchHostFunc(nullptr, Sleep, reinterpret_cast<void*>(200)) == cudaSuccess);
  EXPECT(cudaMemsetAsync(one.outs[0], 0xFF, one.inputs[0].size() * sizeof(float), nullptr) ==
         cudaSuccess);
  EXPECT(normalizer->Submit(one.hosts[0], 1, one.outs[0], nullptr, nullptr, &error));
  EXPECT(normalizer->Synchronize(&error));
  int after = -2;
  cudaGetDevice(&after);
  EXPECT(before == after);  // the caller's device is restored
  EXPECT(one.Exact(0));
  normalizer.reset();
  std::printf("device: the kernel waited for the consumer's legacy default stream\n");
}

// Holds a stream until Open() (or a deadline, which is a failure): a
// training step that takes as long as the test wants, with no timing in it.
struct Gate {
  static void CUDART_CB Wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!gate->open.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate->expired.store(true);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::atomic<bool> open{false};
  std::atomic<bool> expired{false};
};

// Defect 2: the copies of the next batches run while the consumer is still
// busy with its step; only the kernels wait for it. The consumer's stream
// is held shut after the first batch; the next four are submitted against
// it. Each Submit waits (on the CPU) for the copy of the batch two before,
// so the fifth returns only if the second and third were copied while the
// consumer was held. A copy queued behind the consumer would keep the gate
// shut until its deadline, and the test fails.
void CopiesOverlapTheConsumerTest() {
  const int h = 32, w = 48;
  std::string error;
  auto normalizer = DeviceNormalizer::Create(0, 4, h, w, NormalizeParams(), &error);
  EXPECT(normalizer != nullptr);
  if (normalizer == nullptr) return;
  Batches batches(5, 4, h, w);
  cudaStream_t consumer = nullptr;
  EXPECT(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  Gate gate;
  std::vector<int> released;
  for (int b = 0; b < 5; ++b) {
    EXPECT(normalizer->Submit(
        batches.hosts[b], batches.size(b), batches.outs[b], consumer,
        [&released, b] { released.push_back(b); }, &error));
    if (b == 0) EXPECT(cudaLaunchHostFunc(consumer, Gate::Wait, &gate) == cudaSuccess);
  }
  EXPECT(released == (std::vector<int>{0, 1, 2}));
  EXPECT(cudaStreamQuery(consumer) == cudaErrorNotReady);  // still held
  gate.open.store(true);
  EXPECT(normalizer->Synchronize(&error));
  EXPECT(!gate.expired.load());
  for (int b = 0; b < 5; ++b) EXPECT(batches.Exact(b));
  normalizer.reset();
  cudaStreamDestroy(consumer);
  std::printf("device: the next batches were copied while the consumer was busy\n");
}

// A loader on the second GPU while the first is current (DDP's rank 1 with
// torch's current device left alone): the work runs on device 1, the
// caller's device stays 0, the bits are the reference's.
void SecondDeviceTest() {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) {
    std::printf("device: one GPU, the second-device test did not run\n");
    return;
  }
  EXPECT(cudaSetDevice(0) == cudaSuccess);
  const int h = 8, w = 12;
  std::string error;
  auto normalizer = DeviceNormalizer::Create(1, 2, h, w, NormalizeParams(), &error);
  EXPECT(normalizer != nullptr);
  if (normalizer == nullptr) return;
  int current = -1;
  EXPECT(cudaGetDevice(&current) == cudaSuccess && current == 0);
  {
    EXPECT(cudaSetDevice(1) == cudaSuccess);
    Batches batches(3, 2, h, w);  // outputs on device 1
    EXPECT(cudaSetDevice(0) == cudaSuccess);
    for (int b = 0; b < 3; ++b) {
      EXPECT(normalizer->Submit(batches.hosts[b], batches.size(b), batches.outs[b], nullptr,
                                nullptr, &error));
    }
    EXPECT(normalizer->Synchronize(&error));
    EXPECT(cudaGetDevice(&current) == cudaSuccess && current == 0);
    cudaPointerAttributes attributes{};
    EXPECT(cudaPointerGetAttributes(&attributes, batches.outs[0]) == cudaSuccess &&
           attributes.device == 1);
    for (int b = 0; b < 3; ++b) EXPECT(batches.Exact(b));
    normalizer.reset();
    EXPECT(cudaSetDevice(1) == cudaSuccess);  // the outputs are freed on their device
  }
  EXPECT(cudaSetDevice(0) == cudaSuccess);
  std::printf("device: a normalizer on GPU 1 with GPU 0 current\n");
}

// Defects 3 and 4: an error left by an earlier CUDA call is not this
// Submit's, and an empty batch (on_error=skip can deliver one) succeeds and
// hands its memory back at once.
void EmptyAndStaleErrorTest() {
  std::string error;
  auto normalizer = DeviceNormalizer::Create(0, 2, 4, 4, NormalizeParams(), &error);
  EXPECT(normalizer != nullptr);
  if (normalizer == nullptr) return;
  bool released = false;
  EXPECT(normalizer->Submit(
      nullptr, 0, nullptr, nullptr, [&] { released = true; }, &error));
  EXPECT(released);
  void* huge = nullptr;
  EXPECT(cudaMalloc(&huge, size_t{1} << 62) != cudaSuccess);  // leaves a (non-sticky) error
  Batches one(1, 1, 4, 4);
  EXPECT(normalizer->Submit(one.hosts[0], 1, one.outs[0], nullptr, nullptr, &error));
  if (!error.empty()) std::fprintf(stderr, "stale error reported: %s\n", error.c_str());
  EXPECT(normalizer->Synchronize(&error));
  normalizer.reset();
  std::printf("device: empty batch and a stale error handled\n");
}

int DeviceTests() {
  std::string why;
  if (!prepflow::gpu::Available(&why)) {
    if (prepflow::gpu::DriverInstalled()) {  // a GPU that cannot be used is a failure
      std::fprintf(stderr, "FAILED: a CUDA driver is installed but %s\n", why.c_str());
      return 1;
    }
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  const int h = 37, w = 53;  // odd sizes: no lucky alignment
  const int64_t max = 7;
  std::string error;
  auto normalizer =
      DeviceNormalizer::Create(0, max, h, w, NormalizeParams(), &error);  // ImageNet's
  EXPECT(normalizer != nullptr);
  if (normalizer == nullptr) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  // More batches than the two slots (buffers are reused), the last short.
  Batches batches({max, max, max, max, 3}, h, w);
  const int count = static_cast<int>(batches.hosts.size());
  std::vector<int> released;
  for (int b = 0; b < count; ++b) {
    EXPECT(normalizer->Submit(
        batches.hosts[b], batches.size(b), batches.outs[b], nullptr,
        [&released, b] { released.push_back(b); }, &error));
    // Double buffering: a batch's host memory comes back two submits later.
    if (b >= 2) EXPECT(!released.empty() && released.back() == b - 2);
  }
  EXPECT(normalizer->Synchronize(&error));
  for (int b = 0; b < count; ++b) EXPECT(batches.Exact(b));  // bit-exact
  EXPECT(normalizer->Submit(batches.hosts[0], max + 1, batches.outs[0], nullptr, nullptr, &error) ==
         false);
  normalizer.reset();  // hands back the last two
  EXPECT(released.size() == static_cast<size_t>(count));
  std::printf("device: %d batches bit-exact against the CPU reference\n", count);
  ConsumerOrderTest();
  CopiesOverlapTheConsumerTest();
  EmptyAndStaleErrorTest();
  SecondDeviceTest();
  return failures == 0 ? 0 : 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "cpu";
  if (mode == "cpu") {
    CpuTests();
  } else if (mode == "device") {
#ifdef PREPFLOW_GPU_HAVE_CUDA
    return DeviceTests();
#else
    std::printf("skipped: built without CUDA\n");
    return 77;
#endif
  } else {
    std::fprintf(stderr, "usage: gpu_test cpu|device\n");
    return 2;
  }
  std::printf("%s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
