#!/usr/bin/python3
"""A Kinetics-style video recipe run by prepflow.Loader and by torch's
DataLoader decoding with PyAV, side by side on one core (a program, not a
test; prints one JSON line).

Recipe: a random 16-frame clip at stride 4 (64 frames of the video) ->
shorter side 256 -> random crop 224 -> horizontal flip (p 0.5) -> normalize
-> [16, 3, 224, 224] float32, batches of 8.

The torch side is what a careful user writes: a Dataset that opens the file
with PyAV, draws the clip's start over the starts where it fits, seeks to
the keyframe before it, decodes until the clip's last frame and converts only
the frames the clip shows (to_ndarray rgb24), then runs the transforms on the
clip tensor as PyTorchVideo does (ShortSideScale's bilinear interpolate, a
crop, a flip, Normalize); and the same through torchvision.io.read_video
(start_pts/end_pts in seconds: it seeks, decodes the span and converts every
frame in it; every 4th kept). DataLoader(num_workers=0), one torch thread.
prepflow has threads=1 (its resize is Pillow's antialiased filter, which costs
more than interpolate's). "Per core" is clips per CPU-second of the process
from creating the loader to its last batch; rounds alternate, ratios are per
round, then the median.

The videos are made here with the ffmpeg tool: 10 s at 30 fps (Kinetics'
length), H.264 with a keyframe every 2 s, from testsrc2, mandelbrot and a
generated photograph panned with zoompan.

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/video_bench.py \\
        --videos 24 --size 640x360 --rounds 3
    PYTHONPATH=build/python /usr/bin/python3 bench/video_bench.py --videos 24 --make DIR
"""
import argparse
import json
import pathlib
import random
import shutil
import statistics
import subprocess
import tempfile
import time

import av
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset

import prepflow
from prepflow import ops

FRAMES, STRIDE, SHORT, CROP, BATCH = 16, 4, 256, 224, 8
MEAN = torch.tensor([0.45, 0.45, 0.45]).view(1, 3, 1, 1)
STD = torch.tensor([0.225, 0.225, 0.225]).view(1, 3, 1, 1)
SOURCES = ["testsrc2=size={size}:rate=30", "mandelbrot=size={size}:rate=30",
           "testsrc=size={size}:rate=30"]


def make_videos(root, n, size):
    for i in range(n):
        folder = pathlib.Path(root, "class%d" % (i % 4))
        folder.mkdir(parents=True, exist_ok=True)
        source = SOURCES[i % len(SOURCES)].format(size=size)
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        source, "-t", "10", "-c:v", "libx264", "-g", "60", "-pix_fmt", "yuv420p",
                        str(folder / ("%03d.mp4" % i))], check=True, stdin=subprocess.DEVNULL)


def transform(clip):
    """[T, H, W, 3] uint8 -> [T, 3, 224, 224] float32, as PyTorchVideo's
    ShortSideScale, a random crop, a flip and Normalize."""
    x = clip.permute(0, 3, 1, 2).float() / 255
    h, w = x.shape[-2:]
    scale = SHORT / min(h, w)
    x = F.interpolate(x, size=(round(h * scale), round(w * scale)), mode="bilinear",
                      align_corners=False)
    top = random.randint(0, x.shape[-2] - CROP)
    left = random.randint(0, x.shape[-1] - CROP)
    x = x[..., top:top + CROP, left:left + CROP]
    if random.random() < 0.5:
        x = x.flip(-1)
    return (x - MEAN) / STD


class PyAVClips(Dataset):
    def __init__(self, root):
        self.files = sorted(str(p) for p in pathlib.Path(root).glob("*/*.mp4"))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with av.open(self.files[i]) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate)
            tick = float(stream.time_base)
            origin = stream.start_time or 0
            seconds = float(stream.duration * stream.time_base)
            step = STRIDE / fps
            last = max(0.0, seconds - 1 / fps - step * (FRAMES - 1))
            start = random.uniform(0, last)
            times = [start + step * k for k in range(FRAMES)]
            container.seek(origin + int(start / tick), stream=stream, backward=True)
            chosen, held = [], None
            for frame in container.decode(stream):
                t = (frame.pts - origin) * tick
                while len(chosen) < FRAMES and times[len(chosen)] + 1e-6 < t:
                    chosen.append(held if held is not None else frame)
                if len(chosen) == FRAMES:
                    break
                held = frame
            while len(chosen) < FRAMES:
                chosen.append(held)
            clip = torch.stack([torch.from_numpy(f.to_ndarray(format="rgb24")) for f in chosen])
        return transform(clip), 0


class ReadVideoClips(PyAVClips):
    """The same clip through torchvision.io.read_video (PyAV): it seeks and
    decodes the clip's span, and converts every frame in it."""

    def __getitem__(self, i):
        with av.open(self.files[i]) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate)
            seconds = float(stream.duration * stream.time_base)
        span = STRIDE * (FRAMES - 1) / fps
        start = random.uniform(0, max(0.0, seconds - 1 / fps - span))
        frames, _, _ = torchvision.io.read_video(self.files[i], start_pts=start,
                                                 end_pts=start + span, pts_unit="sec",
                                                 output_format="THWC")
        clip = frames[::STRIDE][:FRAMES]
        if clip.shape[0] < FRAMES:
            clip = torch.cat([clip, clip[-1:].expand(FRAMES - clip.shape[0], -1, -1, -1)])
        return transform(clip), 0


def run_torch(root, epochs, dataset=PyAVClips):
    start = time.process_time()
    loader = DataLoader(dataset(root), batch_size=BATCH, shuffle=True, num_workers=0)
    n = 0
    for _ in range(epochs):
        for clips, _ in loader:
            n += clips.shape[0]
    return n / (time.process_time() - start)


def run_prepflow(root, epochs):
    start = time.process_time()
    loader = prepflow.Loader(root, pipeline=[
        ops.DecodeVideo(frames=FRAMES, stride=STRIDE), ops.Resize(shorter_side=SHORT),
        ops.RandomCrop(size=CROP), ops.RandomHorizontalFlip(),
        ops.Normalize(mean=[0.45] * 3, std=[0.225] * 3)], batch_size=BATCH, threads=1,
        epochs=epochs)
    n = 0
    for clips, _ in loader:
        n += clips.shape[0]
    loader.close()
    return n / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, default=24)
    ap.add_argument("--size", default="640x360")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--make", metavar="DIR",
                    help="only make the videos in class folders under DIR (for "
                         "scripts/bench_offload.sh PIPELINE=bench/video_kinetics.pbtxt)")
    args = ap.parse_args()
    if args.make:
        make_videos(pathlib.Path(args.make), args.videos, args.size)
        return
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="prepflow-video-bench-")
    try:
        root = pathlib.Path(tmp, "videos")
        make_videos(root, args.videos, args.size)
        ours, theirs, read_video, ratios, read_ratios = [], [], [], [], []
        for _ in range(args.rounds):
            ours.append(run_prepflow(root, args.epochs))
            theirs.append(run_torch(root, args.epochs))
            read_video.append(run_torch(root, args.epochs, ReadVideoClips))
            ratios.append(ours[-1] / theirs[-1])
            read_ratios.append(ours[-1] / read_video[-1])
        print(json.dumps({"benchmark": "video", "recipe": "kinetics", "videos": args.videos,
                          "size": args.size, "rounds": args.rounds,
                          "prepflow_clips_per_cpu_s": round(statistics.median(ours), 2),
                          "pyav_torch_clips_per_cpu_s": round(statistics.median(theirs), 2),
                          "read_video_clips_per_cpu_s": round(statistics.median(read_video), 2),
                          "ratio_median": round(statistics.median(ratios), 2),
                          "ratios": [round(r, 2) for r in ratios],
                          "ratio_vs_read_video_median": round(statistics.median(read_ratios), 2)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
