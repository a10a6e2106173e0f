"""The hand-off of a batch to torch on the GPU: prepflow's DeviceNormalizer
copies a uint8 batch to the device and normalizes it into a tensor torch
allocated, ordered against torch's streams both ways.

Kept apart from the loader (it needs torch and nothing of prepflow's C++
module) so that client/gpu/python/test_torch_handoff.py runs this very code
on a GPU machine through the standalone shim, under compute-sanitizer.
"""
import torch


def normalize_on_gpu(normalizer, batch, device):
    """A float32 NCHW tensor on `device` holding `batch` normalized.

    `normalizer` has submit(batch, out_pointer, consumer_stream), stream and
    synchronize() (_prepflow.DeviceNormalizer or the shim's); `batch` has
    image_shape (n, h, w, 3). The kernel waits for the work already on the
    current stream, even the default one (cuda_stream 0), which may still use
    the block torch.empty hands back; the current stream then waits for the
    kernel, so whatever torch runs next sees the images. An empty batch
    enqueues nothing.
    """
    n, h, w, _ = batch.image_shape
    images = torch.empty((n, 3, h, w), dtype=torch.float32, device=device)
    current = torch.cuda.current_stream(device)
    normalizer.submit(batch, images.data_ptr(), current.cuda_stream)
    current.wait_stream(torch.cuda.ExternalStream(normalizer.stream, device=device))
    return images
