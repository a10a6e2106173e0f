"""The torch hand-off of GPU delivery, on a real device: prepflow/_gpu.py (the
code the Loader runs) over the standalone shim, against torch's default
stream, a side stream, an external stream, a DLPack consumer and a second
device. Each race test makes the race happen: torch's earlier work on the
memory is held back with torch.cuda._sleep, so a kernel that did not wait
for it would be overwritten (or read too early), and the bits would differ
from the CPU reference.

    PREPFLOW_GPU_LIB=build-gpu/libprepflow_gpu_c.so python3 test_torch_handoff.py [--repeat N]

Exits 0 when every test passed in each of the N rounds (races that show only
sometimes need many); no usable device is a failure (this file is only run
where one is expected: scripts/gpu_check.sh).
"""
import argparse
import os
import sys
import unittest

import numpy as np
import torch
import torch.utils.dlpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepflow_gpu  # noqa: E402

handoff = prepflow_gpu.load_handoff()

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# About 50 ms of GPU time on current GPUs: long enough that a kernel that did
# not wait would run inside it; a pass does not depend on the length.
SLEEP_CYCLES = 100_000_000


def images(n, h, w, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


class HandOff(unittest.TestCase):
    N, H, W = 4, 40, 56

    def setUp(self):
        ok, why = prepflow_gpu.available()
        if not ok or not torch.cuda.is_available():
            self.fail(f"no usable CUDA device: {why}")
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        self.normalizer = prepflow_gpu.DeviceNormalizer(0, self.N, self.H, self.W, MEAN, STD)
        self.batches = []

    def tearDown(self):
        self.normalizer.close()
        for b in self.batches:
            self.assertTrue(b.released)
            b.free()

    def batch(self, seed):
        b = prepflow_gpu.PinnedBatch(images(self.N, self.H, self.W, seed))
        self.batches.append(b)
        return b

    def expect_exact(self, tensor, batch):
        want = prepflow_gpu.reference(batch.array, MEAN, STD)
        got = tensor.cpu().numpy()
        self.assertEqual(got.tobytes(), want.tobytes(), "not bit-identical to the CPU reference")

    def race_on_current_stream(self):
        """torch's last step still writes a block when it is freed and
        torch.empty hands it back for the batch; returns (images, batch)."""
        shape = (self.N, 3, self.H, self.W)
        step = torch.empty(shape, dtype=torch.float32, device=self.device)
        torch.cuda._sleep(SLEEP_CYCLES)
        step.fill_(float("nan"))  # the step's late write
        block = step.data_ptr()
        del step
        b = self.batch(len(self.batches))
        out = handoff.normalize_on_gpu(self.normalizer, b, self.device)
        self.assertEqual(out.data_ptr(), block, "torch did not reuse the block: no race to see")
        return out, b

    def test_default_stream(self):
        self.assertEqual(torch.cuda.current_stream().cuda_stream, 0)
        out, b = self.race_on_current_stream()
        torch.cuda.synchronize()
        self.expect_exact(out, b)

    def test_side_stream(self):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            out, b = self.race_on_current_stream()
            result = out * 1.0  # the consumer reads on the same stream, right after
        torch.cuda.synchronize()
        self.expect_exact(result, b)

    def test_external_stream(self):
        raw = torch.cuda.Stream()  # a stream torch did not make current itself
        external = torch.cuda.ExternalStream(raw.cuda_stream, device=self.device)
        with torch.cuda.stream(external):
            out, b = self.race_on_current_stream()
            result = out.clone()
        torch.cuda.synchronize()
        self.expect_exact(result, b)

    def test_a_consumer_after_the_kernel(self):
        # The kernel is held back behind the current stream; a reader that
        # follows the current stream (here on a side stream, through DLPack's
        # stream hand-shake) must see the normalized images, not the block's
        # old contents.
        torch.cuda._sleep(SLEEP_CYCLES)
        b = self.batch(7)
        out = handoff.normalize_on_gpu(self.normalizer, b, self.device)
        reader = torch.cuda.Stream()
        # Asked for on the producer's (current) stream: DLPack makes the
        # reader's stream wait for it, which waits for the kernel.
        capsule = out.__dlpack__(stream=reader.cuda_stream)
        with torch.cuda.stream(reader):
            result = torch.utils.dlpack.from_dlpack(capsule).clone()
        torch.cuda.synchronize()
        self.expect_exact(result, b)

    def test_steady_state_with_a_training_step(self):
        # Many batches, each consumed by a step on the default stream; host
        # memory comes back two batches later and is then overwritten, which
        # must not change a result already copied.
        weights = torch.randn(self.W, self.W, device=self.device)
        results = []
        for i in range(24):
            b = self.batch(100 + i)
            out = handoff.normalize_on_gpu(self.normalizer, b, self.device)
            results.append((out @ weights, out.clone(), b))
            for old in self.batches[:-prepflow_gpu.BATCHES_IN_FLIGHT]:
                self.assertTrue(old.released)
        torch.cuda.synchronize()
        for _, copy, b in results:
            self.expect_exact(copy, b)

    def test_empty_batch(self):
        b = prepflow_gpu.PinnedBatch(np.zeros((0, self.H, self.W, 3), np.uint8))
        self.batches.append(b)
        out = handoff.normalize_on_gpu(self.normalizer, b, self.device)
        self.assertEqual(tuple(out.shape), (0, 3, self.H, self.W))
        self.assertTrue(b.released)

    def test_second_device(self):
        if torch.cuda.device_count() < 2:
            self.skipTest("one GPU")
        second = torch.device("cuda", 1)
        normalizer = prepflow_gpu.DeviceNormalizer(1, self.N, self.H, self.W, MEAN, STD)
        try:
            b = self.batch(11)
            out = handoff.normalize_on_gpu(normalizer, b, second)
            self.assertEqual(torch.cuda.current_device(), 0)  # torch's device left alone
            self.assertEqual(out.device, second)
            torch.cuda.synchronize(second)
            self.expect_exact(out, b)
        finally:
            normalizer.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole suite")
    args = parser.parse_args()
    failed_rounds = 0
    for round_ in range(1, args.repeat + 1):
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(HandOff)
        result = unittest.TextTestRunner(verbosity=2 if args.repeat == 1 else 1).run(suite)
        failed_rounds += not result.wasSuccessful()
        print(f"round {round_}/{args.repeat}: {'passed' if result.wasSuccessful() else 'FAILED'}",
              flush=True)
    print(f"{args.repeat - failed_rounds} of {args.repeat} rounds passed")
    return 0 if failed_rounds == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
