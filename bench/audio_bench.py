#!/usr/bin/python3
"""An audio recipe run by prepflow.Loader and by torch's DataLoader with
torchaudio, side by side on one core (a program, not a test; prints one
JSON line).

Recipe (cedar/PRESTO-style keyword features): MP3 (or FLAC) clips ->
downmix -> resample to 16 kHz -> 1 s (pad or cut) -> MelSpectrogram(n_fft
400, 128 mels) -> AmplitudeToDB(top_db 80) -> FrequencyMasking(27) ->
TimeMasking(40). The torch side is a Dataset doing torchaudio.load and the
same torchaudio transforms (Resample built once per source rate, as a user
would cache it), DataLoader(num_workers=0), one torch thread; prepflow has
threads=1. "Per core" is clips per CPU-second of the process from creating
the loader to its last batch; rounds alternate, ratios are per round, then
the median.

The clips are made here: espeak-ng speaks numbered sentences in several
voices and speeds, sox converts them (--format mp3 at 48 kHz stereo, or flac
at 16 kHz mono).

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/audio_bench.py \\
        --clips 200 --format mp3 --rounds 5
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time

import torch
import torchaudio
from torch.utils.data import DataLoader, Dataset

import prepflow
from prepflow import ops

RATE, MELS = 16000, 128
VOICES = ["en", "en+f3", "en-us", "en+m3", "en+f2"]


def make_clips(root, n, fmt):
    rates = {"mp3": (48000, 2), "flac": (16000, 1)}[fmt]
    for i in range(n):
        folder = pathlib.Path(root, "c%d" % (i % 4))
        folder.mkdir(parents=True, exist_ok=True)
        raw = folder / ("%d-raw.wav" % i)
        subprocess.run(["espeak-ng", "-v", VOICES[i % len(VOICES)], "-s", str(120 + 13 * (i % 7)),
                        "-w", str(raw), "clip number %d of the benchmark" % i],
                       check=True, capture_output=True)
        subprocess.run(["sox", str(raw), "-r", str(rates[0]), "-c", str(rates[1]),
                        str(folder / ("%d.%s" % (i, fmt)))], check=True, capture_output=True)
        raw.unlink()


class TorchaudioClips(Dataset):
    def __init__(self, root):
        self.files = sorted(str(p) for p in pathlib.Path(root).glob("*/*"))
        self.resamplers = {}
        self.features = torch.nn.Sequential(
            torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, n_mels=MELS),
            torchaudio.transforms.AmplitudeToDB(top_db=80),
            torchaudio.transforms.FrequencyMasking(27),
            torchaudio.transforms.TimeMasking(40))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        wave, sr = torchaudio.load(self.files[i])
        wave = wave.mean(0, keepdim=True)
        if sr not in self.resamplers:
            self.resamplers[sr] = torchaudio.transforms.Resample(sr, RATE)
        wave = self.resamplers[sr](wave)
        wave = torch.nn.functional.pad(wave, (0, max(0, RATE - wave.shape[1])))[:, :RATE]
        return self.features(wave), 0


def run_torch(root, epochs, batch):
    start = time.process_time()
    loader = DataLoader(TorchaudioClips(root), batch_size=batch, shuffle=True, num_workers=0)
    n = 0
    for _ in range(epochs):
        for x, _ in loader:
            n += x.shape[0]
    return n / (time.process_time() - start)


def run_prepflow(root, epochs, batch):
    start = time.process_time()
    loader = prepflow.Loader(root, pipeline=[
        ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=RATE), ops.FixLength(frames=RATE),
        ops.MelSpectrogram(n_fft=400, n_mels=MELS), ops.AmplitudeToDb(top_db=80),
        ops.FrequencyMasking(freq_mask_param=27), ops.TimeMasking(time_mask_param=40)],
        batch_size=batch, threads=1, epochs=epochs)
    n = 0
    for x, _ in loader:
        n += x.shape[0]
    loader.close()
    return n / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--format", default="mp3", choices=["mp3", "flac"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="prepflow-audio-bench-")
    try:
        make_clips(tmp, args.clips, args.format)
        ratios, ours, theirs = [], [], []
        for _ in range(args.rounds):
            theirs.append(run_torch(tmp, args.epochs, args.batch))
            ours.append(run_prepflow(tmp, args.epochs, args.batch))
            ratios.append(round(ours[-1] / theirs[-1], 2))
        print(json.dumps({"benchmark": "audio", "format": args.format, "clips": args.clips,
                          "rounds": args.rounds, "prepflow_clips_per_cpu_s":
                          round(statistics.median(ours), 1), "torchaudio_clips_per_cpu_s":
                          round(statistics.median(theirs), 1), "ratio_per_core":
                          statistics.median(ratios), "ratios": ratios}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
