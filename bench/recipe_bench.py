#!/usr/bin/python3
"""Training recipes as users write them: one torchvision Compose, run by
prepflow.Loader(transform=...) and by torch's DataLoader over ImageFolder,
side by side (a program, not a test; prints one JSON line).

Recipes:
  resnet50-v2   torchvision's ResNet-50 v2 recipe: RandomResizedCrop(176),
                RandomHorizontalFlip, TrivialAugmentWide(bilinear),
                PILToTensor, ConvertImageDtype, Normalize, RandomErasing(0.1),
                and on batches MixUp(0.2) or CutMix(1.0), one chosen per
                batch (torchvision's reference does it in the DataLoader's
                collate_fn; prepflow with batch_ops)
  randaugment   RandomResizedCrop(224), RandomHorizontalFlip,
                RandAugment(2, 9), ToTensor, Normalize, RandomErasing(0.25)
                (torchvision's RandAugment; timm's rand-m9-mstd0.5-inc1 adds
                magnitude noise and other op ranges)
  augmix        RandomResizedCrop(224), RandomHorizontalFlip, AugMix()
                (severity 3, 3 chains), ToTensor, Normalize: timm's AugMix
                recipes in torchvision's vocabulary
  imagenet-train  RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
                Normalize

Both loaders get one CPU: prepflow threads=1, DataLoader num_workers=0, torch
with one thread; pin the process with taskset for a per-core figure. "Per
core" is images per CPU-second of the process (time.process_time) from
creating the loader to its last batch (a bounded loader, so no prefetch runs
past the span; start-up is included on both sides and is small against
`--epochs` epochs); rounds alternate the two and ratios are taken per round,
then the median. prepflow runs once per --fidelity (default both: exact,
torchvision's bytes; fast, JPEGs decoded at a scale when shrinking), each
against the same round's DataLoader.

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/recipe_bench.py \\
        --data ../shared/datasets/photos-512 --recipe resnet50-v2 --rounds 3
"""
import argparse
import json
import statistics
import time

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

import prepflow
from torch.utils.data import default_collate

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def recipe(name):
    if name == "resnet50-v2":
        return T.Compose([
            T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
            T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
            T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
            T.RandomErasing(0.1)])
    if name == "randaugment":
        return T.Compose([
            T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandAugment(2, 9),
            T.ToTensor(), T.Normalize(MEAN, STD), T.RandomErasing(0.25)])
    if name == "augmix":
        return T.Compose([
            T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.AugMix(),
            T.ToTensor(), T.Normalize(MEAN, STD)])
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def reference_mix(batch, target, num_classes, generator):
    """torchvision's classification reference: RandomChoice of RandomMixup(alpha
    0.2) and RandomCutmix(alpha 1.0), each with p 1, on a collated batch."""
    target = torch.nn.functional.one_hot(target, num_classes=num_classes).to(batch.dtype)
    cutmix = torch.rand(1, generator=generator).item() < 0.5
    alpha = 1.0 if cutmix else 0.2
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
    if cutmix:
        _, h, w = batch.shape[-3:]
        r_x, r_y = int(torch.randint(w, (1,))), int(torch.randint(h, (1,)))
        r = 0.5 * (1.0 - lam) ** 0.5
        rw, rh = int(r * w), int(r * h)
        x1, y1, x2, y2 = max(r_x - rw, 0), max(r_y - rh, 0), min(r_x + rw, w), min(r_y + rh, h)
        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
    else:
        batch_rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(batch_rolled)
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target


def timed(make_batches):
    """Times a loader's whole life, construction included, so that neither
    start-up nor prefetch falls outside the span: a bounded prepflow loader
    stops preparing batches at its last epoch."""
    images = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for images_batch in make_batches():
        images += images_batch.shape[0]
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"images": images, "images_per_cpu_s": images / cpu, "images_per_s": images / wall}


def run_prepflow(args, transform, fidelity):
    batch_ops = [prepflow.ops.MixupCutmix(mixup_alpha=0.2, cutmix_alpha=1.0)] \
        if args.recipe == "resnet50-v2" else []

    def batches():
        loader = prepflow.Loader(args.data, transform=transform, batch_size=args.batch, seed=1,
                                 threads=1, epochs=args.epochs, batch_ops=batch_ops,
                                 fidelity=fidelity)
        for _ in range(args.epochs):  # each pass is one epoch
            for images, _ in loader:
                yield images
        loader.close()
    return timed(batches)


def run_torchvision(args, transform):
    def batches():
        folder = ImageFolder(args.data, transform=transform)
        collate = None
        if args.recipe == "resnet50-v2":
            generator = torch.Generator().manual_seed(1)
            collate = lambda b: reference_mix(*default_collate(b), len(folder.classes),  # noqa
                                              generator)
        loader = DataLoader(folder, batch_size=args.batch, shuffle=True, num_workers=0,
                            collate_fn=collate)
        for _ in range(args.epochs):
            for images, _ in loader:
                yield images
    return timed(batches)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--recipe", default="resnet50-v2",
                    choices=["resnet50-v2", "randaugment", "augmix", "imagenet-train"])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fidelity", default="exact,fast",
                    help="prepflow's fidelity settings to run, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(1)
    transform = recipe(args.recipe)
    fidelities = args.fidelity.split(",")
    rounds = []
    for _ in range(args.rounds):
        r = {f: run_prepflow(args, transform, f) for f in fidelities}
        r["torchvision"] = run_torchvision(args, transform)
        rounds.append(r)
    med = lambda side, key: statistics.median(r[side][key] for r in rounds)  # noqa: E731
    ratio = lambda r, f: r[f]["images_per_cpu_s"] / r["torchvision"]["images_per_cpu_s"]  # noqa
    out = {"benchmark": "recipe", "recipe": args.recipe, "data": args.data, "rounds": args.rounds,
           "pipeline": prepflow.transforms.to_pipeline_text(transform).strip().splitlines()[1:],
           "torchvision_images_per_cpu_s": round(med("torchvision", "images_per_cpu_s"), 1),
           "torchvision_images_per_s": round(med("torchvision", "images_per_s"), 1)}
    for f in fidelities:
        out[f] = {"images_per_cpu_s": round(med(f, "images_per_cpu_s"), 1),
                  "images_per_s": round(med(f, "images_per_s"), 1),
                  "ratio_per_core": round(statistics.median(ratio(r, f) for r in rounds), 2),
                  "ratios": [round(ratio(r, f), 2) for r in rounds]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
