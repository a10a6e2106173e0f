"""A standalone Python shim over client/gpu (ctypes over libprepflow_gpu_c),
for GPU machines where prepflow's full Python module cannot be built (no
Debian libraries): its DeviceNormalizer has the interface of
_prepflow.DeviceNormalizer, so prepflow/_gpu.py's hand-off to torch runs
unchanged on it. Only for tests: see test_torch_handoff.py.

    PREPFLOW_GPU_LIB=build-gpu/libprepflow_gpu_c.so python3 test_torch_handoff.py
"""
import ctypes
import importlib.util
import os

import numpy as np

_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_ERROR = 512


def _load():
    path = os.environ.get("PREPFLOW_GPU_LIB", "libprepflow_gpu_c.so")
    lib = ctypes.CDLL(path)
    c = ctypes
    sig = {
        "pf_gpu_available": (c.c_int, [c.c_char_p, c.c_size_t]),
        "pf_gpu_batches_in_flight": (c.c_int, []),
        "pf_gpu_alloc_pinned": (c.c_void_p, [c.c_size_t]),
        "pf_gpu_free_pinned": (None, [c.c_void_p]),
        "pf_gpu_normalize_reference": (None, [c.c_void_p, c.c_int64, c.c_int, c.c_int,
                                              c.c_void_p, c.c_void_p, c.c_void_p]),
        "pf_gpu_normalizer_create": (c.c_void_p, [c.c_int, c.c_int64, c.c_int, c.c_int,
                                                  c.c_void_p, c.c_void_p, c.c_char_p,
                                                  c.c_size_t]),
        "pf_gpu_normalizer_submit": (c.c_int, [c.c_void_p, c.c_void_p, c.c_int64, c.c_void_p,
                                               c.c_void_p, _RELEASE, c.c_void_p, c.c_char_p,
                                               c.c_size_t]),
        "pf_gpu_normalizer_synchronize": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t]),
        "pf_gpu_normalizer_stream": (c.c_void_p, [c.c_void_p]),
        "pf_gpu_normalizer_destroy": (None, [c.c_void_p]),
    }
    for name, (restype, argtypes) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
    return lib


_lib = _load()
BATCHES_IN_FLIGHT = _lib.pf_gpu_batches_in_flight()


def load_handoff():
    """prepflow/_gpu.py, the Loader's own hand-off to torch, loaded from the
    source tree (it needs torch, nothing of the C++ module)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "python", "prepflow", "_gpu.py")
    spec = importlib.util.spec_from_file_location("prepflow_gpu_handoff", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def available():
    """(usable, why not)."""
    why = ctypes.create_string_buffer(_ERROR)
    ok = _lib.pf_gpu_available(why, _ERROR)
    return bool(ok), why.value.decode()


def _floats(values):
    return np.ascontiguousarray(values, dtype=np.float32)


def reference(images, mean, std, out=None):
    """The CPU reference of n x h x w x 3 uint8 images: n x 3 x h x w float32
    (into `out`, a C-contiguous float32 array of that shape, if given)."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    n, h, w, _ = images.shape
    if out is None:
        out = np.empty((n, 3, h, w), dtype=np.float32)
    if out.shape != (n, 3, h, w) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"reference: out must be C-contiguous float32 {(n, 3, h, w)}")
    mean, std = _floats(mean), _floats(std)
    _lib.pf_gpu_normalize_reference(images.ctypes.data, n, h, w, mean.ctypes.data,
                                    std.ctypes.data, out.ctypes.data)
    return out


class PinnedBatch:
    """n x h x w x 3 uint8 images in page-locked memory, as a loader's batch.
    `released` turns True when the normalizer hands the memory back."""

    def __init__(self, images):
        images = np.ascontiguousarray(images, dtype=np.uint8)
        self.image_shape = images.shape
        self._pointer = _lib.pf_gpu_alloc_pinned(max(images.nbytes, 1))
        if not self._pointer:
            raise RuntimeError("page-locked allocation failed")
        buffer = (ctypes.c_uint8 * max(images.nbytes, 1)).from_address(self._pointer)
        self.array = np.frombuffer(buffer, dtype=np.uint8)[:images.nbytes].reshape(images.shape)
        self.array[...] = images
        self.released = False

    @property
    def pointer(self):
        return self._pointer

    def free(self):
        if self._pointer:
            _lib.pf_gpu_free_pinned(self._pointer)
            self._pointer, self.array = None, None


class DeviceNormalizer:
    """_prepflow.DeviceNormalizer's interface over the C library."""

    def __init__(self, device, max_samples, h, w, mean, std):
        error = ctypes.create_string_buffer(_ERROR)
        self._mean, self._std = _floats(mean), _floats(std)
        self._handle = _lib.pf_gpu_normalizer_create(device, max_samples, h, w,
                                                     self._mean.ctypes.data,
                                                     self._std.ctypes.data, error, _ERROR)
        if not self._handle:
            raise RuntimeError(error.value.decode())
        # Batches handed to the library, by submission, until it releases
        # them (a batch's memory may be submitted again once released: the
        # release of its earlier submission runs inside the later submit).
        self._held = {}
        self._submissions = 0
        self._release = _RELEASE(self._released)

    def _released(self, token):
        batch = self._held.pop(token)
        batch.released = all(held is not batch for held in self._held.values())

    def submit(self, batch, out, after):
        self._submissions += 1
        token = self._submissions
        self._held[token] = batch
        batch.released = False
        error = ctypes.create_string_buffer(_ERROR)
        n = batch.image_shape[0]
        if not _lib.pf_gpu_normalizer_submit(self._handle, batch.pointer, n, out, after,
                                             self._release, token, error, _ERROR):
            raise RuntimeError(error.value.decode())

    @property
    def stream(self):
        return _lib.pf_gpu_normalizer_stream(self._handle) or 0

    def synchronize(self):
        error = ctypes.create_string_buffer(_ERROR)
        if not _lib.pf_gpu_normalizer_synchronize(self._handle, error, _ERROR):
            raise RuntimeError(error.value.decode())

    def close(self):
        """Waits for the work in flight and releases every batch."""
        if self._handle:
            _lib.pf_gpu_normalizer_destroy(self._handle)
            self._handle = None
