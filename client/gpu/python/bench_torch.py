"""GPU delivery against what a torch user would write, on the same device (a
program, not a test; prints one JSON line).

For batches of uint8 HWC images in page-locked host memory (what a loader's
workers hand over), three ways to get normalized float32 NCHW batches onto
the GPU:
  prepflow    prepflow/_gpu.py over the normalizer: uint8 copy, the kernel;
  torch       the uint8 batch copied with .to(device, non_blocking=True), then
              ((x.permute(0, 3, 1, 2).float() / 255 - mean) / std).contiguous();
  cpu_path    normalized on the CPU (prepflow's CPU reference, one thread, as
              a loader worker does it), then the float32 batch .to(device)
              from pinned memory: the Loader's device="cpu" plus .cuda().
For each: batches/s and the host CPU seconds the process spent per batch;
plus how prepflow's bits compare with torch's formula and the CPU reference.

    PREPFLOW_GPU_LIB=build-gpu/libprepflow_gpu_c.so python3 bench_torch.py [--batch 256]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepflow_gpu  # noqa: E402

handoff = prepflow_gpu.load_handoff()
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BUFFERS = 4  # more than the normalizer keeps in flight


def timed(step, batches, device):
    """(seconds per batch, host CPU seconds per batch) of `batches` calls
    of step(i), after two warm-up calls."""
    for i in range(2):
        step(i)
    torch.cuda.synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(batches):
        step(i)
    torch.cuda.synchronize(device)
    return (time.perf_counter() - wall) / batches, (time.process_time() - cpu) / batches


def torch_normalize(x, mean, std):
    return ((x.permute(0, 3, 1, 2).float() / 255 - mean) / std).contiguous()


def run(args):
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    rng = np.random.default_rng(0)
    shape = (args.batch, args.size, args.size, 3)
    pinned = [prepflow_gpu.PinnedBatch(rng.integers(0, 256, shape, dtype=np.uint8))
              for _ in range(BUFFERS)]
    normalizer = prepflow_gpu.DeviceNormalizer(0, args.batch, args.size, args.size, MEAN, STD)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    host = [torch.from_numpy(b.array).pin_memory() for b in pinned]
    # Its own batch: the shim tracks a batch by identity until released.
    check = prepflow_gpu.PinnedBatch(pinned[0].array)
    results = {}
    try:
        ours = [handoff.normalize_on_gpu(normalizer, check, device)]
        theirs = torch_normalize(host[0].to(device), mean, std)
        torch.cuda.synchronize(device)
        reference = torch.from_numpy(prepflow_gpu.reference(check.array, MEAN, STD))
        results["bits_equal_cpu_reference"] = torch.equal(ours[0].cpu(), reference)
        results["bits_equal_torch_formula"] = torch.equal(ours[0], theirs)
        results["max_abs_diff_torch_formula"] = (ours[0] - theirs).abs().max().item()

        def prepflow_step(i):
            ours[0] = handoff.normalize_on_gpu(normalizer, pinned[i % BUFFERS], device)

        def torch_step(i):
            ours[0] = torch_normalize(host[i % BUFFERS].to(device, non_blocking=True), mean, std)

        def copy_step(i):
            ours[0] = host[i % BUFFERS].to(device, non_blocking=True)

        floats = torch.empty((args.batch, 3, args.size, args.size)).pin_memory()

        def cpu_path_step(i):
            prepflow_gpu.reference(pinned[i % BUFFERS].array, MEAN, STD, out=floats.numpy())
            ours[0] = floats.to(device, non_blocking=False)

        for name, step, n in (("prepflow", prepflow_step, args.batches),
                              ("torch", torch_step, args.batches),
                              ("uint8_copy_only", copy_step, args.batches),
                              ("cpu_path", cpu_path_step, max(3, args.batches // 10))):
            seconds, cpu = timed(step, n, device)
            results[f"{name}_batches_per_s"] = round(1 / seconds, 1)
            results[f"{name}_host_cpu_ms_per_batch"] = round(cpu * 1e3, 2)
        results["prepflow_vs_torch"] = round(
            results["prepflow_batches_per_s"] / results["torch_batches_per_s"], 2)
        results["prepflow_vs_cpu_path"] = round(
            results["prepflow_batches_per_s"] / results["cpu_path_batches_per_s"], 2)
    finally:
        normalizer.close()
        for b in pinned + [check]:
            b.free()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    ok, why = prepflow_gpu.available()
    if not ok or not torch.cuda.is_available():
        sys.exit(f"bench_torch: no usable CUDA device: {why}")
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "batch": args.batch, "size": args.size, "batches": args.batches}
    results.update(run(args))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
