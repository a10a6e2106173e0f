"""prepflow: training batches from a data-preprocessing pipeline that runs on
this machine's CPUs and, where they are not enough, on remote workers.

    import prepflow
    loader = prepflow.Loader("/data/imagenet/train", "imagenet-train", batch_size=256, seed=0,
                             offload="auto", scheduler="sched-host:7060")
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:      # torch tensors, no copy
            ...

Each pass over the loader is one epoch. Batches are bit-identical wherever
their samples ran; `stats()["checksum"]` equals `prepflow run`'s for the
same options. `state_dict()` / `load_state_dict()` resume mid-epoch with
exactly the samples not yet delivered.

Images come as float32 NCHW (the imagenet-* pipelines normalise) or uint8
NHWC (a pipeline that ends in a crop), labels as int64; as torch tensors
sharing the loader's memory through DLPack, or as NumPy arrays when torch is
not installed (or `as_numpy=True`). A batch's memory returns to the loader
when the last tensor viewing it is freed.
"""
import collections
import difflib
import logging
import os
import re

try:
    import numpy as _numpy  # noqa: F401 (batches come as NumPy arrays or through them)
except ImportError as e:  # a Python whose numpy is missing: say so now, not at a batch
    raise ImportError("prepflow needs numpy: pip install numpy") from e

from . import _dataloader, _prepflow, ops, transforms
from ._version import __version__

try:
    import torch
    from torch.utils import dlpack as _torch_dlpack
    from . import _gpu, _tail
except ImportError:  # NumPy only
    torch = None

__all__ = ["Loader", "Batch", "ops", "transforms", "load_plugin", "plugin_ops", "__version__"]
_log = logging.getLogger("prepflow")

# How many epochs a loader with epochs=None may run: in effect, unbounded.
_UNBOUNDED_EPOCHS = 1 << 30

# Every Loader option is one row of a table in C++ (client/loader_options.h;
# docs/options.md): its keyword, flag, default, bounds and help. Defaults
# come from it (_D), so each exists once, in LoaderOptions.
_D = _prepflow.loader_option_defaults()
_ROWS = _prepflow.loader_option_rows()  # (keyword, flag, kind, help, is_keyword)
_KEYWORDS = frozenset(row[0] for row in _ROWS if row[4])


def _options_doc():
    """The options section of Loader's docstring, from the table: each
    keyword with its default and help (flags named in the help become
    keywords)."""
    keyword = {row[1]: row[0] for row in _ROWS if row[4]}

    def as_keyword(m):
        return f"`{keyword[m.group(1)]}`" if m.group(1) in keyword else m.group(0)

    lines = ["", "    Every option (docs/options.md; `prepflow run --help` names the same as flags):", ""]
    for key, _flag, kind, text, is_keyword in _ROWS:
        if is_keyword:
            default = _D[key]
            lines.append(f"    {key} ({kind}; default {default!r}): "
                         f"{re.sub(r'--([a-z0-9-]+)', as_keyword, text)}")
    return "\n".join(lines) + "\n"


def load_plugin(path):
    """Loads a plugin of custom ops (a shared library built against
    pipeline/ops/plugin_api.h), as `--plugin` does; loading it again does
    nothing. FileNotFoundError or ValueError naming the file."""
    _prepflow.load_plugin(os.fspath(path))


def plugin_ops():
    """The loaded plugins' ops: [{"name", "summary", "random", "plugin"}]."""
    return _prepflow.plugin_ops()


_INT32_MAX, _INT64_MAX, _UINT64_MAX = 2**31 - 1, 2**63 - 1, 2**64 - 1


def _check_int(name, value, minimum, maximum=_INT32_MAX):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name}: must be at most {maximum}, got {value}")


# The core logs through the logger "prepflow" (levels mapped from spdlog's:
# trace, debug, info, warn, error, critical); its lines are collected in C++
# and emitted here, on the calling thread, after each call into the core.
_PY_LEVELS = (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def _drain_logs():
    lines, dropped = _prepflow.take_logs()
    for level, text in lines:
        _log.log(_PY_LEVELS[min(level, len(_PY_LEVELS) - 1)], "%s", text)
    if dropped:
        _log.warning("%d more lines from prepflow's core were dropped (over 1000 waiting)",
                     dropped)


def _follow_log_level():
    """The core logs what the logger "prepflow" would show (PREPFLOW_LOG_LEVEL,
    when set, decides instead)."""
    if os.environ.get("PREPFLOW_LOG_LEVEL"):
        return
    level = _log.getEffectiveLevel()
    spd = next((i for i, py in enumerate(_PY_LEVELS) if py >= level), len(_PY_LEVELS))
    _prepflow.set_log_level(spd)


def _pipeline_text(pipeline, transform, batch_ops=()):
    """The `pipeline` option as the core reads it: a preset, a path or text."""
    if batch_ops:
        batch_ops = transforms.to_batch_ops(batch_ops)
        text = _pipeline_text(pipeline, transform)
        if "{" not in text:  # a preset or a file: its text is read here
            raise ValueError("batch_ops: give the pipeline as a transform, ops or text to add "
                             "batch ops to it")
        return text + ops.pipeline_text(batch_ops)
    if transform is not None:
        if pipeline is not None:
            raise ValueError("pass either pipeline or transform, not both")
        if isinstance(transform, dict):
            return _record_text(transform, "transform")
        return transforms.to_pipeline_text(transform)
    if isinstance(pipeline, dict):
        return _record_text(pipeline, "pipeline")
    if pipeline is None:
        raise ValueError("give transform= (your torchvision Compose) or pipeline= (a preset "
                         "such as 'imagenet-train', prepflow.ops objects or pipeline text): "
                         "prepflow does not guess an augmentation, and decoded images of "
                         "different sizes cannot be batched")
    if isinstance(pipeline, (str, os.PathLike)):
        return os.fspath(pipeline)
    if isinstance(pipeline, ops.Op):
        pipeline = [pipeline]
    if isinstance(pipeline, (list, tuple)) and all(isinstance(s, ops.Op) for s in pipeline):
        return ops.pipeline_text(pipeline, name="python")
    return transforms.to_pipeline_text(pipeline)  # a torchvision transform given as pipeline


def _record_text(mapping, option):
    """Pipeline text for records of several fields: `mapping` is {field:
    stages}, each a list of prepflow.ops objects or (transform=) a
    torchvision or torchaudio transform, run on the record's member of that
    name ("jpg", "flac", "jpg;png"); a field mapped to None is carried to the
    batch untouched, as its bytes."""
    stages, carry = [], []
    for field, value in mapping.items():
        if value is None:
            carry.append(field)
            continue
        if isinstance(value, ops.Op):
            value = [value]
        if isinstance(value, (list, tuple)) and all(isinstance(s, ops.Op) for s in value):
            found = list(value)
        else:
            try:
                found = transforms.to_stages(value)
            except ValueError as e:
                raise ValueError(f"{option}[{field!r}]: {e}") from None
        stages.extend(s.on(field) for s in found)
    if not stages:
        raise ValueError(f"{option}: no field has stages (a field mapped to None is only "
                         "carried)")
    return ops.pipeline_text(stages, name="record", carry=carry)


def _delivery(source):
    """transforms.Delivery for a torchvision transform translated whole;
    None for ops, text, a preset, or one that ends in Python's tail."""
    if isinstance(source, dict):  # the output is the last field's
        fields = [v for v in source.values() if v is not None]
        return _delivery(fields[-1]) if fields else None
    if source is None or isinstance(source, (str, os.PathLike, ops.Op)) or (
            isinstance(source, (list, tuple)) and all(isinstance(x, ops.Op) for x in source)):
        return None
    try:
        out = transforms.delivery(source)
    except ValueError:  # a tail runs what is not translated, or the pipeline is refused
        return None
    return out if out.chw or out.channels == 1 else None


class Batch:
    """One batch: `images`, `labels`, and where it stands (`epoch`, `number`,
    `indices`: the dataset index of each sample; `copies`: with data echoing,
    which copy of it each is, 0 for the first).

    Records (audio, or data with transcripts) also come as `fields`, a dict:
    the pipeline's output under its field's name ("audio": a waveform or
    features, zero-padded to the longest in the batch when lengths vary),
    "audio_lengths" (int64 [batch]: each one's length before padding, along
    its one dimension that varies: frames) when they vary, "label" where the
    data has classes, "text" (a list of str) where it has transcripts, and
    "index". `images` is then the same tensor as the field's."""

    __slots__ = ("images", "labels", "epoch", "number", "indices", "copies", "fields")

    def __init__(self, images, labels, epoch, number, indices, copies=None, fields=None):
        self.images, self.labels = images, labels
        self.epoch, self.number, self.indices = epoch, number, indices
        self.copies = copies if copies is not None else [0] * len(indices)
        self.fields = fields

    def __iter__(self):  # images, labels = batch
        return iter((self.images, self.labels))



def _token_ids(value):
    """Token ids (int32 in the batch) as int64, what embeddings and losses
    take; any other value as it is."""
    if isinstance(value, _numpy.ndarray):
        return value.astype(_numpy.int64) if value.dtype == _numpy.int32 else value
    if torch is not None and isinstance(value, torch.Tensor) and value.dtype == torch.int32:
        return value.long()
    return value

class Loader:
    """Ready batches of `data` (an ImageFolder, or WebDataset .tar shards: one
    file, a folder, or a brace pattern such as "shards/shard-{000000..000099}.tar";
    or the same at a URL: "https://host/shard-{000000..000099}.tar",
    "s3://bucket/prefix", with S3 credentials from the AWS_* environment;
    or a weighted mixture of them, [(data, weight), ...], docs/mixtures.md)
    through `pipeline`: a preset name ("imagenet-train", the default, or
    "imagenet-eval"), a pipeline file, pipeline text, or a list of
    prepflow.ops objects (docs/pipelines.md). Or pass `transform`, a
    torchvision transform (usually a `Compose`), translated into prepflow ops
    by prepflow.transforms: a ValueError names a transform it cannot
    translate. `batch_ops` ([prepflow.ops.MixupCutmix(mixup_alpha=0.2,
    cutmix_alpha=1.0)]) run on each assembled batch; labels then come as
    float32 [batch, num_classes] soft labels.

    Offloading: `offload` is "off", "auto", "remote" or
    "cut=K[,remote_fraction=F]" (None: the PREPFLOW_OFFLOAD environment
    variable, else off); workers come from `workers` (["host:port", ...]) or
    from a prepflow-scheduler (`scheduler`, or PREPFLOW_SCHEDULER), with
    `weight`, locality `labels` ({"zone": "a"}, or the CLI's "zone=a") and
    `max_remote_cores`. With
    "remote" or "cut=K", creating the loader fails (RuntimeError naming each
    worker and why) when no worker can be reached, unless `fallback_local`
    lets it run locally instead.

    Limits on hostile or broken files: `max_pixels` (an image whose header
    claims more is refused before decoding) and `max_jpeg_scans` (a
    progressive JPEG with more scans is refused); each such sample fails
    alone, as `on_error` says. `stats()["first_errors"]` gives paths as
    os.listdir does (os.fsencode(path) is the file's name).

    Remote data (README, "Remote data"): `storage_timeout_seconds` (60),
    `storage_connect_timeout_seconds` (10), `storage_attempts` (4, the first
    try included), `storage_backoff_seconds` (0.1), `storage_outage_seconds`
    (60: how long an outage is waited out before the run stops; an outage is
    never skipped as bad data, whatever `on_error` says), and the reads started
    ahead of decoding: `read_ahead_requests` (64 at once) within
    `read_ahead_bytes` (256 MiB); `index_cache_dir` (default
    ~/.cache/prepflow/index; "" for none) keeps the indexes of shards without
    a sidecar.

    Reuse across epochs (README, "Caches"): `cache_bytes` (0: none) keeps each
    sample's value at the cache boundary in RAM here, and `cache_dir` with
    `cache_disk_bytes` (0: half the folder's free space) on disk as well, so
    later epochs (and later jobs, from the disk) neither read nor prepare it
    again; `cache_at` picks the boundary (None: the last deterministic one
    before the first random stage). Workers keep theirs at the same boundary.
    Data echoing: `echo` (1) copies of each loaded sample per epoch, each
    with its own random draws from `echo_at` (None: the cache boundary) on,
    shuffled within blocks of `echo_window` samples; an epoch is then `echo`
    times as long (len() counts the copies). `echo="auto"`: the planner picks
    each epoch's factor (1 to `max_echo`): the fewest copies that meet the
    measured demand when fresh samples cannot (the first epoch measures, at
    1); len() follows the epoch about to start, and state_dict() keeps the
    factor of the epoch it stands in.

    Ranks (multi-GPU, README "Ranks"): under torchrun nothing needs passing:
    RANK, WORLD_SIZE and LOCAL_WORLD_SIZE give `rank`, `world_size` and
    `local_ranks` (the ranks on this machine, which share its CPUs), and the
    run id names the training `job` (else PREPFLOW_JOB, or pass `job=`), so
    that workers serve its ranks as one job and the scheduler shares the pool
    per job. `rank_split` ("pad", as DistributedSampler; "drop"; "uneven")
    gives every rank the same number of samples and batches. state_dict() of
    any rank (rank 0's, as DDP checkpoints keep) restores every rank: its
    `step` is the same on all of them. Not with echo="auto" (ranks would
    pick different factors).

    Language models (docs/text.md): with `pack_length=N` a pipeline ending
    in token ids (a Tokenize stage, EOS appended) gives batches of
    `batch_size` rows of N tokens, as dicts: `tokens`, `position_ids`,
    `segment_ids`, `cu_seqlens` and `max_seqlen` (flash-attention's varlen
    arguments), `document_index` and `document_offset` per piece.
    `pack_mode` "greedy" (cut every N tokens) or "best_fit" (documents whole
    where they fit, over windows of `pack_window_tokens`); `pack_pad_id`
    pads. state_dict() resumes mid-sequence; len() is a TypeError (rows per
    epoch follow from the tokens). `format="lines"` reads every non-empty
    line of local files (JSON Lines) as a document; `require_fields`
    (["txt"]) leaves out WebDataset records without those members.

    Security (docs/security.md): `tls_ca` (PEM of the CA that signed the
    workers and the scheduler), `tls_cert`/`tls_key` (this client's, for
    mutual TLS), `tls_server_name` (the name to verify in the servers'
    certificates instead of the dialled host), `auth_token_file` (the bearer
    token to send).

    `device`: "cpu", or "cuda[:N]" to receive batches in GPU memory (falls
    back to CPU, with a log line, where no GPU is present; "cuda" is the
    current device when the loader is created, for its whole life). On a GPU, a
    pipeline ending in `normalize` runs up to it on the CPUs (and workers),
    and its uint8 batches, in page-locked memory, are copied to the GPU and
    normalized there on prepflow's own CUDA stream, which the trainer's
    current stream waits on (no CPU synchronisation). The checksum then
    covers the uint8 images: `prepflow run` with the pipeline minus its
    normalize gives the same.

    Transforms prepflow cannot translate: by default a ValueError naming the
    transform and listing what translates. With `python_tail="process"` (or
    "thread"), the first such transform of a `transform=` Compose and
    everything after it run here in Python, per sample, as in a DataLoader
    worker: prepflow runs (and may offload) the stages before it, and a pool
    of `tail_workers` processes (default: half the CPUs) or threads runs the
    tail, a batch or more ahead of the trainer. In "process" mode torch's,
    Python's and NumPy's random generators are seeded from (seed, epoch,
    sample) before each sample, so the tail's output does not depend on the
    worker count if the transforms draw only from them; "thread" mode is not
    reproducible. The tail never runs on workers (offload="auto" counts its
    CPU as this machine's) and is not in the checksum (which covers
    prepflow's part), and the part before it must end in a fixed size. Not with batch_ops (they would run before the tail).

    Custom C++ ops (pipeline/ops/plugin_api.h): `plugins`, shared libraries to
    load (as `--plugin`), whose ops the pipeline names as
    `prepflow.ops.Custom("name", param=value)`. Workers need the same plugin
    (`prepflow-worker --plugin`); one without it runs the stages before the op
    and the rest runs here.

    Errors arrive as exceptions carrying prepflow's message: ValueError for
    bad arguments or a bad pipeline, FileNotFoundError and PermissionError for
    the dataset, RuntimeError for the rest (a sample failing under
    on_error="fail", a worker refusing the job).
    """

    def __init__(self, data, pipeline=None, batch_size=_D["batch_size"], *, transform=None,
                 batch_ops=(), seed=_D["seed"], epochs=None, shuffle=_D["shuffle"],
                 drop_last=_D["drop_last"], threads=_D["threads"], prefetch=_D["prefetch"],
                 offload=_D["offload"], workers=_D["workers"], scheduler=_D["scheduler"],
                 weight=_D["weight"], labels=_D["labels"],
                 max_remote_cores=_D["max_remote_cores"], device="cpu", rank=_D["rank"],
                 world_size=_D["world_size"], on_error=_D["on_error"], format=_D["format"],
                 max_pixels=_D["max_pixels"], demand=_D["demand"],
                 bandwidth_mbps=_D["bandwidth_mbps"], worker_timeout=_D["worker_timeout"],
                 hedge_after=_D["hedge_after"], fallback_local=_D["fallback_local"],
                 max_jpeg_scans=_D["max_jpeg_scans"], item_samples=_D["item_samples"],
                 tls_ca=_D["tls_ca"], tls_cert=_D["tls_cert"], tls_key=_D["tls_key"],
                 tls_server_name=_D["tls_server_name"], auth_token_file=_D["auth_token_file"],
                 plugins=(), python_tail=None, tail_workers=None, as_numpy=False,
                 storage_timeout_seconds=_D["storage_timeout_seconds"],
                 storage_connect_timeout_seconds=_D["storage_connect_timeout_seconds"],
                 storage_attempts=_D["storage_attempts"],
                 storage_backoff_seconds=_D["storage_backoff_seconds"],
                 storage_outage_seconds=_D["storage_outage_seconds"],
                 read_ahead_requests=_D["read_ahead_requests"],
                 read_ahead_bytes=_D["read_ahead_bytes"], index_cache_dir=_D["index_cache_dir"],
                 cache_bytes=_D["cache_bytes"], cache_dir=_D["cache_dir"],
                 cache_disk_bytes=_D["cache_disk_bytes"], cache_at=_D["cache_at"],
                 echo=_D["echo"], echo_at=_D["echo_at"], echo_window=_D["echo_window"],
                 echo_bytes=_D["echo_bytes"], max_echo=_D["max_echo"],
                 max_file_bytes=_D["max_file_bytes"], metrics_port=None,
                 rank_split=_D["rank_split"], local_ranks=_D["local_ranks"], job=_D["job"],
                 **options):
        # Every option of the table (the keywords above, and any other row
        # given in **options) is checked by its row in C++, errors naming
        # the keyword.
        given = {k: v for k, v in locals().items() if k in _KEYWORDS}
        mix = _dataloader.mixture(data)
        if mix is not None:  # [(dataset, weight), ...]: a weighted mixture
            options["mix"], data = mix, ""
        _dataloader.apply_keywords(options, given)
        for key in options:
            if key not in _KEYWORDS:
                near = difflib.get_close_matches(key, _KEYWORDS, n=1)
                raise TypeError(f"Loader() got an unexpected keyword argument {key!r}" +
                                (f"; did you mean {near[0]!r}?" if near else ""))
        given.update(options)
        _prepflow.check_loader_options(given)
        if metrics_port is not None:
            _check_int("metrics_port", metrics_port, 0, 65535)
        if epochs is not None:
            _check_int("epochs", epochs, 1)
        data, transform, folder_classes = _dataloader.resolve_data(data, transform, pipeline)
        if isinstance(plugins, (str, os.PathLike)):
            plugins = [plugins]
        for plugin in plugins:  # before the pipeline, which may name their ops
            load_plugin(plugin)
        # What the core's batches need to be torchvision's (Grayscale(1),
        # PILToTensor alone); nothing when Python's tail makes them.
        delivery = _delivery(transform if transform is not None else pipeline)
        pipeline, transform, tail = self._split_tail(pipeline, transform, batch_ops,
                                                     python_tail)
        self._delivery = delivery if tail is None else None
        source = transform if transform is not None else pipeline
        # A record's other fields' (the output's is _delivery).
        self._field_delivery = {k: _delivery(v) for k, v in source.items()
                                if v is not None} if isinstance(source, dict) else {}
        pipeline = _pipeline_text(pipeline, transform, batch_ops)
        self._options = dict(given, data=os.fsencode(data), pipeline=pipeline,
                             metrics_port=-1 if metrics_port is None else metrics_port)
        # The echo factor of the epoch the position is in (echo="auto": a
        # loader resumed mid-epoch must run it again).
        self._echo = 1
        self._epochs = epochs
        self._as_numpy = bool(as_numpy) or torch is None
        self._device = self._resolve_device(device)
        self._normalizer = None  # GPU delivery, made with the first C++ loader
        self._tail = None
        if tail is not None:
            if tail_workers is None:
                tail_workers = max(1, (os.cpu_count() or 2) // 2)
            _check_int("tail_workers", tail_workers, 1)
            self._tail = _tail.Tail(tail, python_tail, tail_workers, seed)
            _log.info("python tail (%s, %d workers): %r", python_tail, tail_workers, tail)
            self._options["gpu_normalize"] = False  # the tail needs the batch on the CPU
        elif self._device is not None:
            ok, why = _prepflow.gpu_available()
            self._options["gpu_normalize"] = ok
            if not ok:
                _log.warning("device %s: prepflow's GPU path is unavailable (%s); batches are "
                             "copied to the GPU by torch", device, why)
        # Where the next batch handed out stands: (epoch, batch number).
        self._epoch = 0
        self._position = 0
        # Where that batch starts in the epoch's order (0: where planned; a
        # batch filled past failed samples took the next one's first).
        self._sample = 0
        # Packed (pack_length): how far into the document at _sample the next
        # row starts (greedy), or which row of the window there (best_fit).
        self._pack = (0, 0)
        # The C++ loader, the (epoch, number) its next batch will have, and a
        # batch it returned that belongs to a later epoch than was iterated.
        self._core = None
        self._core_at = None
        self._pending = None
        # Over everything handed out, across C++ loaders: the CLI's checksum.
        self._checksum = 0
        self._padding_bytes = 0
        self._record_kind = None  # see _record
        self._images = 0
        self._remote_images = 0
        self._batches = 0
        self._finished = {}  # totals of C++ loaders already replaced
        # Probe now, so that a bad dataset or pipeline fails here.
        self._ensure_core()
        if folder_classes is not None and folder_classes != self.classes:
            raise ValueError(f"data: the ImageFolder's classes ({len(folder_classes)}) are not "
                             f"the ones prepflow finds under its root ({len(self.classes)})")

    # -- configuration -------------------------------------------------

    @staticmethod
    def _split_tail(pipeline, transform, batch_ops, python_tail):
        """(pipeline, transform, tail): with python_tail, a torchvision
        transform is split into the stages prepflow runs and the tail."""
        if python_tail is None:
            return pipeline, transform, None
        if python_tail not in ("process", "thread"):
            raise ValueError(f"python_tail: '{python_tail}' is not 'process', 'thread' or None")
        if torch is None:
            raise ValueError("python_tail: needs torch (Debian: python3-torch)")
        source = transform if transform is not None else pipeline
        if isinstance(source, dict):
            raise ValueError("python_tail: a pipeline of several fields (a dict) runs in "
                             "prepflow alone; apply the untranslatable part after the loader")
        if source is None or isinstance(source, (str, os.PathLike, ops.Op)) or (
                isinstance(source, (list, tuple)) and
                all(isinstance(x, ops.Op) for x in source)):
            return pipeline, transform, None  # nothing of Python's to run
        if transform is not None and pipeline is not None:
            raise ValueError("pass either pipeline or transform, not both")
        stages, tail = transforms.split(source)
        if tail is not None and batch_ops:
            raise ValueError("batch_ops: they run after the whole pipeline, and this one ends "
                             f"in Python ({tail!r}); apply them in Python after the loader")
        return stages, None, tail

    def _resolve_device(self, device):
        device = str(device)
        if device == "cpu":
            return None
        if not device.startswith("cuda"):
            raise ValueError(f"device: '{device}' is not 'cpu' or 'cuda[:N]'")
        if self._as_numpy:
            raise ValueError("device: a CUDA device needs torch (and as_numpy=False)")
        if not torch.cuda.is_available():
            _log.warning("device %s: no CUDA device is available; delivering batches on the CPU",
                         device)
            return None
        device = torch.device(device)
        if device.index is None:
            # "cuda" is the current device now, fixed for the loader's life
            # (its normalizer and pinned memory belong to one device).
            device = torch.device("cuda", torch.cuda.current_device())
        return device

    def set_epoch(self, epoch):
        """The epoch the next pass delivers (each pass otherwise delivers the
        one after the last). Its order and augmentations follow from the seed
        and the epoch, as in an uninterrupted run."""
        _check_int("epoch", epoch, 0)
        if self._epochs is not None and epoch >= self._epochs:
            raise ValueError(f"epoch: must be below epochs ({self._epochs}), got {epoch}")
        if epoch != self._epoch:
            self._epoch, self._position, self._sample = epoch, 0, 0
            self._pack = (0, 0)

    def state_dict(self):
        """Where the loader stands: pass it to load_state_dict() of a loader
        made with the same arguments to deliver exactly the rest. As
        torchdata's StatefulDataLoader: it describes the batches handed out
        so far (`_num_yielded` of this epoch; `step` in all), and a loader
        it is loaded into continues after them. With ranks split evenly
        (rank_split "pad" or "drop"), every rank stands at the same step, so
        one rank's state (rank 0's) restores them all; exactly so when no
        sample failed, else each rank's own (`sample` says where its next
        batch starts, past the samples that filled the room failed ones
        left, and is used for the rank that saved it)."""
        fixed = self._steps_fixed()
        return {"epoch": self._epoch, "batch": self._position, "sample": self._sample,
                "step": self._epoch * len(self) + self._position if fixed else None,
                "_num_yielded": self._position, "seed": self._options["seed"],
                "batch_size": self._options["batch_size"],
                "world_size": self.world_size, "rank": self.rank,
                "rank_split": self._options["rank_split"], "echo": self._echo,
                "pack_tokens": self._pack[0], "pack_rows": self._pack[1]}

    def load_state_dict(self, state):
        """Resumes after the batches `state` (a state_dict() of this loader,
        or of another rank of the same job) counts. Refused, naming the key,
        when it was saved with other arguments."""
        for key in ("seed", "batch_size", "world_size", "rank_split"):
            mine = self.world_size if key == "world_size" else self._options[key]
            if key in state and state[key] != mine:
                raise ValueError(f"state_dict: it was saved with {key}={state[key]}, "
                                 f"this loader has {key}={mine}")
        if state.get("rank", self.rank) != self.rank and \
                self._options["rank_split"] == "uneven":
            raise ValueError(f"state_dict: it is rank {state['rank']}'s, and with "
                             "rank_split='uneven' ranks stand at different steps; load each "
                             "rank's own")
        epoch, position = state["epoch"], state["batch"]
        _check_int("state_dict epoch", epoch, 0)
        _check_int("state_dict batch", position, 0)
        # Where the next batch starts depends on which of this rank's samples
        # failed: another rank's state resumes at the batch's planned start.
        sample = state.get("sample", 0) if state.get("rank", self.rank) == self.rank else 0
        _check_int("state_dict sample", sample, 0, (1 << 63) - 1)
        self._epoch, self._position, self._sample = epoch, position, sample
        pack = (state.get("pack_tokens", 0), state.get("pack_rows", 0)) \
            if state.get("rank", self.rank) == self.rank else (0, 0)
        _check_int("state_dict pack_tokens", pack[0], 0, (1 << 63) - 1)
        _check_int("state_dict pack_rows", pack[1], 0, (1 << 63) - 1)
        self._pack = pack
        self._echo = state.get("echo", 1)
        _check_int("state_dict echo", self._echo, 1)

    def _steps_fixed(self):
        # Every epoch as many batches: not with echo="auto" (each epoch's
        # factor) nor batching by length (each epoch cut anew).
        return (self._options["echo"] != "auto" and not self._options.get("max_batch_seconds")
                and not self._options.get("pack_length"))

    @property
    def rank(self):
        """This loader's rank: rank=, else RANK from the launcher."""
        return self._core.rank

    @property
    def world_size(self):
        return self._core.world_size

    # -- the C++ loader ----------------------------------------------------

    def _next_at(self):
        """The batch to hand out next: (epoch, number, where it starts)."""
        return (self._epoch, self._position, self._sample) + self._pack

    def _ensure_core(self):
        """A C++ loader whose next batch is (self._epoch, self._position)."""
        if self._core is not None and self._core_at == self._next_at():
            return
        self._retire_core()
        remaining = (_UNBOUNDED_EPOCHS if self._epochs is None else self._epochs) - self._epoch
        if remaining < 1:
            raise ValueError(f"epoch {self._epoch}: the loader has only {self._epochs} epochs")
        options = dict(self._options, first_epoch=self._epoch, skip_batches=self._position,
                       skip_samples=self._sample,
                       pack_skip_tokens=self._pack[0], pack_skip_rows=self._pack[1],
                       epochs=remaining,
                       start_echo=self._echo if self._position > 0 else 0)
        _follow_log_level()
        try:
            if self._device is not None and self._options.get("gpu_normalize"):
                # The pinned batch memory is allocated now: on the loader's
                # device, not on GPU 0 (which would make a context there in
                # every rank).
                with torch.cuda.device(self._device):
                    self._core = _prepflow.Loader(options)
            else:
                self._core = _prepflow.Loader(options)
        finally:
            _drain_logs()
        self._core_at = self._next_at()
        normalize = self._core.gpu_normalize
        if normalize is not None and self._normalizer is None:
            first = self._core.next()  # for the image size
            if first is not None:
                _, h, w, _ = first.image_shape
                index = self._device.index
                try:
                    self._normalizer = _prepflow.DeviceNormalizer(
                        index, self._options["batch_size"], h, w, list(normalize[0]),
                        list(normalize[1]))
                except RuntimeError as e:  # e.g. a GPU this build has no code for
                    # Normalize on the CPU instead: a new core from the same
                    # position (the uint8 batch taken here was not delivered).
                    _log.warning("device %s: prepflow's GPU normalizer cannot run (%s); "
                                 "normalizing on the CPU", self._device, e)
                    self._options["gpu_normalize"] = False
                    self._core, self._core_at = None, None
                    return self._ensure_core()
            self._pending = first

    def _retire_core(self):
        if self._normalizer is not None:
            # Waits for its copies and kernels; it holds its last two batches
            # (shared with the core's pool) until its next submit or its end.
            self._normalizer.synchronize()
        if self._core is not None:
            st = self._core.stats()
            for key in ("seconds", "cpu_seconds", "wait_seconds", "errors", "reissued_items"):
                self._finished[key] = self._finished.get(key, 0) + st[key]
        self._core, self._core_at, self._pending = None, None, None
        _drain_logs()

    def _next_core_batch(self):
        if self._pending is not None:
            b, self._pending = self._pending, None
            return b
        try:
            return self._core.next()
        finally:
            _drain_logs()

    def _convert(self, b):
        if self._as_numpy:
            images, labels = b.images_numpy(), b.labels_numpy()
        elif self._normalizer is not None:
            images = _gpu.normalize_on_gpu(self._normalizer, b, self._device)
            labels = _torch_dlpack.from_dlpack(b.labels_dlpack()).to(self._device,
                                                                        non_blocking=True)
        else:
            images = _torch_dlpack.from_dlpack(b.images_dlpack())
            labels = _torch_dlpack.from_dlpack(b.labels_dlpack())
            if self._device is not None:
                images = images.to(self._device, non_blocking=True)
                labels = labels.to(self._device, non_blocking=True)
        images = _token_ids(images)
        if self._delivery is not None:
            images = self._delivery(images)
        return Batch(images, labels, b.epoch, b.number, b.indices, b.copies,
                     self._fields(b, images, labels))

    def _record(self):
        """(field, has_texts, has_classes) of this loader's records, or None
        for images: asked of the core once, not per batch."""
        if self._record_kind is None:  # False: images
            field, texts = self._core.field, self._core.has_texts
            images = field == "image" and not texts and self._core.num_fields == 1
            self._record_kind = False if images else (field, texts, self._core.has_labels)
        return self._record_kind or None

    def _fields(self, b, values, labels, lengths=None, tail=False):
        """The record dict of batch `b` (see Batch), or None for images;
        after a Python tail, `lengths` are those of its outputs (None: the
        same length)."""
        record = self._record()
        if record is None:
            return None
        field, texts, classes = record
        fields = {field: values}
        if tail:
            if lengths is not None:
                fields[field + "_lengths"] = lengths
        elif b.ragged:
            if self._as_numpy:
                lengths = b.lengths_numpy()
            else:
                lengths = _torch_dlpack.from_dlpack(b.lengths_dlpack())
                if self._device is not None:
                    lengths = lengths.to(self._device, non_blocking=True)
            fields[field + "_lengths"] = lengths
        self._other_fields(b, fields)
        if classes:
            fields["label"] = labels
        if texts:
            fields["text"] = b.texts
        fields["index"] = list(b.indices)
        return fields

    def _other_fields(self, b, fields):
        """A record's fields beside the pipeline's output into `fields`: a
        tensor (and `<key>_lengths` where lengths vary), or a list of bytes
        for a carried member."""
        for f, (key, kind) in enumerate(b.field_kinds):
            if f == 0:
                continue
            if kind == "bytes":
                fields[key] = b.field_bytes(f)
                continue
            if self._as_numpy:
                value, lengths = b.field_numpy(f), b.field_lengths_numpy(f)
            else:
                value = _torch_dlpack.from_dlpack(b.field_dlpack(f))
                lengths = b.field_lengths_dlpack(f)
                lengths = None if lengths is None else _torch_dlpack.from_dlpack(lengths)
                if self._device is not None:
                    value = value.to(self._device, non_blocking=True)
                    if lengths is not None:
                        lengths = lengths.to(self._device, non_blocking=True)
            value = _token_ids(value)
            delivery = self._field_delivery.get(key)
            fields[key] = delivery(value) if delivery is not None else value
            if lengths is not None:
                fields[key + "_lengths"] = lengths

    # -- iteration -----------------------------------------------------------

    def batches(self):
        """One epoch of Batch objects (images, labels, epoch, number, indices);
        nothing once `epochs` are done."""
        if self._epochs is not None and self._epoch >= self._epochs:
            return
        self._ensure_core()
        epoch = self._epoch
        if self._core.packed:
            for d in self._packed_batches(epoch):
                yield self._deliver_packed(d)
        elif self._tail is None:
            for b in self._core_batches(epoch):
                yield self._deliver(b)
        else:
            # The tail of batch k + 1 (and of `prefetch` more) runs while
            # batch k is being trained on.
            ahead = collections.deque()
            record = self._record()
            pad = record is not None and record[0] != "image"  # audio may vary in length
            for b in self._core_batches(epoch):
                ahead.append((b, self._tail.submit(
                    b.images_numpy(), b.epoch, b.indices, b.copies,
                    lengths=b.lengths_numpy() if b.ragged else None, dim=b.ragged_dim, pad=pad)))
                if len(ahead) > self._options["prefetch"]:
                    yield self._deliver(*ahead.popleft())
            while ahead:
                yield self._deliver(*ahead.popleft())
        # The epoch is over: the next pass delivers the one after it.
        self._epoch, self._position, self._sample = epoch + 1, 0, 0
        self._pack = (0, 0)
        self._core_at = self._next_at() if self._pending is not None else None

    def _core_batches(self, epoch):
        """The C++ loader's batches of `epoch`, in order; the first of the
        next epoch is kept for later."""
        while True:
            b = self._next_core_batch()
            if b is None or b.epoch != epoch:
                self._pending = b
                return
            self._core_at = (epoch, b.number + 1, b.end_position, 0, 0)
            if b.size == 0:  # every sample failed (on_error="skip"): nothing to hand out
                continue
            yield b

    def _packed_batches(self, epoch):
        """The packed batches (dicts) of `epoch`, in order; the first of the
        next epoch is kept for later."""
        while True:
            if self._pending is not None:
                d, self._pending = self._pending, None
            else:
                try:
                    d = self._core.next_packed()
                finally:
                    _drain_logs()
            if d is None or d["epoch"] != epoch:
                self._pending = d
                return
            self._core_at = (epoch, d["number"] + 1) + tuple(d["next"])
            yield d

    _PACKED_FIELDS = ("tokens", "position_ids", "segment_ids", "cu_seqlens", "document_index",
                      "document_offset")

    def _deliver_packed(self, d):
        """A packed batch as handed out, counted: Batch.fields holds its
        arrays (see Loader's pack_length)."""
        self._position = d["number"] + 1
        self._sample, tokens, rows = d["next"]
        self._pack = (tokens, rows)
        self._checksum = (self._checksum + d["checksum"]) % (1 << 64)
        self._padding_bytes += 8 * d["padding_tokens"]
        rows = len(d["tokens"])
        self._images += rows
        self._batches += 1
        fields = {key: d[key] for key in self._PACKED_FIELDS}
        if not self._as_numpy:
            fields = {key: torch.from_numpy(value) for key, value in fields.items()}
            if self._device is not None:
                fields = {key: value.to(self._device, non_blocking=True)
                          for key, value in fields.items()}
        fields["max_seqlen"] = d["max_seqlen"]
        return Batch(fields["tokens"], None, d["epoch"], d["number"], [], fields=fields)

    def _deliver(self, b, tail_result=None):
        """Batch `b` as handed out, counted; with the tail's output, if any."""
        self._position, self._sample = b.number + 1, b.end_position
        self._echo = b.echo
        self._checksum = (self._checksum + b.checksum) % (1 << 64)
        self._padding_bytes += b.padding_bytes
        self._images += b.size
        self._remote_images += b.remote_samples
        self._batches += 1
        if tail_result is None:
            return self._convert(b)
        images, lengths, cpu = tail_result()
        # The tail's CPU is this machine's too: --offload auto leaves room for it.
        self._core.add_trainer_work(cpu)
        if images is None:  # an empty batch
            import numpy as np
            images = np.empty((0,), np.float32)
        labels = b.labels_numpy()
        if not self._as_numpy:
            images, labels = torch.from_numpy(images), torch.from_numpy(labels)
            lengths = None if lengths is None else torch.from_numpy(lengths)
            if self._device is not None:
                images = images.to(self._device, non_blocking=True)
                labels = labels.to(self._device, non_blocking=True)
                if lengths is not None:
                    lengths = lengths.to(self._device, non_blocking=True)
        return Batch(images, labels, b.epoch, b.number, b.indices, b.copies,
                     self._fields(b, images, labels, lengths, tail=True))

    def __iter__(self):
        """(images, labels) per batch; a dict (Batch.fields) for records."""
        for batch in self.batches():
            yield batch.fields if batch.fields is not None else (batch.images, batch.labels)

    def __len__(self):
        """Batches per epoch."""
        if self._core is not None and self._core.packed:
            raise TypeError("a packed loader (pack_length) has no len(): its rows per epoch "
                            "follow from the documents' tokens")
        return self._core.batches_in_epoch(self._epoch) if self._core else 0

    @property
    def samples_per_epoch(self):
        return self._core.samples_per_epoch

    @property
    def job_id(self):
        return self._core.job_id

    @property
    def metrics_port(self):
        """The port /metrics is served on (metrics_port=0 picks a free one);
        None without metrics."""
        port = self._core.metrics_port
        return None if port < 0 else port

    @property
    def classes(self):
        """The class names, indexed by label: as torchvision's ImageFolder
        has them (its folder names, sorted), so labels mean the same."""
        return list(self._core.classes)

    @property
    def class_to_idx(self):
        """{class name: label}, as torchvision's ImageFolder has it."""
        return {name: i for i, name in enumerate(self._core.classes)}

    def stats(self):
        """Counts and timings, as `prepflow run --json` reports them. `images`,
        `remote_images`, `local_images`, `batches`, `checksum` and
        `padding_bytes` cover the batches handed out so far (over every
        epoch); timings and `errors` add up the loader's runs, which may have
        read a batch ahead."""
        st = self._core.stats() if self._core is not None else {}
        _drain_logs()
        for key, value in self._finished.items():
            st[key] = st.get(key, 0) + value
        st["images"] = self._images
        st["remote_images"] = self._remote_images
        st["local_images"] = self._images - self._remote_images
        st["batches"] = self._batches
        st["checksum"] = f"{self._checksum:016x}"
        st["checksum_value"] = self._checksum
        st["padding_bytes"] = self._padding_bytes
        if self._core is not None and self._core.packed:  # images: rows
            st.update(self._core.packed_counts())
        # Beyond the core's fields: where the next batch comes from (resume).
        st["epoch"], st["batch"] = self._epoch, self._position
        return st

    def close(self):
        """Stops the workers' streams (and the Python tail's pool) now rather
        than when garbage-collected."""
        self._retire_core()
        if self._tail is not None:
            self._tail.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


Loader.__doc__ += _options_doc()
