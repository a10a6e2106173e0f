#!/usr/bin/python3
"""How far `fidelity="fast"` resizes stand from torchvision's, by how much
they shrink (a program, not a test; prints one JSON line).

Each photograph of --data is resized to each --sizes square by prepflow
(decode -> resize, fidelity fast, and exact as the control) and by
torchvision's Resize on the PIL image; the absolute differences in uint8
levels are pooled by the image's downscale factor (the smaller of source
side / output side over the two axes) into ranges, and each range reports
its images, mean, 99th percentile and max. Exact must show 0 everywhere.

    PYTHONPATH=build/python /usr/bin/python3 bench/fidelity_bench.py \\
        --data ../shared/datasets/photos-hq --filter bilinear
"""
import argparse
import json

import numpy as np
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

import prepflow

RANGES = [(1, 2), (2, 3), (3, 4), (4, 6), (6, 8), (8, 16), (16, 1e9)]


def differences(data, size, filter_name, fidelity, folder):
    """(factor, |differences|) for every image of `data` resized to size^2."""
    stage = ("resize { height: %d width: %d interpolation: INTERPOLATION_%s fidelity: FIDELITY_%s }"
             % (size, size, filter_name.upper(), fidelity.upper()))
    mode = T.InterpolationMode[filter_name.upper()]
    reference = T.Resize((size, size), mode)
    loader = prepflow.Loader(data, pipeline="stages { decode {} } stages { %s }" % stage,
                             batch_size=16, shuffle=False, threads=2, as_numpy=True)
    out = []
    for batch in loader.batches():
        for image, index in zip(batch.images, batch.indices):
            pil = folder[index][0]
            factor = min(pil.size) / size
            expected = np.asarray(reference(pil)).astype(np.int16)
            out.append((factor, np.abs(image.astype(np.int16) - expected).ravel()))
    loader.close()
    return out


def summarize(pairs):
    rows = []
    for low, high in RANGES:
        diffs = [d for f, d in pairs if low <= f < high]
        if not diffs:
            continue
        pooled = np.concatenate(diffs)
        per_image = [float(d.mean()) for d in diffs]
        rows.append({"factor": "%g-%g" % (low, high) if high < 1e9 else ">=%g" % low,
                     "images": len(diffs), "mean": round(float(pooled.mean()), 3),
                     "worst_image_mean": round(max(per_image), 3),
                     "p99": float(np.percentile(pooled, 99)), "max": int(pooled.max())})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="an ImageFolder of JPEG photographs")
    parser.add_argument("--sizes", default="448,224,160,96,48",
                        help="output squares, comma-separated")
    parser.add_argument("--filter", default="bilinear",
                        help="bilinear | bicubic | lanczos | box | hamming")
    args = parser.parse_args()
    folder = ImageFolder(args.data)
    result = {"data": args.data, "filter": args.filter, "images": len(folder)}
    for fidelity in ("fast", "exact"):
        pairs = []
        for size in (int(s) for s in args.sizes.split(",")):
            pairs += differences(args.data, size, args.filter, fidelity, folder)
        result[fidelity] = summarize(pairs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
