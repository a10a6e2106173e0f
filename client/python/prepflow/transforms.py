"""torchvision transforms in, prepflow stages out.

    import torchvision.transforms as T
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                           T.ColorJitter(0.4, 0.4, 0.4), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = prepflow.Loader(data, transform=transform)

`to_stages` reads each transform's parameters from the object (what its
constructor stored, after torchvision's own checks) and gives the prepflow ops
that compute the same thing; a pipeline always starts with `decode` (what
ImageFolder's loader does), and `ToTensor` (or `PILToTensor` +
`ConvertImageDtype(torch.float)`) followed by `Normalize` becomes one
`normalize` stage. What each op matches, and how closely, is in docs/ops.md.

A transform with no prepflow equivalent is a ValueError naming it, its place
in the Compose and the reason, and listing what translates; or, with
Loader(python_tail=...), it and everything after it run in Python on the
trainer (`split`). prepflow.ops objects may be mixed in and pass through
unchanged.
"""
from . import _audio_transforms as _audio
from . import ops

__all__ = ["to_stages", "to_pipeline_text", "split", "delivery", "Delivery", "TRANSLATED"]


class Untranslatable(ValueError):
    pass


def _flatten(transform):
    if isinstance(transform, (list, tuple)):
        out = []
        for t in transform:
            out.extend(_flatten(t))
        return out
    if type(transform).__name__ == "Compose" and hasattr(transform, "transforms"):
        return _flatten(list(transform.transforms))
    if type(transform).__name__ == "Sequential" and hasattr(transform, "children"):
        return _flatten(list(transform.children()))  # torch.nn.Sequential (torchaudio's)
    return [transform]


def _size(size):
    """torchvision's (h, w) or int as prepflow's size / height + width."""
    if isinstance(size, int):
        return {"size": size}
    h, w = (size[0], size[0]) if len(size) == 1 else size
    return {"size": h} if h == w else {"height": h, "width": w}


def _interpolation(t, allowed=("bilinear", "nearest")):
    mode = getattr(t.interpolation, "value", t.interpolation)
    if mode not in allowed:
        raise Untranslatable(f"interpolation {mode!r}: prepflow resamples here with "
                             f"{' or '.join(allowed)}")
    return mode


def _fill(fill):
    """torchvision's fill as _parse_fill reads it for a PIL image: ints."""
    if fill is None:
        return [0]
    return [int(v) for v in (fill if isinstance(fill, (list, tuple)) else [fill])]


def _padding(padding):
    return [padding] if isinstance(padding, int) else list(padding)


_PADDING_MODES = {"constant": "PADDING_CONSTANT", "edge": "PADDING_EDGE",
                  "reflect": "PADDING_REFLECT", "symmetric": "PADDING_SYMMETRIC"}


def _pad(t):
    return [ops.Pad(padding=_padding(t.padding), fill=_fill(t.fill),
                    padding_mode=_PADDING_MODES[t.padding_mode])]


def _random_crop(t):
    padding = None if t.padding is None else _padding(t.padding)
    return [ops.RandomCrop(**_size(t.size), padding=padding, pad_if_needed=bool(t.pad_if_needed),
                           fill=_fill(t.fill), padding_mode=_PADDING_MODES[t.padding_mode])]


_RESAMPLERS = ("nearest", "bilinear", "bicubic")
# Resizing takes every one of Pillow's filters.
_RESIZE_FILTERS = _RESAMPLERS + ("box", "hamming", "lanczos")


def _center(center):
    return None if center is None else [float(c) for c in center]


def _random_rotation(t):
    return [ops.RandomRotation(degrees=[float(d) for d in t.degrees],
                               interpolation=_interpolation(t, _RESAMPLERS), expand=bool(t.expand),
                               center=_center(t.center), fill=_fill(t.fill))]


def _random_affine(t):
    return [ops.RandomAffine(
        degrees=[float(d) for d in t.degrees],
        translate=None if t.translate is None else [float(v) for v in t.translate],
        scale=None if t.scale is None else [float(v) for v in t.scale],
        shear=None if t.shear is None else [float(v) for v in t.shear],
        interpolation=_interpolation(t, _RESAMPLERS), fill=_fill(t.fill), center=_center(t.center))]


def _random_resized_crop(t):
    return [ops.RandomResizedCrop(**_size(t.size), scale_min=t.scale[0], scale_max=t.scale[1],
                                  ratio_min=t.ratio[0], ratio_max=t.ratio[1],
                                  interpolation=_interpolation(t, _RESIZE_FILTERS))]


def _resize(t):
    size = t.size
    if isinstance(size, (list, tuple)) and len(size) == 1:
        size = size[0]
    shape = {"shorter_side": size} if isinstance(size, int) else {"height": size[0],
                                                                   "width": size[1]}
    max_size = getattr(t, "max_size", None)
    if max_size is not None:
        shape["max_size"] = max_size
    return [ops.Resize(**shape, interpolation=_interpolation(t, _RESIZE_FILTERS))]


def _random_resize(t):
    """v2's RandomResize, RandomShortestSize and ScaleJitter: random_resize."""
    name, shape = type(t).__name__, {}
    if name == "RandomResize":
        shape = {"min_size": int(t.min_size), "max_size": int(t.max_size)}
    elif name == "RandomShortestSize":
        sizes = [t.min_size] if isinstance(t.min_size, int) else t.min_size
        shape = {"sizes": [int(s) for s in sizes], "max_size": int(t.max_size or 0)}
    else:  # ScaleJitter
        shape = {"target_height": int(t.target_size[0]), "target_width": int(t.target_size[1]),
                 "scale_min": float(t.scale_range[0]), "scale_max": float(t.scale_range[1])}
    return [ops.RandomResize(**shape, interpolation=_interpolation(t, _RESIZE_FILTERS))]


def _grayscale(t):
    """Grayscale(3) is random_grayscale at p 1; Grayscale(1) too, its one
    channel kept in all three (every later op treats three equal channels as
    torchvision treats an "L" image) and the first handed out (Delivery)."""
    if t.num_output_channels not in (1, 3):
        raise Untranslatable(f"num_output_channels: 1 or 3, got {t.num_output_channels}")
    return [ops.RandomGrayscale(p=1.0)]


def _multi_crop(t):
    size = _size(t.size)
    if type(t).__name__ == "FiveCrop":
        return [ops.FiveCrop(**size)]
    return [ops.TenCrop(**size, vertical_flip=bool(t.vertical_flip))]


def _crops_lambda(t, n):
    """The part a Lambda right after FiveCrop or TenCrop plays: "ToTensor" or
    "PILToTensor" when it stacks the n crops with that transform (as
    torchvision's FiveCrop example does), which is checked by calling it once
    on n random crops; Untranslatable otherwise."""
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.transforms import functional as F

    rng = np.random.default_rng(0)
    crops = tuple(Image.fromarray(rng.integers(0, 256, (3, 4, 3), dtype=np.uint8))
                  for _ in range(n))
    try:
        out = t.lambd(crops)
    except Exception as e:  # noqa: BLE001 (the user's function)
        raise Untranslatable(f"it failed on {n} crops: {e}") from None
    for role, to_tensor in (("ToTensor", F.to_tensor), ("PILToTensor", F.pil_to_tensor)):
        want = torch.stack([to_tensor(c) for c in crops])
        if (isinstance(out, torch.Tensor) and out.dtype == want.dtype and
                out.shape == want.shape and torch.equal(out, want)):
            return role
    raise Untranslatable("after FiveCrop or TenCrop prepflow translates a Lambda that stacks the "
                         "crops, torch.stack([ToTensor()(c) for c in crops]) (or PILToTensor), "
                         "and this one gives something else on random crops")


def _after_crops(t, name, stages):
    """The role of t, which follows a FiveCrop or TenCrop's crops (before
    ToTensor): a stacking Lambda, or v2's ToImage/ToTensor (v2 applies them
    to each crop)."""
    n = 10 if any(stage.name == "ten_crop" for stage in stages) else 5
    v2 = ".v2" in type(t).__module__
    if name == "Lambda":
        return _crops_lambda(t, n)
    if v2 and name in ("PILToTensor", "ToTensor"):
        return name
    if name in ("ToTensor", "PILToTensor"):
        raise Untranslatable(f"torchvision's {name} takes one image, not the tuple of {n} crops "
                             f"before it: stack them with Lambda(lambda crops: torch.stack("
                             f"[{name}()(c) for c in crops])), which translates")
    raise Untranslatable(f"after the {n} crops prepflow takes only their stacking into a tensor "
                         f"(a Lambda of torch.stack([ToTensor()(c) for c in crops]), or v2's "
                         f"ToImage), then Normalize")


def _range(value):
    return None if value is None else [float(v) for v in value]


def _color_jitter(t):
    return [ops.ColorJitter(brightness=_range(t.brightness), contrast=_range(t.contrast),
                            saturation=_range(t.saturation), hue=_range(t.hue))]


def _photometric_distort(t):
    """v2's RandomPhotometricDistort: brightness, then contrast, saturation
    and hue (contrast first or last, evenly), each applied with p and its
    factor drawn as ColorJitter draws it; then the channels permuted with
    p."""
    p = float(t.p)

    def maybe(**jitter):
        return ops.RandomApply(stages=[ops.ColorJitter(**jitter)], p=p)

    brightness = [maybe(brightness=_range(t.brightness))] if t.brightness else []
    middle = [(name, maybe(**{name: _range(getattr(t, name))}))
              for name in ("contrast", "saturation", "hue") if getattr(t, name)]
    rest = [stage for name, stage in middle if name != "contrast"]
    contrast = [stage for name, stage in middle if name == "contrast"]
    orders = [ops.RandomApply(stages=contrast + rest, p=1.0),
              ops.RandomApply(stages=rest + contrast, p=1.0)] if middle else []
    return (brightness + ([ops.RandomChoice(stages=orders)] if orders else []) +
            [ops.RandomChannelPermutation(p=p)])


def _to_tensor(t):
    return [ops.Normalize(mean=[0.0, 0.0, 0.0], std=[1.0, 1.0, 1.0])]


def _convert_image_dtype(t):
    import torch
    if t.dtype != torch.float32:
        raise Untranslatable("prepflow's tensors are float32")
    return []  # the uint8 -> float step is already in the normalize before it


def _to_dtype(t):
    """torchvision.transforms.v2.ToDtype after ToImage: as ConvertImageDtype."""
    import torch
    if isinstance(t.dtype, dict):
        raise Untranslatable("a ToDtype per type: give ToDtype(torch.float32, scale=True)")
    if t.dtype != torch.float32 or not getattr(t, "scale", False):
        raise Untranslatable("prepflow's tensors are float32 scaled to [0, 1]: give "
                             "ToDtype(torch.float32, scale=True)")
    return []


def _values(values):
    """A number, a sequence or a tensor as a list of floats."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]


def _three(values, name):
    """Normalize's mean or std (a number, a sequence or a tensor) as 3 values."""
    values = _values(values)
    if len(values) == 1:
        return values * 3
    if len(values) != 3:
        raise Untranslatable(f"{name}: needs 1 or 3 values, got {len(values)}")
    return values


def _trivial_augment_wide(t):
    return [ops.TrivialAugmentWide(num_magnitude_bins=t.num_magnitude_bins,
                                   interpolation=_interpolation(t, _RESAMPLERS),
                                   fill=_fill(t.fill))]


def _rand_augment(t):
    return [ops.RandAugment(num_ops=t.num_ops, magnitude=t.magnitude,
                            num_magnitude_bins=t.num_magnitude_bins,
                            interpolation=_interpolation(t, _RESAMPLERS), fill=_fill(t.fill))]


def _auto_augment(t):
    policy = getattr(t.policy, "value", t.policy)  # AutoAugmentPolicy.IMAGENET -> "imagenet"
    return [ops.AutoAugment(policy="AUTO_AUGMENT_" + str(policy).upper(),
                            interpolation=_interpolation(t, _RESAMPLERS), fill=_fill(t.fill))]


def _aug_mix(t):
    return [ops.AugMix(severity=t.severity, mixture_width=t.mixture_width,
                       chain_depth=t.chain_depth, alpha=float(t.alpha), all_ops=bool(t.all_ops),
                       interpolation=_interpolation(t, _RESAMPLERS), fill=_fill(t.fill))]


def _random_erasing(t):
    value = t.value
    random = isinstance(value, str)  # "random": torchvision refuses any other string
    values = None if random else [float(v) for v in (value if isinstance(value, (list, tuple))
                                                     else [value])]
    return [ops.RandomErasing(p=t.p, scale_min=t.scale[0], scale_max=t.scale[1],
                              ratio_min=t.ratio[0], ratio_max=t.ratio[1], value=values,
                              random_value=random)]


# The transforms that take a tensor (after ToTensor); the rest take images.
_TENSOR_TRANSFORMS = {"Normalize", "ConvertImageDtype", "RandomErasing", "ToPureTensor"}

# torchvision.transforms.v2 (torchvision >= 0.16): its classes of v1's names
# have v1's attributes and, on the PIL images ImageFolder gives (before
# ToImage), v1's kernels, so they translate as v1's; these three play the
# parts of PILToTensor and ConvertImageDtype, and ToPureTensor changes
# nothing prepflow keeps.
_V2_ROLES = {"ToImage": "PILToTensor", "ToDtype": "ConvertImageDtype",
             "ToPureTensor": "ToPureTensor"}


def _role(t):
    """What t is to the translation: its class name, or for v2's own
    classes the v1 class whose part it plays."""
    name = type(t).__name__
    return _V2_ROLES.get(name, name) if ".v2" in type(t).__module__ else name

_TRANSLATORS = {
    "RandomResizedCrop": _random_resized_crop,
    "Resize": _resize,
    "CenterCrop": lambda t: [ops.CenterCrop(**_size(t.size))],
    "Pad": _pad,
    "RandomCrop": _random_crop,
    "RandomRotation": _random_rotation,
    "RandomAffine": _random_affine,
    "RandomPerspective": lambda t: [ops.RandomPerspective(
        distortion_scale=float(t.distortion_scale), p=float(t.p),
        interpolation=_interpolation(t, _RESAMPLERS), fill=_fill(t.fill))],
    "RandomHorizontalFlip": lambda t: [ops.RandomHorizontalFlip(p=t.p)],
    "RandomVerticalFlip": lambda t: [ops.RandomVerticalFlip(p=t.p)],
    "RandomGrayscale": lambda t: [ops.RandomGrayscale(p=t.p)],
    "Grayscale": _grayscale,
    "RandomInvert": lambda t: [ops.RandomInvert(p=t.p)],
    "ColorJitter": _color_jitter,
    "GaussianBlur": lambda t: [ops.GaussianBlur(kernel_size=list(t.kernel_size),
                                                sigma=list(t.sigma))],
    "RandomPosterize": lambda t: [ops.RandomPosterize(bits=t.bits, p=t.p)],
    "RandomSolarize": lambda t: [ops.RandomSolarize(threshold=float(t.threshold), p=t.p)],
    "RandomAdjustSharpness": lambda t: [ops.RandomAdjustSharpness(
        sharpness_factor=float(t.sharpness_factor), p=t.p)],
    "RandomAutocontrast": lambda t: [ops.RandomAutocontrast(p=t.p)],
    "TrivialAugmentWide": _trivial_augment_wide,
    "RandAugment": _rand_augment,
    "AutoAugment": _auto_augment,
    "AugMix": _aug_mix,
    "RandomEqualize": lambda t: [ops.RandomEqualize(p=t.p)],
    # v2's own (torchvision 0.16 on).
    "RandomChannelPermutation": lambda t: [ops.RandomChannelPermutation()],
    "RandomZoomOut": lambda t: [ops.RandomZoomOut(
        fill=_fill(t.fill), side_min=float(t.side_range[0]), side_max=float(t.side_range[1]),
        p=float(t.p))],
    "RandomResize": _random_resize,
    "RandomShortestSize": _random_resize,
    "ScaleJitter": _random_resize,
    "RandomPhotometricDistort": _photometric_distort,
    "FiveCrop": _multi_crop,
    "TenCrop": _multi_crop,
    "RandomErasing": _random_erasing,
    "ToTensor": _to_tensor,
    "PILToTensor": _to_tensor,  # only with ConvertImageDtype(torch.float) after it
    "ConvertImageDtype": _convert_image_dtype,
    "ToImage": _to_tensor,  # v2: only with ToDtype(torch.float32, scale=True) after it
    "ToDtype": _to_dtype,
    "ToPureTensor": lambda t: [],
    "Normalize": None,  # folded into the normalize ToTensor made (see to_stages)
}

# Compositions: one stage whose inner stages are the translations of their
# transforms (image ops, or tensor ops after ToTensor, as where they sit).
_COMPOSITIONS = {
    "RandomApply": lambda t, inner: ops.RandomApply(stages=inner, p=float(t.p)),
    "RandomChoice": lambda t, inner: ops.RandomChoice(
        stages=inner, p=None if t.p is None else [float(w) for w in t.p]),
    "RandomOrder": lambda t, inner: ops.RandomOrder(stages=inner),
}
# What cannot be inside one: each changes the value's type.
_TYPE_CHANGES = {"ToTensor", "PILToTensor", "ConvertImageDtype", "Normalize", "ToPureTensor"}

# Why these torchvision transforms have no native op (each runs in the
# Python tail).
_NOT_NATIVE = {
    "LinearTransformation": "its matrix has (C*H*W)^2 entries (9.4 million for a 3x32x32 "
                            "image, 90 GB of float32 at 3x224x224), too large to travel with "
                            "a pipeline to every worker; apply it to the batch on the trainer "
                            "(on the GPU it is one matmul)",
    "ElasticTransform": "prepflow has no native op for it yet (its displacement field is "
                        "blurred in float32 by torch's conv2d and sampled by grid_sample, "
                        "whose rounding a native op would have to bound)",
    "Lambda": "prepflow cannot see into a Lambda",
}

# torchvision.transforms._transforms_video: clip transforms on [C, T, H, W]
# float tensors after ToTensorVideo. Crops and flips move exact in front of
# the normalize stage that ToTensorVideo (and NormalizeVideo) become, where
# prepflow runs them on each frame with one draw.
_VIDEO = {
    "RandomCropVideo": lambda t: [ops.RandomCrop(**_size(t.size))],
    "CenterCropVideo": lambda t: [ops.CenterCrop(**_size(t.crop_size))],
    "RandomHorizontalFlipVideo": lambda t: [ops.RandomHorizontalFlip(p=float(t.p))],
}


# The torchvision transforms to_stages translates.
TRANSLATED = sorted(["Compose", "ToTensorVideo", "NormalizeVideo"] + list(_TRANSLATORS) +
                    list(_COMPOSITIONS) + list(_VIDEO))


def _composition(t, tensor):
    """A RandomApply, RandomChoice or RandomOrder as one stage, its
    transforms translated where it sits (on images, or after ToTensor)."""
    inner = []
    for x in t.transforms:
        name = type(x).__name__
        where = f"{name} inside {type(t).__name__}"
        if not _is_torchvision(x) or (name not in _TRANSLATORS and name not in _COMPOSITIONS):
            raise Untranslatable(f"{where}: prepflow has no equivalent")
        if _role(x) in _TYPE_CHANGES:
            raise Untranslatable(f"{where}: it changes the value's type, and every way through "
                                 f"a composition must give the same type")
        if name in _COMPOSITIONS:
            inner.append(_composition(x, tensor))
        elif tensor != (name in _TENSOR_TRANSFORMS):
            raise Untranslatable(f"{where}: it takes {'an image' if tensor else 'a tensor'}, "
                                 f"and the composition sits {'after' if tensor else 'before'} "
                                 f"ToTensor")
        else:
            inner.extend(_TRANSLATORS[name](x))
    return _COMPOSITIONS[type(t).__name__](t, inner)


def _is_torchvision(t):
    return type(t).__module__.startswith("torchvision.transforms")


class Delivery:
    """What the loader does to a translated pipeline's batches so that they
    are what torchvision's Compose gives: `channels` 1 after Grayscale(1)
    (prepflow keeps three equal channels and hands out the first), and
    `chw` for a PILToTensor with no ConvertImageDtype after it (prepflow's
    uint8 HWC images handed out as uint8 CHW). `pending` holds, while
    translating, a PILToTensor that still needs its ConvertImageDtype."""

    def __init__(self):
        self.channels, self.chw, self.pending = 3, False, []

    def __call__(self, images):
        """A batch (torch or numpy, [N, ..., H, W, C] uint8 or [N, ..., C, H,
        W] float) as torchvision's Compose would have made it."""
        if not (self.chw or self.channels == 1):
            return images
        import numpy as np
        numpy = not hasattr(images, "movedim")
        hwc = images.dtype == (np.uint8 if numpy else _torch().uint8)
        if self.channels == 1:
            images = images[..., :1] if hwc else images[..., :1, :, :]
        if self.chw:
            images = np.moveaxis(images, -1, -3) if numpy else images.movedim(-1, -3)
        return np.ascontiguousarray(images) if numpy else images.contiguous()

    def tail_prefix(self):
        """What a Python tail runs first to get the values torchvision's
        transforms would have given it."""
        return [_OneChannel()] if self.channels == 1 else []


class _OneChannel:
    """Grayscale(1) on prepflow's three equal channels: "L" (exact: their
    luma is the value) or a tensor's first channel."""

    def __call__(self, x):
        if hasattr(x, "convert"):
            return x.convert("L")
        if isinstance(x, tuple):
            return tuple(self(c) for c in x)
        return x[..., :1, :, :]

    def __repr__(self):
        return "Grayscale(num_output_channels=1)"


def _torch():
    import torch
    return torch


def _is_video(t):
    return type(t).__module__.endswith("_transforms_video")


def _translate_video(t, stages):
    """Appends (or places) a torchvision clip transform's stages."""
    name = type(t).__name__
    last = stages[-1] if stages else None
    clip_tensor = last is not None and last.name == "normalize" and \
        str(last.fields.get("layout", "")).upper().endswith("CNHW")
    if name == "ToTensorVideo":
        if last is not None and last.name == "normalize":
            raise Untranslatable("the clip is already a tensor")
        stages.append(ops.Normalize(mean=[0.0] * 3, std=[1.0] * 3, layout="LAYOUT_CNHW"))
        return
    if not clip_tensor:
        raise Untranslatable("it takes a clip tensor [C, T, H, W]: put it after ToTensorVideo")
    if name == "NormalizeVideo":
        if last.fields["mean"] != [0.0] * 3 or last.fields["std"] != [1.0] * 3:
            raise Untranslatable("the clip is normalized already")
        stages[-1] = ops.Normalize(mean=_three(t.mean, "mean"), std=_three(t.std, "std"),
                                   layout="LAYOUT_CNHW")
        return
    if name == "RandomResizedCropVideo":
        raise Untranslatable("it resizes float frames with torch's interpolate (no antialias), "
                             "which prepflow does not reproduce; T.RandomResizedCrop before "
                             "ToTensorVideo resizes each frame as torchvision does an image")
    if name not in _VIDEO:
        raise Untranslatable("prepflow has no equivalent")
    stages[-1:-1] = _VIDEO[name](t)


def _translate_one(t, stages, out):
    """Appends t's stages, noting in `out` (a Delivery) what they leave to
    the loader."""
    pending = out.pending
    name = type(t).__name__
    if _is_video(t):
        _translate_video(t, stages)
        return
    tensor = any(stage.name == "normalize" for stage in stages)
    crops = any(stage.name in ("five_crop", "ten_crop") for stage in stages)
    if crops and not tensor and _is_torchvision(t):
        role = _after_crops(t, _role(t), stages)
        stages.extend(_to_tensor(t))
        if role == "PILToTensor":
            pending.append(t)
        return
    if not _is_torchvision(t) or (name not in _TRANSLATORS and name not in _COMPOSITIONS):
        raise Untranslatable(_NOT_NATIVE.get(name, "prepflow has no equivalent")
                             if _is_torchvision(t) else "prepflow has no equivalent")
    last = stages[-1] if stages else None
    after_tensor = last is not None and last.name == "normalize"
    translate, name = _TRANSLATORS.get(name), _role(t)
    if crops and name not in ("Normalize", "ConvertImageDtype", "ToPureTensor"):
        raise Untranslatable("after the crops prepflow takes only Normalize and "
                             "ConvertImageDtype")
    if pending and name != "ConvertImageDtype":
        raise Untranslatable("PILToTensor's uint8 tensor needs ConvertImageDtype(torch.float) "
                             "before it")
    if name == "Normalize":
        if out.channels == 1 and (len(_values(t.mean)) != 1 or len(_values(t.std)) != 1):
            raise Untranslatable("after Grayscale(1) the image has one channel: Normalize "
                                 "takes one mean and one std")
        if not (after_tensor and last.fields["mean"] == [0.0] * 3 and
                last.fields["std"] == [1.0] * 3):
            raise Untranslatable("Normalize must follow ToTensor (or PILToTensor + "
                                 "ConvertImageDtype(torch.float))")
        stages[-1] = ops.Normalize(mean=_three(t.mean, "mean"), std=_three(t.std, "std"))
        return
    if name in _COMPOSITIONS:
        stages.append(_composition(t, tensor))
        return
    if name == "ConvertImageDtype" and not after_tensor:
        raise Untranslatable("only after ToTensor or PILToTensor")
    if tensor and name not in _TENSOR_TRANSFORMS:
        raise Untranslatable("prepflow runs it on images, and this comes after ToTensor")
    if not tensor and name in _TENSOR_TRANSFORMS - {"Normalize"}:
        raise Untranslatable("it takes a tensor: put it after ToTensor")
    stages.extend(translate(t))
    if name == "Grayscale" and t.num_output_channels == 1:
        out.channels = 1
    if name == "PILToTensor":
        pending.append(t)
    elif name == "ConvertImageDtype":
        pending.clear()


def to_stages(transform):
    """The prepflow stages for a torchvision transform (a Compose, a list, or
    one transform), starting with decode; or for torchaudio transforms (an
    nn.Sequential or a list; see _audio_transforms), starting with
    decode_audio. ValueError for one it cannot translate."""
    return _translate(transform)[0]


def delivery(transform):
    """The Delivery of a transform that to_stages translates whole."""
    return _translate(transform)[1]


def _translate(transform):
    """(stages, Delivery) for to_stages."""
    items = _flatten(transform)
    if any(_audio.is_torchaudio(t) for t in items):
        return _audio.to_stages(items), Delivery()
    stages, items = _decoder(items)
    out = Delivery()
    for i, t in enumerate(items):
        try:
            if isinstance(t, ops.Op):
                stages.append(t)
            else:
                _translate_one(t, stages, out)
        except Untranslatable as e:
            raise ValueError(
                f"transform: cannot translate {t!r} (item {i + 1} of {len(items)}): {e}. "
                f"prepflow translates {', '.join(TRANSLATED)}, and prepflow.ops objects; "
                f"or give Loader python_tail='process' to run it, and what follows it, in "
                f"Python") from None
    _end(stages, out)
    return stages, out


def _decoder(items):
    """(stages, items): the stage a translation starts from and the items
    after it. A clip's transforms start from a prepflow decode_video op given
    first ([ops.DecodeVideo(frames=16, stride=4), T.Resize(256), ...]: each
    transform then runs on every frame with one draw); others from decode."""
    if items and isinstance(items[0], ops.Op) and items[0].name in ("decode", "decode_video"):
        return [items[0]], items[1:]
    return [ops.Decode()], items


def _end(stages, out):
    """A PILToTensor with no ConvertImageDtype after it: uint8 images, handed
    out CHW (its stage, the float conversion, goes)."""
    if out.pending:
        stages.pop()
        out.pending.clear()
        out.chw = True


def split(transform):
    """(stages, tail): the prepflow stages for the longest translatable
    prefix of `transform`, and the rest of it (a Compose of the transforms
    from the first one prepflow cannot translate on, or None when every one
    translates). The tail is what Loader(python_tail=...) runs in Python."""
    items = _flatten(transform)
    if any(_audio.is_torchaudio(t) for t in items):
        stages, tail = _audio.split(items)
        return stages, _Compose(tail) if tail else None
    stages, items = _decoder(items)
    out = Delivery()
    pending = out.pending
    for i, t in enumerate(items):
        if isinstance(t, ops.Op):
            stages.append(t)
            continue
        try:
            before = list(stages)
            _translate_one(t, stages, out)
        except Untranslatable:
            stages[:] = before
            if pending:  # a PILToTensor waiting for its ConvertImageDtype goes too
                i = items.index(pending[0])
                stages.pop()
            tail = items[i:]
            if any(isinstance(x, ops.Op) for x in tail):
                raise ValueError(f"transform: prepflow.ops objects cannot follow {items[i]!r}, "
                                 f"which runs in Python (the tail)") from None
            return stages, _Compose(out.tail_prefix() + tail)
    _end(stages, out)
    return stages, None


class _Compose:
    """The tail: its transforms in order (torchvision's Compose, without
    needing torchvision here)."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self):
        return "[" + ", ".join(repr(t) for t in self.transforms) + "]"


def _v2_mix(t):
    """A v2 MixUp or CutMix: (mixup_alpha, cutmix_alpha, num_classes)."""
    name = type(t).__name__
    alpha = float(getattr(t, "alpha", 1.0))
    classes = int(getattr(t, "num_classes", None) or 0)
    return (alpha, 0.0, classes) if name == "MixUp" else (0.0, alpha, classes)


def to_batch_ops(batch_ops):
    """`batch_ops` as prepflow batch ops: prepflow.ops.MixupCutmix as it is,
    and torchvision.transforms.v2's MixUp(alpha, num_classes), CutMix(...),
    and RandomChoice([CutMix(...), MixUp(...)], p) of the two, which are
    references/classification's RandomMixup and RandomCutmix (each batch
    mixed with itself rolled by one, lambda ~ Beta(alpha, alpha)): one
    MixupCutmix, CutMix chosen with RandomChoice's weight for it. TypeError
    naming what is neither."""
    out = []
    for t in batch_ops:
        if isinstance(t, ops.Op) and t.schema["batch"]:
            out.append(t)
            continue
        name, v2 = type(t).__name__, ".v2" in type(t).__module__
        if v2 and name in ("MixUp", "CutMix"):
            mixup, cutmix, classes = _v2_mix(t)
            out.append(ops.MixupCutmix(mixup_alpha=mixup, cutmix_alpha=cutmix, p=1.0,
                                       num_classes=classes))
            continue
        inner = getattr(t, "transforms", [])
        if (v2 and name == "RandomChoice" and len(inner) == 2
                and sorted(type(x).__name__ for x in inner) == ["CutMix", "MixUp"]):
            weights = getattr(t, "p", None) or [1.0, 1.0]
            mixes = [_v2_mix(x) for x in inner]
            if mixes[0][2] != mixes[1][2]:
                raise TypeError("batch_ops: RandomChoice's MixUp and CutMix name different "
                                "num_classes")
            cut = [i for i, x in enumerate(inner) if type(x).__name__ == "CutMix"][0]
            out.append(ops.MixupCutmix(
                mixup_alpha=mixes[1 - cut][0], cutmix_alpha=mixes[cut][1], p=1.0,
                switch_prob=float(weights[cut]) / float(sum(weights)), num_classes=mixes[0][2]))
            continue
        raise TypeError(f"batch_ops: {name} is not a batch op: give prepflow.ops.MixupCutmix(...), "
                        f"or torchvision.transforms.v2's MixUp, CutMix or RandomChoice of the two")
    return out


def to_pipeline_text(transform, name=None):
    """`to_stages` as pipeline text (what `prepflow run --pipeline` reads),
    named `name` (default: "torchaudio" or "torchvision")."""
    if name is None:
        audio = any(_audio.is_torchaudio(t) for t in _flatten(transform))
        name = "torchaudio" if audio else "torchvision"
    return ops.pipeline_text(to_stages(transform), name=name)
