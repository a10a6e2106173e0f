#!/usr/bin/python3
"""A CLIP-style image-caption recipe run by prepflow.Loader and by torch's
DataLoader, side by side on one core (a program, not a test; prints one JSON
line).

Recipe: the image decoded -> RandomResizedCrop 224 -> horizontal flip ->
normalize; the caption -> CLIP's BPE, 77 ids with <|startoftext|> and
<|endoftext|>, padded. Batches of 64.

The torch side is what CLIP's users write: a Dataset over the same images
and captions, PIL and torchvision's transforms, and CLIP's tokenizer in
Python (its SimpleTokenizer, with its per-word cache; tests/python/
text_reference.py, ftfy and html.unescape left out as prepflow leaves them),
DataLoader(num_workers=0), one torch thread. prepflow reads the same pairs
from a WebDataset shard (key.jpg, key.txt) with threads=1. "Per core" is
samples per CPU-second of the process from creating the loader to its last
batch; rounds alternate, ratios are per round, then the median.

The merges (2,000) are learned here from Debian's license texts, the
captions made from their words; the images are a folder of photographs
(default ../shared/datasets/photos-512; any folder of JPEGs).

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/clip_bench.py \\
        --images ../shared/datasets/photos-512 --rounds 3
"""
import argparse
import io
import json
import pathlib
import random
import shutil
import sys
import tarfile
import tempfile
import time

import regex
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import prepflow
from paired import medians, paired_rounds
from prepflow import ops

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "python"))
from text_reference import CLIP_PAT, ClipReference, learn_merges, whitespace_clean  # noqa: E402

BATCH, CROP, CONTEXT = 64, 224, 77
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def make_data(images, tmp, count, merges_count):
    """The shard of (jpg, txt) pairs, the captions and the merges file."""
    text = "\n".join(p.read_text(errors="replace")
                     for p in sorted(pathlib.Path("/usr/share/common-licenses").glob("*"))
                     if p.is_file())
    words = regex.findall(r"\p{L}+", text)
    rng = random.Random(1)
    files = sorted(p for p in pathlib.Path(images).rglob("*")
                   if p.suffix.lower() in (".jpg", ".jpeg"))[:count]
    captions = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 25))) + "."
                for _ in files]
    merges = pathlib.Path(tmp, "merges.txt")
    learned = learn_merges(CLIP_PAT.findall(whitespace_clean(text).lower())[:40000],
                           merges_count, "</w>")
    merges.write_text('"bpe_simple_vocab#version: 0.2\n' +
                      "".join("%s %s\n" % m for m in learned), encoding="utf-8")
    shard = pathlib.Path(tmp, "pairs.tar")
    with tarfile.open(shard, "w") as tar:
        for n, (path, caption) in enumerate(zip(files, captions)):
            for ext, data in (("jpg", path.read_bytes()), ("txt", caption.encode())):
                info = tarfile.TarInfo("%06d.%s" % (n, ext))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return shard, files, captions, merges


class Pairs(Dataset):
    def __init__(self, files, captions, merges):
        self.files, self.captions = files, captions
        self.tokenizer = ClipReference(merges, cache=True)
        self.transform = T.Compose([T.RandomResizedCrop(CROP), T.RandomHorizontalFlip(),
                                    T.ToTensor(), T.Normalize(MEAN, STD)])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as image:
            x = self.transform(image.convert("RGB"))
        return x, torch.tensor(self.tokenizer.tokenize(self.captions[i], CONTEXT))


def run_torch(files, captions, merges, epochs):
    start = time.process_time()
    loader = DataLoader(Pairs(files, captions, merges), batch_size=BATCH, shuffle=True,
                        num_workers=0)
    n = 0
    for _ in range(epochs):
        for images, _ in loader:
            n += images.shape[0]
    return n / (time.process_time() - start)


def run_prepflow(shard, merges, epochs):
    start = time.process_time()
    loader = prepflow.Loader(str(shard), pipeline={
        "jpg": [ops.Decode(), ops.RandomResizedCrop(size=CROP), ops.RandomHorizontalFlip(),
                ops.Normalize(mean=MEAN, std=STD)],
        "txt": [ops.Tokenize(kind="clip", merges=str(merges), context_length=CONTEXT, pad=True,
                             add_bos=True, add_eos=True)]}, batch_size=BATCH, threads=1,
        epochs=epochs)
    n = 0
    for batch in loader:
        n += batch["jpg"].shape[0]
    loader.close()
    return n / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", default="../shared/datasets/photos-512")
    ap.add_argument("--count", type=int, default=512)
    ap.add_argument("--merges", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="prepflow-clip-bench-")
    try:
        shard, files, captions, merges = make_data(args.images, tmp, args.count, args.merges)
        ours, theirs, ratios = paired_rounds(
            args.rounds, lambda: run_prepflow(shard, merges, args.epochs),
            lambda: run_torch(files, captions, merges, args.epochs))
        print(json.dumps({"benchmark": "clip", "images": len(files), "merges": args.merges,
                          "rounds": args.rounds,
                          **medians("prepflow_samples_per_cpu_s", ours,
                                    "torch_samples_per_cpu_s", theirs, ratios, digits=1)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
