#!/usr/bin/python3
"""Trains torchvision's ResNet-18 for a few steps on an ImageFolder, fed by
prepflow or, for comparison, by PyTorch's stock DataLoader.

The two lines that change in a training script are the import and the
loader; the transform stays the user's torchvision Compose, and the rest is
an ordinary PyTorch loop:

    import prepflow
    loader = prepflow.Loader(data, transform=transform, batch_size=..., seed=...,
                             offload="auto")

Run it with Debian's python3 (where python3-torch is) and the built package:

    PYTHONPATH=build/python /usr/bin/python3 examples/train_resnet.py \\
        --data ../shared/datasets/photos-512 --steps 20
    ... --loader torch                   # the same loop on torch.utils.data.DataLoader
    ... --offload remote --workers host:7070   # preprocessing on prepflow workers
    ... --recipe resnet50-v2             # TrivialAugmentWide, RandomErasing, MixUp/CutMix

It prints one line per step and a JSON summary last: images/s, the share of
time spent waiting for data, and the first and last loss.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torchvision


def transform(recipe):
    """The per-sample transform, one torchvision Compose for both loaders."""
    t = torchvision.transforms
    normalize = t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if recipe == "resnet50-v2":  # torchvision's ResNet-50 v2 recipe, per sample
        return t.Compose([t.RandomResizedCrop(176), t.RandomHorizontalFlip(),
                          t.TrivialAugmentWide(interpolation=t.InterpolationMode.BILINEAR),
                          t.ToTensor(), normalize, t.RandomErasing(0.1)])
    return t.Compose([t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.ToTensor(),
                      normalize])


def prepflow_batches(args):
    import prepflow
    # The recipe's MixUp 0.2 / CutMix 1.0 on each batch: soft labels come out,
    # which CrossEntropyLoss takes as class probabilities.
    batch_ops = [prepflow.ops.MixupCutmix(mixup_alpha=0.2, cutmix_alpha=1.0)] \
        if args.recipe == "resnet50-v2" else []
    loader = prepflow.Loader(args.data, transform=transform(args.recipe), batch_size=args.batch,
                             seed=args.seed, threads=args.threads, offload=args.offload,
                             workers=args.workers.split(",") if args.workers else (),
                             scheduler=args.scheduler, device=args.device, batch_ops=batch_ops)
    return loader, len(loader)


def torch_batches(args):
    dataset = torchvision.datasets.ImageFolder(args.data, transform(args.recipe))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch, shuffle=True, num_workers=args.threads,
        generator=torch.Generator().manual_seed(args.seed), persistent_workers=args.threads > 0)
    return loader, len(loader)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="an ImageFolder")
    p.add_argument("--loader", choices=["prepflow", "torch"], default="prepflow")
    p.add_argument("--recipe", choices=["imagenet-train", "resnet50-v2"], default="imagenet-train",
                   help="the transform (resnet50-v2 adds MixUp/CutMix on prepflow's batches)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps (across epochs)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="preprocessing threads (DataLoader: worker processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cpu")
    p.add_argument("--offload", default=None, help="prepflow: off|auto|remote|cut=K")
    p.add_argument("--workers", default="", help="prepflow: worker addresses, host:port,...")
    p.add_argument("--scheduler", default=None, help="prepflow: scheduler host:port")
    args = p.parse_args()
    if args.steps < 1 or args.batch < 1:
        p.error("--steps and --batch must be at least 1")

    torch.manual_seed(args.seed)
    loader, per_epoch = (prepflow_batches if args.loader == "prepflow" else torch_batches)(args)
    classes = len([d for d in os.scandir(args.data) if d.is_dir()])
    device = torch.device(args.device if args.device == "cpu" or torch.cuda.is_available()
                          else "cpu")
    model = torchvision.models.resnet18(num_classes=classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()

    step, images_seen, waited, losses = 0, 0, 0.0, []
    start = time.perf_counter()
    epoch = 0
    while step < args.steps:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        t_wait = time.perf_counter()
        for images, labels in loader:
            waited += time.perf_counter() - t_wait
            images, labels = images.to(device), labels.to(device)
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            images_seen += images.shape[0]
            losses.append(loss.item())
            elapsed = time.perf_counter() - start
            print(f"epoch {epoch} step {step}/{args.steps}  loss {losses[-1]:.3f}  "
                  f"{images_seen / elapsed:.1f} images/s  waited {100 * waited / elapsed:.0f}%",
                  flush=True)
            if step == args.steps:
                break
            t_wait = time.perf_counter()
        epoch += 1
    elapsed = time.perf_counter() - start
    summary = {"loader": args.loader, "steps": step, "batch": args.batch, "epochs_started": epoch,
               "batches_per_epoch": per_epoch, "images": images_seen,
               "images_per_s": images_seen / elapsed, "wait_share": waited / elapsed,
               "first_loss": losses[0], "last_loss": losses[-1],
               "mean_loss_first_half": sum(losses[:len(losses) // 2 or 1]) / (len(losses) // 2 or 1),
               "mean_loss_second_half": sum(losses[len(losses) // 2:]) / len(losses[len(losses) // 2:])}
    if args.loader == "prepflow":
        st = loader.stats()
        summary.update(checksum=st["checksum"], remote_images=st["remote_images"])
    print(json.dumps(summary))
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
