#!/usr/bin/python3
"""Audio recipes run by prepflow.Loader and by torch's DataLoader with
torchaudio, side by side on one core (a program, not a test; prints one
JSON line).

Recipes:
  kws          keyword features (cedar/PRESTO-style, fixed 1 s): MP3 48 kHz
               stereo (or FLAC, --format) -> downmix -> resample to 16 kHz ->
               1 s (pad or cut) -> MelSpectrogram(n_fft 400, 128 mels) ->
               AmplitudeToDB(80) -> FrequencyMasking(27) -> TimeMasking(40).
  librispeech  the issue's recipe (a): FLAC 16 kHz utterances of 2-12 s ->
               speed perturbation (0.9/1.0/1.1) -> Kaldi fbank 80 ->
               utterance CMVN -> [80, frames] -> FrequencyMasking(27) ->
               TimeMasking(40), batched by length (200 s of padded audio a
               batch, windows of 1000), padded with lengths.
  cedar        the issue's recipe (b): MP3 48 kHz -> resample to 16 kHz ->
               MelSpectrogram(128) -> AmplitudeToDB -> the masks, whole
               clips padded to the batch's longest, with lengths.
  augment      FLAC 16 kHz -> Vad at both ends (torch: Vad, flip, Vad, flip)
               -> noise from a set of 8 sox-made clips at an SNR in [0, 15]
               dB (torch: torchaudio 2.0's add_noise formula on a random
               window) -> MelSpectrogram(80) -> AmplitudeToDB, padded.

The torch side is a Dataset doing torchaudio.load and the same torchaudio
functions (resamplers built once per rate pair, as a user would cache them;
the speed factor drawn with torch's generator), a collate that pads to the
longest and returns lengths, and for librispeech a batch sampler that sorts
windows of 1000 by duration and cuts them within the same budget;
DataLoader(num_workers=0), one torch thread; prepflow has threads=1. "Per
core" is clips per CPU-second of the process from creating the loader to its
last batch; rounds alternate, ratios are per round, then the median.

The clips are made here: espeak-ng speaks numbered sentences in several
voices and speeds, sox converts them.

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/audio_bench.py \\
        --recipe librispeech --clips 200 --rounds 3
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

import torch
import torchaudio
import torchaudio.compliance.kaldi as kaldi
from torch.utils.data import DataLoader, Dataset

import prepflow
from prepflow import ops

RATE, MELS, BUDGET, WINDOW = 16000, 128, 200.0, 1000
VOICES = ["en", "en+f3", "en-us", "en+m3", "en+f2"]
FORMATS = {"kws": None, "librispeech": ("flac", 16000, 1), "cedar": ("mp3", 48000, 2),
           "augment": ("flac", 16000, 1)}
COLOURS = ["whitenoise", "pinknoise", "brownnoise", "tpdfnoise"]


def make_noise(root):
    """8 clips of 1-8 s of sox's noise colours at 16 kHz, in root/noise/sox/
    (a noise set is class folders, as MUSAN's)."""
    folder = pathlib.Path(root, "noise", "sox")
    folder.mkdir(parents=True)
    for i in range(8):
        subprocess.run(["sox", "-n", "-r", "16000", "-b", "16", str(folder / ("%d.wav" % i)),
                        "synth", str(1 + i), COLOURS[i % 4], "vol", "0.3"], check=True,
                       capture_output=True)
    return str(pathlib.Path(root))


def add_noise(wave, noise, snr_db):
    """A random window of a random clip at snr_db (torchaudio 2.0's formula)."""
    clip = noise[int(torch.randint(len(noise), ()))]
    n = wave.shape[-1]
    tiled = clip.repeat(1, n // clip.shape[-1] + 2)
    first = int(torch.randint(max(clip.shape[-1] - n, 0) + 1 if clip.shape[-1] >= n
                              else clip.shape[-1], ()))
    window = tiled[:, first:first + n]
    ratio = wave.pow(2).sum(-1) / window.pow(2).sum(-1)
    scale = 10 ** ((10 * torch.log10(ratio) - snr_db) / 20)
    return wave + scale.unsqueeze(-1) * window


def make_clips(root, n, fmt, rate, channels, long):
    for i in range(n):
        folder = pathlib.Path(root, "c%d" % (i % 4))
        folder.mkdir(parents=True, exist_ok=True)
        raw = folder / ("%d-raw.wav" % i)
        words = " ".join(["clip number %d of the benchmark" % i] * (1 + (i % 5 if long else 0)))
        subprocess.run(["espeak-ng", "-v", VOICES[i % len(VOICES)], "-s", str(120 + 13 * (i % 7)),
                        "-w", str(raw), words], check=True, capture_output=True)
        subprocess.run(["sox", str(raw), "-r", str(rate), "-c", str(channels),
                        str(folder / ("%d.%s" % (i, fmt)))], check=True, capture_output=True)
        raw.unlink()


def masks():
    return torch.nn.Sequential(torchaudio.transforms.FrequencyMasking(27),
                               torchaudio.transforms.TimeMasking(40))


class TorchaudioClips(Dataset):
    def __init__(self, root, recipe):
        self.files = sorted(str(p) for p in pathlib.Path(root).glob("*/*"))
        self.recipe = recipe
        self.resamplers = {}
        self.mel = torch.nn.Sequential(
            torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, n_mels=MELS),
            torchaudio.transforms.AmplitudeToDB(top_db=80))
        self.masks = masks()
        if recipe == "augment":
            noise_dir = pathlib.Path(root).parent / "noise"
            self.noise = [torchaudio.load(str(f))[0] for f in sorted(noise_dir.glob("*/*.wav"))]
            self.vad = torchaudio.transforms.Vad(RATE)
            self.mel80 = torch.nn.Sequential(
                torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, n_mels=80),
                torchaudio.transforms.AmplitudeToDB(top_db=80))

    def __len__(self):
        return len(self.files)

    def resample(self, wave, orig, new):
        if orig == new:
            return wave
        if (orig, new) not in self.resamplers:
            self.resamplers[orig, new] = torchaudio.transforms.Resample(orig, new)
        return self.resamplers[orig, new](wave)

    def __getitem__(self, i):
        wave, sr = torchaudio.load(self.files[i])
        wave = wave.mean(0, keepdim=True)
        if self.recipe == "librispeech":
            factor = (0.9, 1.0, 1.1)[int(torch.randint(3, ()))]
            wave = self.resample(wave, int(factor * sr), sr)
            feats = kaldi.fbank(wave, num_mel_bins=80, sample_frequency=sr)
            feats = (feats - feats.mean(0)).T
            return self.masks(feats.unsqueeze(0))[0]
        if self.recipe == "augment":
            wave = self.vad(self.vad(wave).flip(-1)).flip(-1)
            wave = add_noise(wave, self.noise, float(torch.rand(())) * 15)
            return self.mel80(wave)
        wave = self.resample(wave, sr, RATE)
        if self.recipe == "kws":
            wave = torch.nn.functional.pad(wave, (0, max(0, RATE - wave.shape[1])))[:, :RATE]
        return self.masks(self.mel(wave))[0]


def pad_collate(items):
    lengths = torch.tensor([x.shape[-1] for x in items])
    out = torch.zeros(len(items), *items[0].shape[:-1], int(lengths.max()))
    for k, x in enumerate(items):
        out[k, ..., :x.shape[-1]] = x
    return out, lengths


def durations(files):
    """Each file's seconds from its header (once, as prepflow reads them)."""
    infos = [torchaudio.info(f) for f in files]
    return [i.num_frames / i.sample_rate for i in infos]


def length_batches(seconds, batch):
    """Windows of 1000 sorted by duration, cut within the budget, shuffled."""
    order = list(range(len(seconds)))
    random.shuffle(order)
    batches = []
    for start in range(0, len(order), WINDOW):
        cur = []
        for i in sorted(order[start:start + WINDOW], key=lambda i: seconds[i]):
            if cur and ((len(cur) + 1) * seconds[i] > BUDGET or len(cur) >= batch):
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    random.shuffle(batches)
    return batches


def run_torch(root, recipe, epochs, batch):
    start = time.process_time()
    data = TorchaudioClips(root, recipe)
    seconds = durations(data.files) if recipe == "librispeech" else None
    n = 0
    for _ in range(epochs):
        if recipe == "librispeech":
            loader = DataLoader(data, batch_sampler=length_batches(seconds, batch),
                                collate_fn=pad_collate, num_workers=0)
        else:
            loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=0,
                                collate_fn=pad_collate)
        for x, _ in loader:
            n += x.shape[0]
    return n / (time.process_time() - start)


def prepflow_pipeline(recipe, root):
    spec = [ops.FrequencyMasking(freq_mask_param=27), ops.TimeMasking(time_mask_param=40)]
    if recipe == "augment":
        noise = str(pathlib.Path(root).parent / "noise")
        return [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=RATE),
                ops.Vad(both_ends=True), ops.AddNoise(path=noise, snr_min=0, snr_max=15),
                ops.MelSpectrogram(n_fft=400, n_mels=80), ops.AmplitudeToDb(top_db=80)]
    if recipe == "librispeech":
        return [ops.DecodeAudio(), ops.Downmix(), ops.SpeedPerturb(factors=[0.9, 1.0, 1.1]),
                ops.KaldiFbank(num_mel_bins=80), ops.UtteranceCmvn(dim=0), ops.Transpose()] + spec
    fix = [ops.FixLength(frames=RATE)] if recipe == "kws" else []
    return ([ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=RATE)] + fix +
            [ops.MelSpectrogram(n_fft=400, n_mels=MELS), ops.AmplitudeToDb(top_db=80)] + spec)


def run_prepflow(root, recipe, epochs, batch):
    start = time.process_time()
    by_length = {"max_batch_seconds": BUDGET} if recipe == "librispeech" else {}
    loader = prepflow.Loader(root, pipeline=prepflow_pipeline(recipe, root), batch_size=batch,
                             threads=1, epochs=epochs, **by_length)
    n = 0
    for record in loader:
        n += record["audio"].shape[0]
    loader.close()
    return n / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="kws", choices=sorted(FORMATS))
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--format", default="mp3", choices=["mp3", "flac"], help="kws only")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    fmt = FORMATS[args.recipe] or {"mp3": ("mp3", 48000, 2),
                                   "flac": ("flac", 16000, 1)}[args.format]
    top = tempfile.mkdtemp(prefix="prepflow-audio-bench-")
    tmp = str(pathlib.Path(top, "data"))
    try:
        make_noise(top)
        make_clips(tmp, args.clips, *fmt, long=args.recipe == "librispeech")
        ratios, ours, theirs = [], [], []
        for _ in range(args.rounds):
            theirs.append(run_torch(tmp, args.recipe, args.epochs, args.batch))
            ours.append(run_prepflow(tmp, args.recipe, args.epochs, args.batch))
            ratios.append(round(ours[-1] / theirs[-1], 2))
        print(json.dumps({"benchmark": "audio", "recipe": args.recipe, "format": fmt[0],
                          "clips": args.clips, "rounds": args.rounds,
                          "prepflow_clips_per_cpu_s": round(statistics.median(ours), 1),
                          "torchaudio_clips_per_cpu_s": round(statistics.median(theirs), 1),
                          "ratio_per_core": statistics.median(ratios), "ratios": ratios}))
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
