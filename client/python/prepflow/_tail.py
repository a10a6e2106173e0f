"""The Python tail: the transforms of a Compose that prepflow cannot
translate, and everything after the first of them, run here on the trainer
after prepflow's native stages (Loader(python_tail="process" | "thread")).

Each sample goes through the tail alone, as in a DataLoader worker: a PIL
image when prepflow's part ends in an image (what torchvision transforms
before ToTensor expect), a tuple of them when it ends in FiveCrop's or
TenCrop's crops, a float32 CHW tensor when it ends in a tensor, and for
audio its float32 waveform [channels, frames] (or features) at its own
length, unpadded. Audio outputs of several lengths (one dimension that
varies) are padded with zeros to the batch's longest, with their lengths,
as prepflow pads its own.
Before each sample, torch's, Python's and NumPy's global random generators
are seeded from (seed, epoch, sample index), so in "process" mode (a pool of
worker processes, each running whole samples) the tail's output does not
depend on the number of workers or on which one ran a sample, as long as the
user's transforms draw only from those generators. In "thread" mode the
threads share those generators with each other and with the trainer: fast to
start, nothing to pickle, but not reproducible.

The tail never runs on remote workers and is not covered by prepflow's
checksum (which covers what the native stages made).
"""
import concurrent.futures
import multiprocessing
import random
import time

import numpy as np
import torch

_MASK = (1 << 64) - 1
_tail = None  # the transforms, in a worker process (set by _init)


def sample_seed(seed, epoch, index, copy=0):
    """A 64-bit seed for one sample: splitmix64 over (seed, epoch, index),
    and its echoed copy's index when not 0."""
    x = seed & _MASK
    for v in (epoch, index) if copy == 0 else (epoch, index, copy):
        x = (x ^ (v & _MASK)) + 0x9E3779B97F4A7C15 & _MASK
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x


def _init(tail):
    global _tail
    _tail = tail
    torch.set_num_threads(1)  # one sample at a time per process, like DataLoader's workers


def _to_array(y, where):
    if isinstance(y, torch.Tensor):
        return y.detach().cpu().contiguous().numpy()
    if isinstance(y, np.ndarray):
        return y
    try:
        return np.asarray(y)  # a PIL image: HWC uint8
    except Exception as e:  # noqa: BLE001 (what the user's transform returned)
        raise TypeError(f"{where}: returned {type(y).__name__}, not a tensor, array or "
                        f"image") from e


def _unpadded(image, length, dim):
    """Sample `image` of a padded batch at its own `length` along `dim`."""
    if length is None:
        return image
    where = [slice(None)] * image.ndim
    where[dim] = slice(0, int(length))
    return image[tuple(where)]


def stack(arrays, pad):
    """(one array, lengths or None): `arrays` stacked; with `pad`, values
    that differ in one dimension are padded with zeros to the longest along
    it, and their lengths returned."""
    shapes = {a.shape for a in arrays}
    if len(shapes) <= 1:
        return np.stack(arrays), None
    ranks = {len(s) for s in shapes}
    varying = [d for d in range(max(ranks)) if len({s[d] for s in shapes}) > 1] \
        if len(ranks) == 1 else []
    if not pad or len(varying) != 1:
        raise ValueError(f"python tail: its outputs differ in shape ({sorted(shapes)}): end it "
                         f"with a fixed-size crop or resize so that samples can be batched"
                         + ("" if not pad else "; audio may vary in one dimension only"))
    dim = varying[0]
    longest = max(a.shape[dim] for a in arrays)
    out = []
    for a in arrays:
        widths = [(0, 0)] * a.ndim
        widths[dim] = (0, longest - a.shape[dim])
        out.append(np.pad(a, widths))
    return np.stack(out), np.array([a.shape[dim] for a in arrays], np.int64)


def run_chunk(images, epoch, indices, seed, tail=None, copies=None, lengths=None, dim=-1):
    """The tail over some samples of a batch: (their outputs, as arrays;
    the CPU seconds it took in this process or thread). `lengths`/`dim`: a
    ragged batch's, each sample taken unpadded."""
    from PIL import Image  # torchvision's dependency; imported where it runs

    clock = time.process_time if tail is None else time.thread_time
    start = clock()
    tail = tail if tail is not None else _tail
    out = []
    copies = copies if copies is not None else [0] * len(indices)
    lengths = lengths if lengths is not None else [None] * len(indices)
    for image, index, copy, length in zip(images, indices, copies, lengths):
        image = _unpadded(image, length, dim)
        s = sample_seed(seed, epoch, int(index), int(copy))
        torch.manual_seed(s)
        random.seed(s)
        np.random.seed(s & 0xFFFFFFFF)
        if image.dtype != np.uint8:
            x = torch.from_numpy(image.copy())
        elif image.ndim == 4:  # FiveCrop's or TenCrop's crops: a tuple, as torchvision's
            x = tuple(Image.fromarray(crop) for crop in image)
        else:
            x = Image.fromarray(image)
        try:
            y = tail(x)
        except Exception as e:
            raise RuntimeError(f"python tail: {tail!r} failed on sample {int(index)} of epoch "
                               f"{epoch}: {type(e).__name__}: {e}") from e
        out.append(_to_array(y, f"python tail on sample {int(index)}"))
    return out, clock() - start


class Tail:
    """Runs `tail` (a callable) over batches in a pool of `workers` processes
    or threads; submit() returns a future of the stacked output."""

    def __init__(self, tail, mode, workers, seed):
        if mode not in ("process", "thread"):
            raise ValueError(f"python_tail: '{mode}' is not 'process' or 'thread'")
        self.tail, self.mode, self.workers, self.seed = tail, mode, workers, seed
        if mode == "thread":
            self._pool = concurrent.futures.ThreadPoolExecutor(workers,
                                                               thread_name_prefix="prepflow-tail")
        else:
            # fork, as DataLoader does, so that any callable works; spawn once
            # CUDA is initialized here (a forked child cannot use it).
            method = "spawn" if torch.cuda.is_initialized() else "fork"
            self._pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context(method), initializer=_init,
                initargs=(tail,))

    def submit(self, images, epoch, indices, copies=None, lengths=None, dim=-1, pad=False):
        """The tail over one batch (NHWC uint8 or NCHW float32 numpy; a
        ragged one with its `lengths` along sample dimension `dim`), in
        chunks over the workers; a callable that returns the stacked result,
        its lengths (None unless `pad` padded them) and the CPU seconds the
        workers spent on it."""
        n = len(indices)
        if n == 0:  # on_error="skip" can empty a batch
            return lambda: (None, None, 0.0)
        step = max(1, -(-n // self.workers))
        tail = self.tail if self.mode == "thread" else None

        def part(values):
            return None if values is None else values[i:i + step]
        futures = []
        for i in range(0, n, step):
            futures.append(self._pool.submit(run_chunk, images[i:i + step], epoch,
                                             indices[i:i + step], self.seed, tail,
                                             part(copies), part(lengths), dim))

        def result():
            parts = [f.result() for f in futures]
            stacked, out_lengths = stack([v for p in parts for v in p[0]], pad)
            return stacked, out_lengths, sum(p[1] for p in parts)
        return result

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)
