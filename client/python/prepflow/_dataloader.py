"""What a torch DataLoader user passes, as prepflow.Loader reads it: a
torchvision ImageFolder/DatasetFolder object or a list of shard URLs as
`data`, and DataLoader's keywords (docs/pipelines.md has the table).

Each argument is mapped to prepflow's own, or refused with why and what to
do instead; nothing is silently ignored but what changes no batch
(persistent_workers, and pin_memory, where prepflow already pins).
"""
import logging
import math
import os

_log = logging.getLogger("prepflow")

# DataLoader's keywords and what prepflow does with each.
ACCEPTED = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "collate_fn",
            "timeout", "sampler", "batch_sampler", "worker_init_fn", "generator",
            "multiprocessing_context", "pin_memory_device")
_REFUSED = {
    "sampler": "prepflow orders samples itself (shuffle=, seed=; rank=/world_size= split them "
               "across ranks, as DistributedSampler does)",
    "batch_sampler": "prepflow makes batches itself (batch_size=, drop_last=)",
    "worker_init_fn": "prepflow's workers are C++ threads and remote workers, not Python "
                      "processes; seed Python-side randomness with python_tail=",
    "generator": "prepflow's draws come from seed= (per sample, wherever it runs)",
    "multiprocessing_context": "prepflow starts no Python processes",
}


def _default_collate():
    try:
        from torch.utils.data import default_collate
        return default_collate
    except ImportError:
        return None


def apply_keywords(options, given):
    """Pops DataLoader's keywords from `options` into `given` (prepflow's
    own keywords, already collected); raises TypeError/ValueError naming
    the keyword for one that cannot be honoured."""
    dl = {k: options.pop(k) for k in ACCEPTED if k in options}
    for key, why in _REFUSED.items():
        if dl.get(key) is not None:
            raise TypeError(f"{key}: not taken: {why}")
    if dl.get("timeout", 0) not in (0, None):
        raise ValueError("timeout: not taken: a stall surfaces through worker_timeout= and "
                         "storage_timeout_seconds=, each naming what stalled")
    collate = dl.get("collate_fn")
    if collate is not None and collate is not _default_collate():
        raise TypeError("collate_fn: prepflow assembles batches itself (images [B, C, H, W], "
                        "labels [B]); MixUp/CutMix go in batch_ops= (prepflow.ops.MixupCutmix, "
                        "or torchvision.transforms.v2's MixUp, CutMix or RandomChoice of the "
                        "two), anything else in your loop over the batches")
    workers = dl.get("num_workers")
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"num_workers: must be an int >= 0, got {workers!r}")
        if given.get("threads"):
            raise ValueError("num_workers: give threads= or num_workers=, not both")
        given["threads"] = max(1, workers)  # 0: DataLoader's main process, one thread here
    factor = dl.get("prefetch_factor")
    if factor is not None:
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ValueError(f"prefetch_factor: must be an int >= 1, got {factor!r}")
        # DataLoader keeps prefetch_factor batches per worker in flight.
        given["prefetch"] = min(256, factor * max(1, workers or 1))
    for key in ("pin_memory", "pin_memory_device", "persistent_workers"):
        if dl.get(key):
            _log.info("%s: nothing to do (prepflow's threads persist across epochs; batches "
                      "for device='cuda' are staged in pinned memory)", key)


def _folder_class():
    try:
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader, pil_loader
        return DatasetFolder, IMG_EXTENSIONS, (default_loader, pil_loader)
    except ImportError:
        return None, None, None


def _folder_root(dataset, transform, pipeline):
    """(root, transform) of a torchvision ImageFolder/DatasetFolder, or a
    TypeError/ValueError saying what prepflow cannot take from it."""
    _, image_extensions, loaders = _folder_class()
    name = type(dataset).__name__
    if dataset.loader not in loaders:
        raise TypeError(f"data: {name} with a custom loader ({dataset.loader!r}) cannot run in "
                        f"prepflow, which decodes JPEG, PNG, BMP, PPM/PGM, TIFF and WebP itself; "
                        f"give the folder's path and a transform")
    if dataset.target_transform is not None:
        raise TypeError(f"data: {name}.target_transform is not run by prepflow; apply it to "
                        f"the labels of each batch")
    extensions = getattr(dataset, "extensions", None)
    if extensions is not None and {e.lower() for e in extensions} - set(image_extensions):
        raise ValueError(f"data: {name} with extensions {extensions!r}: prepflow reads "
                         f"{', '.join(image_extensions)}")
    expected = {c: i for i, c in enumerate(sorted(dataset.class_to_idx))}
    if dataset.class_to_idx != expected:
        raise ValueError(f"data: {name}.class_to_idx is not the sorted folder names (prepflow "
                         f"labels classes as ImageFolder does by default)")
    if dataset.transform is not None:
        if transform is not None or pipeline is not None:
            raise ValueError(f"data: {name} has a transform, and so does this Loader: give one")
        transform = dataset.transform
    return dataset.root, transform, list(dataset.classes)


def _shard_list(urls):
    """A list of shard paths or URLs as one brace pattern."""
    items = [os.fsdecode(u) for u in urls]
    if not items:
        raise ValueError("data: an empty list of shards")
    for u in items:
        if any(c in u for c in ",{}"):
            raise ValueError(f"data: shard {u!r}: a listed shard may not hold ',', '{{' or '}}' "
                             f"(give a brace pattern instead)")
    return items[0] if len(items) == 1 else "{" + ",".join(items) + "}"


def mixture(data):
    """The `mix` option's text for `data` given as a list of (dataset,
    weight) pairs, a weighted mixture; None when `data` is not one."""
    if not (isinstance(data, (list, tuple)) and data and
            all(isinstance(p, tuple) and len(p) == 2 for p in data)):
        return None
    parts = []
    for source, weight in data:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"data: a mixture's source is a path or a URL, got {source!r}")
        path = os.fspath(source)
        depth = 0
        for c in path:
            depth += 1 if c == "{" else -1 if c == "}" else 0
            if c == "," and depth == 0:
                raise ValueError(f"data: the mixture's source {path!r} has a comma outside braces")
        if (isinstance(weight, bool) or not isinstance(weight, (int, float)) or
                not math.isfinite(weight) or weight <= 0):
            raise ValueError(f"data: the weight of {path!r} must be a number > 0, got {weight!r}")
        parts.append(f"{path}:{float(weight)!r}")
    return ",".join(parts)


def resolve_data(data, transform, pipeline):
    """(path, transform, the classes a dataset object has or None) for what
    `data` is."""
    if isinstance(data, (str, bytes, os.PathLike)):
        return data, transform, None
    if isinstance(data, (list, tuple)) and all(isinstance(u, (str, bytes, os.PathLike))
                                               for u in data):
        return _shard_list(data), transform, None
    folder, _, _ = _folder_class()
    if folder is not None and isinstance(data, folder):
        return _folder_root(data, transform, pipeline)
    raise TypeError(f"data: expected a path, a URL, a list of shards or a torchvision "
                    f"ImageFolder, got {type(data).__name__}")
