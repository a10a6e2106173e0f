#!/usr/bin/python3
"""torchvision's ImageFolder + DataLoader with the imagenet-train transform.

The reference prepflow's local pipeline is measured against. Prints one JSON
line. Run it with Debian's /usr/bin/python3 (python3-torch, python3-torchvision).

    torchvision_loader.py --data DIR [--epochs 1] [--batch 64] [--workers 0]
"""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--pipeline", default="imagenet-train", choices=["imagenet-train", "imagenet-eval"])
    args = ap.parse_args()

    torch.set_num_threads(1)
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if args.pipeline == "imagenet-train":
        tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), normalize])
    else:
        tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                 transforms.ToTensor(), normalize])
    ds = datasets.ImageFolder(args.data, transform=tf)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers)
    images = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    for _ in range(args.epochs):
        for x, y in loader:
            images += x.shape[0]
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    print(json.dumps({"program": "torchvision", "images": images, "seconds": seconds,
                      "images_per_s": images / seconds, "cpu_seconds": cpu_seconds,
                      "images_per_cpu_s": images / cpu_seconds, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
