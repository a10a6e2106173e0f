#!/usr/bin/python3
"""prepflow's Python Loader against torchvision's DataLoader and against the
`prepflow run` CLI, side by side in one run (a program, not a test; prints
one JSON line).

Each round runs, in turn: the CLI, prepflow.Loader (torch tensors), and
torch.utils.data.DataLoader over torchvision's ImageFolder with the same
augmentation (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
Normalize), each with the same number of threads / worker processes; the
figures are medians over rounds.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_loader_bench.py \\
        --data ../shared/datasets/photos-512 --threads 2 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import torchvision

import prepflow

BUILD = os.environ.get("PREPFLOW_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..",
                                                           "build"))


def run_prepflow(args):
    loader = prepflow.Loader(args.data, "imagenet-train", args.batch, seed=1, threads=args.threads)
    n = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for images, labels in loader:
            n += images.shape[0]
    return n / (time.perf_counter() - start), loader.stats()["checksum"]


def run_torch(args):
    t = torchvision.transforms
    dataset = torchvision.datasets.ImageFolder(args.data, t.Compose([
        t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.ToTensor(),
        t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         num_workers=args.threads, persistent_workers=True)
    n = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for images, labels in loader:
            n += images.shape[0]
    return n / (time.perf_counter() - start)


def run_cli(args):
    out = subprocess.run([os.path.join(BUILD, "bin", "prepflow"), "run", "--data", args.data,
                          "--batch", str(args.batch), "--seed", "1", "--threads",
                          str(args.threads), "--epochs", str(args.epochs), "--json"],
                         capture_output=True, text=True, check=True)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j["images_per_s"], j["checksum"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)  # the DataLoader's workers do the work
    cli, py, tv = [], [], []
    checksums = set()
    for _ in range(args.rounds):
        rate, checksum = run_cli(args)
        cli.append(rate)
        checksums.add(checksum)
        rate, checksum = run_prepflow(args)
        py.append(rate)
        checksums.add(checksum)
        tv.append(run_torch(args))
    result = {
        "data": args.data, "threads": args.threads, "batch": args.batch, "epochs": args.epochs,
        "rounds": args.rounds,
        "cli_images_per_s": statistics.median(cli),
        "python_images_per_s": statistics.median(py),
        "torchvision_images_per_s": statistics.median(tv),
        "python_vs_cli": statistics.median(py) / statistics.median(cli),
        "python_vs_torchvision": statistics.median(py) / statistics.median(tv),
        "checksums_equal": len(checksums) == 1,
        "all": {"cli": cli, "python": py, "torchvision": tv},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
