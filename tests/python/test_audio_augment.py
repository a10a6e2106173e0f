"""add_noise and vad from Python, on speech made here by espeak-ng and noise
made by sox: the mix against the reference formula (torchaudio.functional.
add_noise of torchaudio 2.0, written out below: Debian's 0.13 has none), on
workers that can read the noise set below their data root or cannot; and
vad's cut against torchaudio's transforms.Vad.
"""
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

import prepflow
import testdata
from prepflow import ops

try:
    import torch
    import torchaudio
except ImportError:
    torchaudio = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
TOOLS = shutil.which("espeak-ng") and shutil.which("sox")
WORDS = [("go", "go ahead", "en", 160), ("go", "go now", "en+f3", 190),
         ("stop", "stop there", "en-us", 150), ("stop", "please stop", "en+m3", 170)]
# sox's noise colours, 4 s (longer than any utterance) or 0.3 s (shorter:
# repeated), at 16 kHz or 8 kHz (resampled).
NOISE = [("white", "whitenoise", 4, 16000), ("pink", "pinknoise", 0.3, 16000),
         ("brown", "brownnoise", 4, 8000)]


def speak(root, ext, effects):
    """Each of WORDS spoken by espeak-ng, through sox with `effects` (output
    options, then effects), as root/<class>/<n>.<ext>."""
    for n, (cls, words, voice, wpm) in enumerate(WORDS):
        folder = pathlib.Path(root, cls)
        folder.mkdir(parents=True, exist_ok=True)
        raw = folder / ("%d-raw.wav" % n)
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), words],
                       check=True, capture_output=True)
        out = str(folder / ("%d.%s" % (n, ext)))
        subprocess.run(["sox", str(raw), *effects[:2], out, *effects[2:]], check=True,
                       capture_output=True)
        raw.unlink()


def setUpModule():
    global TMP, SPEECH, NOISE_SET
    TMP = tempfile.mkdtemp(prefix="prepflow-noise-")
    SPEECH = os.path.join(TMP, "speech")
    NOISE_SET = os.path.join(TMP, "noise")
    if not TOOLS:
        return
    speak(SPEECH, "flac", ["-r", "16000"])
    for name, colour, seconds, rate in NOISE:
        folder = pathlib.Path(NOISE_SET, name)
        folder.mkdir(parents=True)
        subprocess.run(["sox", "-n", "-r", str(rate), "-b", "16", str(folder / "0.wav"), "synth",
                        str(seconds), colour, "vol", "0.3"], check=True, capture_output=True)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def run(pipeline, **kw):
    """Every sample's output in dataset order, and the loader's stats."""
    loader = prepflow.Loader(SPEECH, pipeline=pipeline, batch_size=1, shuffle=False,
                             as_numpy=True, **kw)
    out = [batch.images[0] for batch in loader.batches()]
    stats = loader.stats()
    loader.close()
    return out, stats


def add_noise(waveform, noise, snr):
    """torchaudio 2.0's functional.add_noise (float32 throughout)."""
    energy_signal = torch.linalg.vector_norm(waveform, ord=2, dim=-1) ** 2
    energy_noise = torch.linalg.vector_norm(noise, ord=2, dim=-1) ** 2
    original_snr_db = 10 * (torch.log10(energy_signal) - torch.log10(energy_noise))
    scale = 10 ** ((original_snr_db - snr) / 20.0)
    return waveform + scale.unsqueeze(-1) * noise


def window_of(clip, residual):
    """The window of `clip` (repeated as needed) that `residual` is a multiple
    of: the one of greatest normalized cross-correlation with it."""
    n, length = residual.shape[-1], clip.shape[-1]
    tiled = clip.double().repeat(n // length + 2)
    corr = torch.fft.irfft(torch.fft.rfft(tiled)
                           * torch.fft.rfft(residual.double(), n=tiled.shape[-1]).conj(),
                           n=tiled.shape[-1])[:length]
    energy = torch.cat([torch.zeros(1, dtype=torch.float64), (tiled ** 2).cumsum(0)])
    window_energy = (energy[n:n + length] - energy[:length]).clamp(min=1e-30)
    first = int((corr.abs() / window_energy.sqrt()).argmax())
    return clip.repeat(n // length + 2)[first:first + n]


@unittest.skipIf(torchaudio is None or not TOOLS,
                 "needs torchaudio (python3-torchaudio), espeak-ng and sox")
class AddNoise(unittest.TestCase):
    BASE = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000)]

    def clips(self):
        """The noise set as the op holds it: at 16 kHz, with torchaudio's kernel."""
        out = []
        for name, _, _, rate in NOISE:
            wave, sr = torchaudio.load(os.path.join(NOISE_SET, name, "0.wav"))
            out.append(torchaudio.transforms.Resample(sr, 16000)(wave)[0] if sr != 16000
                       else wave[0])
        return out

    def test_the_mix_is_the_reference_formulas(self):
        clean, _ = run(self.BASE)
        noisy, _ = run(self.BASE + [ops.AddNoise(path=NOISE_SET, snr_min=6, snr_max=6)])
        clips = self.clips()
        worst, used = 0.0, set()
        for x, y in zip(clean, noisy):
            x, y = torch.from_numpy(x), torch.from_numpy(y)
            residual = (y - x)[0]
            # The clip whose window fits: the reference's result nearest.
            fits = []
            for k, clip in enumerate(clips):
                want = add_noise(x, window_of(clip, residual), 6.0)
                fits.append((float((want - y).abs().max()), k))
            diff, k = min(fits)
            used.add(k)
            worst = max(worst, diff)
            self.assertLessEqual(diff, 1e-6)
        self.assertGreater(len(used), 1)
        print("add_noise: worst difference from the reference %.3g" % worst)

    def test_draws_follow_the_seed(self):
        pipeline = self.BASE + [ops.AddNoise(path=NOISE_SET, snr_min=0, snr_max=20)]
        a, _ = run(pipeline, seed=1)
        b, _ = run(pipeline, seed=1)
        c, _ = run(pipeline, seed=2)
        self.assertTrue(all(np.array_equal(x, y) for x, y in zip(a, b)))
        self.assertFalse(all(np.array_equal(x, y) for x, y in zip(a, c)))

    def test_a_worker_gives_the_local_checksum(self):
        pipeline = self.BASE + [ops.AddNoise(path=NOISE_SET, snr_min=0, snr_max=20, p=0.8),
                                ops.MelSpectrogram(n_fft=400, n_mels=40)]
        local, st_local = run(pipeline, seed=3)
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=3", "cut=4"):
                remote, st = run(pipeline, seed=3, offload=offload, workers=[worker.address])
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(WORDS), offload)
                self.assertTrue(all(np.array_equal(x, y) for x, y in zip(local, remote)))

    def test_a_worker_that_cannot_read_the_set_runs_the_stages_before_it(self):
        # Its data root holds the speech but not the noise: it runs the
        # first three stages, and the trainer the rest; the same values.
        pipeline = self.BASE + [ops.AddNoise(path=NOISE_SET, snr_min=0, snr_max=20)]
        local, st_local = run(pipeline, seed=4)
        with testdata.Worker(BIN, SPEECH) as worker:
            remote, st = run(pipeline, seed=4, offload="remote", workers=[worker.address])
        self.assertEqual(st["checksum"], st_local["checksum"])
        self.assertEqual(len(remote), len(WORDS))
        self.assertTrue(all(np.array_equal(x, y) for x, y in zip(local, remote)))

    def test_a_missing_set_is_named(self):
        with self.assertRaisesRegex(Exception, "add_noise.*path: noise set.*nowhere"):
            run(self.BASE + [ops.AddNoise(path=os.path.join(TMP, "nowhere"))])


@unittest.skipIf(torchaudio is None or not TOOLS,
                 "needs torchaudio (python3-torchaudio), espeak-ng and sox")
class Vad(unittest.TestCase):
    ROOTS = {16000: None, 22050: None}  # rate: the folder of speech at it

    @classmethod
    def setUpClass(cls):
        for rate in cls.ROOTS:
            cls.ROOTS[rate] = os.path.join(TMP, "padded-%d" % rate)
            # 1.5 s of silence before the words and 1 s after.
            speak(cls.ROOTS[rate], "wav", ["-r", str(rate), "pad", "1.5", "1"])

    def trimmed(self, rate, *stages, **kw):
        """Each clip at `rate` through decode_audio, downmix, resample (to its
        own rate: no change, but the batch's rate is known) and `stages`; the
        stats kept."""
        pipeline = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate), *stages]
        loader = prepflow.Loader(self.ROOTS[rate], pipeline=pipeline,
                                 batch_size=1, shuffle=False, as_numpy=True, **kw)
        out = [batch.images[0] for batch in loader.batches()]
        self.stats = loader.stats()
        loader.close()
        return out

    def test_the_cut_is_torchaudios(self):
        for rate in self.ROOTS:
            self.check_cut(rate)

    def check_cut(self, rate):
        files = sorted(str(p) for p in pathlib.Path(self.ROOTS[rate]).glob("*/*.wav"))
        got = self.trimmed(rate, ops.Vad())
        both = self.trimmed(rate, ops.Vad(both_ends=True))
        self.assertEqual(len(got), len(files))
        for path, front, ends in zip(files, got, both):
            wave, sr = torchaudio.load(path)
            want = torchaudio.transforms.Vad(sample_rate=sr)(wave)
            # The silence before the speech is gone, and what is kept is the clip's.
            self.assertLess(want.shape[-1], wave.shape[-1] - sr, path)
            self.assertEqual(front.shape, tuple(want.shape), path)
            self.assertTrue(np.array_equal(front, want.numpy()), path)
            flip = torchaudio.transforms.Vad(sample_rate=sr)
            want_both = flip(want.flip(-1)).flip(-1)
            self.assertLess(want_both.shape[-1], want.shape[-1] - sr // 2, path)
            self.assertEqual(ends.shape, tuple(want_both.shape), path)
            self.assertTrue(np.array_equal(ends, want_both.numpy()), path)

    def test_a_torchaudio_vad_translates(self):
        sequential = torch.nn.Sequential(torchaudio.transforms.Resample(16000, 16000),
                                         torchaudio.transforms.Vad(sample_rate=16000,
                                                                   trigger_level=6.0))
        root = self.ROOTS[16000]
        loader = prepflow.Loader(root, transform=sequential, batch_size=1, shuffle=False,
                                 as_numpy=True)
        got = [batch.images[0] for batch in loader.batches()]
        loader.close()
        files = sorted(str(p) for p in pathlib.Path(root).glob("*/*.wav"))
        self.assertEqual(len(got), len(files))
        for path, value in zip(files, got):
            wave, sr = torchaudio.load(path)
            want = torchaudio.transforms.Vad(sample_rate=sr, trigger_level=6.0)(wave)
            self.assertTrue(np.array_equal(value, want.numpy()), path)

    def test_a_worker_gives_the_local_values(self):
        stages = [ops.Vad(both_ends=True), ops.Resample(rate=16000)]
        local = self.trimmed(22050, *stages)
        checksum = self.stats["checksum"]
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=3", "cut=4"):
                remote = self.trimmed(22050, *stages, offload=offload, workers=[worker.address])
                self.assertEqual(self.stats["checksum"], checksum, offload)
                self.assertEqual(self.stats["remote_images"], len(WORDS), offload)
                self.assertTrue(all(np.array_equal(x, y) for x, y in zip(local, remote)))


if __name__ == "__main__":
    unittest.main()
