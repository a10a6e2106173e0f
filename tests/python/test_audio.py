"""Audio pipelines from Python, against torchaudio (Debian's 0.13, sox_io),
on speech made here: espeak-ng speaks words in several voices and speeds,
and sox converts them to FLAC, MP3 (stereo) and Ogg Vorbis at several rates.

Parity bounds (docs/ops.md): decode_audio is exact for PCM WAV and FLAC,
within 2^-16 for Ogg Vorbis (torchaudio's sox goes through 16 bits) and 2e-6
for MP3 over the frames both keep; downmix is exact for mono and stereo;
resample is torchaudio's kernel, within 5e-7 of its floats (1.2e-7 measured).
"""
import os
import pathlib
import shutil
import subprocess
import sys
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
# (class, word, espeak voice and words per minute, sox output: extension,
# rate, channels).
SPEECH = [
    ("go", "go", "en", 160, "wav", 22050, 1),
    ("go", "go ahead", "en+f3", 200, "flac", 16000, 1),
    ("go", "go now", "en-us", 140, "mp3", 44100, 2),
    ("stop", "stop", "en", 175, "ogg", 48000, 1),
    ("stop", "stop there", "en+m3", 150, "wav", 16000, 2),
    ("stop", "please stop", "en-us", 190, "flac", 8000, 1),
    ("yes", "yes", "en+f2", 170, "mp3", 22050, 1),
    ("yes", "yes indeed", "en", 130, "ogg", 22050, 2),
]
MAX_FRAMES = 3 * 48000  # longer than any clip at any rate here


def make_speech(root):
    """The SPEECH clips as root/<class>/<n>.<ext>."""
    for n, (cls, words, voice, wpm, ext, rate, channels) in enumerate(SPEECH):
        folder = pathlib.Path(root, cls)
        folder.mkdir(parents=True, exist_ok=True)
        raw = folder / ("%d-raw.wav" % n)
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), words],
                       check=True, capture_output=True)
        subprocess.run(["sox", str(raw), "-r", str(rate), "-c", str(channels),
                        str(folder / ("%d.%s" % (n, ext)))], check=True, capture_output=True)
        raw.unlink()


def setUpModule():
    global TMP, ROOT
    TMP = tempfile.mkdtemp(prefix="prepflow-audio-")
    ROOT = os.path.join(TMP, "speech")
    if TOOLS:
        make_speech(ROOT)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def files():
    """The dataset's files in prepflow's (and DatasetFolder's) order."""
    return sorted(str(p) for p in pathlib.Path(ROOT).glob("*/*"))


def run(pipeline, batch_size=3, **kw):
    """Every sample's output in dataset order (testdata.run_loader)."""
    return testdata.run_loader(ROOT, pipeline, batch_size, **kw)


def bound(path):
    """The decode bound for a file of this kind (see the module's doc)."""
    return {".wav": 0, ".flac": 0, ".ogg": 2 ** -16, ".mp3": 2e-6}[pathlib.Path(path).suffix]


@unittest.skipIf(torchaudio is None or not TOOLS,
                 "needs torchaudio (python3-torchaudio), espeak-ng and sox")
class Parity(unittest.TestCase):
    def test_decode_and_downmix_are_torchaudios(self):
        got, labels, _ = run([ops.DecodeAudio(), ops.Downmix(), ops.FixLength(frames=MAX_FRAMES)])
        self.assertEqual(len(got), len(SPEECH))
        self.assertEqual(sorted(set(labels)), [0, 1, 2])
        for path, value in zip(files(), got):
            wave, _ = torchaudio.load(path)
            want = wave.mean(0, keepdim=True).numpy()
            self.assertEqual(value.shape, (1, MAX_FRAMES), path)
            n = want.shape[1]
            # Zeros after the clip; libsndfile keeps the MP3 block sox drops as padding.
            tail = n + (1152 if path.endswith(".mp3") else 0)
            self.assertFalse(value[0, tail:].any(), path)
            diff = np.abs(value[:, :n] - want).max()
            self.assertLessEqual(diff, bound(path), path)

    def test_resample_is_torchaudios_kernel(self):
        rate = 16000
        got, _, _ = run([ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate),
                         ops.FixLength(frames=MAX_FRAMES)])
        worst = 0.0
        for path, value in zip(files(), got):
            if bound(path) != 0:
                continue  # lossy decodes differ already: resampling is compared on exact ones
            wave, sr = torchaudio.load(path)
            want = torchaudio.transforms.Resample(sr, rate)(wave.mean(0, keepdim=True)).numpy()
            n = want.shape[1]
            self.assertFalse(value[0, n:].any(), path)  # the same length
            worst = max(worst, float(np.abs(value[:, :n] - want).max()))
            self.assertLessEqual(np.abs(value[:, :n] - want).max(), 5e-7, path)
        print("resample: worst difference from torchaudio %.3g" % worst, file=sys.stderr)

    def test_mel_spectrogram_and_decibels_are_torchaudios(self):
        # n_fft 400 through KISS FFT, 512 through prepflow's lane FFT.
        for n_fft in (400, 512):
            with self.subTest(n_fft=n_fft):
                self.check_mel(n_fft)

    def check_mel(self, n_fft):
        rate, n_mels = 16000, 64
        got, _, _ = run([ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate),
                         ops.FixLength(frames=rate), ops.MelSpectrogram(n_fft=n_fft, n_mels=n_mels),
                         ops.AmplitudeToDb(top_db=80)])
        mel_only, _, _ = run([ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate),
                              ops.FixLength(frames=rate),
                              ops.MelSpectrogram(n_fft=n_fft, n_mels=n_mels, slaney_scale=True,
                                                 slaney_norm=True)])
        worst_mel = worst_db = 0.0
        for path, db, mel in zip(files(), got, mel_only):
            if bound(path) != 0:
                continue
            wave, sr = torchaudio.load(path)
            x = torchaudio.transforms.Resample(sr, rate)(wave.mean(0, keepdim=True))
            x = torch.nn.functional.pad(x, (0, max(0, rate - x.shape[1])))[:, :rate]
            want_mel = torchaudio.transforms.MelSpectrogram(
                rate, n_fft=n_fft, n_mels=n_mels, norm="slaney", mel_scale="slaney")(x).numpy()
            self.assertEqual(mel.shape, want_mel.shape, path)
            peak = want_mel.max(axis=1, keepdims=True)  # each frame's largest band
            rel = float((np.abs(mel - want_mel) / np.maximum(peak, 1e-30)).max())
            worst_mel = max(worst_mel, rel)
            self.assertLessEqual(rel, 1e-5, path)
            power = torchaudio.transforms.MelSpectrogram(rate, n_fft=n_fft, n_mels=n_mels)(x)
            want_db = torchaudio.transforms.AmplitudeToDB(top_db=80)(power).numpy()
            loud = power.numpy() >= power.numpy().max() * 1e-5  # 50 dB below the peak
            diff = float(np.abs(db - want_db)[loud].max())
            worst_db = max(worst_db, diff)
            self.assertLessEqual(diff, 1e-3, path)
        print("mel (n_fft %d): worst %.3g of the frame's peak; dB: worst %.3g within 50 dB of "
              "the peak" % (n_fft, worst_mel, worst_db), file=sys.stderr)

    def test_kaldi_fbank_is_torchaudios(self):
        # Each clip at 8 and 16 kHz through prepflow's decode and resample;
        # torchaudio's fbank on the same waveform.
        import torchaudio.compliance.kaldi as kaldi
        configs = [dict(num_mel_bins=80),
                   dict(num_mel_bins=40, use_energy=True, window_type="hamming",
                        snip_edges=False),
                   dict(num_mel_bins=23, round_to_power_of_two=False, frame_length=20,
                        use_energy=True, raw_energy=False, htk_compat=True),
                   dict(num_mel_bins=30, window_type="blackman", subtract_mean=True,
                        low_freq=40, high_freq=-200)]
        worst = 0
        for rate in (8000, 16000):
            wave = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate)]
            waveforms, _, _ = run(wave, batch_size=1)
            for config in configs:
                got, _, _ = run(wave + [ops.KaldiFbank(**config)], batch_size=1)
                for x, features in zip(waveforms, got):
                    want = kaldi.fbank(torch.from_numpy(x), sample_frequency=rate,
                                       **config).numpy()
                    self.assertEqual(features.shape, want.shape, config)
                    # Where the band holds at least 1e-6 of its frame's energy.
                    kept = want >= want.max(axis=1, keepdims=True) + np.log(1e-6)
                    worst = max(worst, float(np.abs(features - want)[kept].max()))
        self.assertLessEqual(worst, 5e-4)
        print("\nkaldi_fbank: worst %.2e of torchaudio's log energy" % worst, file=sys.stderr)

    def test_speed_vol_cmvn_and_transpose_are_the_references(self):
        wave = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000)]
        waveforms, _, _ = run(wave, batch_size=1)
        for factor in (0.9, 1.1):
            sped, _, _ = run(wave + [ops.SpeedPerturb(factors=[factor])], batch_size=1)
            for x, got in zip(waveforms, sped):
                want = torchaudio.functional.resample(torch.from_numpy(x),
                                                      int(factor * 16000), 16000).numpy()
                self.assertEqual(got.shape, want.shape)
                self.assertLessEqual(float(np.abs(got - want).max()), 5e-7)
        for gain, kind, name in ((3.5, "GAIN_TYPE_AMPLITUDE", "amplitude"),
                                 (0.25, "GAIN_TYPE_POWER", "power"),
                                 (-6.0, "GAIN_TYPE_DB", "db")):
            loud, _, _ = run(wave + [ops.Vol(gain=gain, gain_type=kind)], batch_size=1)
            vol = torchaudio.transforms.Vol(gain, name)
            for x, got in zip(waveforms, loud):
                self.assertTrue(np.array_equal(got, vol(torch.from_numpy(x)).numpy()), name)
        # ESPnet's utterance CMVN over time, in float64; then [bins, frames].
        fbank = wave + [ops.KaldiFbank(num_mel_bins=40)]
        plain, _, _ = run(fbank, batch_size=1)
        normed, _, _ = run(fbank + [ops.UtteranceCmvn(dim=0, norm_vars=True), ops.Transpose()],
                           batch_size=1)
        for x, got in zip(plain, normed):
            x = x.astype(np.float64)
            want = ((x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-20)).T
            self.assertLessEqual(float((np.abs(got - want) / (1 + np.abs(want))).max()), 1e-6)

    def test_preemphasis_log_and_mfcc_are_torchaudios(self):
        rate = 16000
        wave = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate)]
        waveforms, _, _ = run(wave, batch_size=1)
        emphasized, _, _ = run(wave + [ops.Preemphasis(coeff=0.97)], batch_size=1)
        for x, got in zip(waveforms, emphasized):
            want = torch.from_numpy(x).clone()  # torchaudio 2.x's F.preemphasis
            want[..., 1:] -= 0.97 * want[..., :-1]
            self.assertTrue(np.array_equal(got, want.numpy()))
        mel = wave + [ops.MelSpectrogram(n_fft=400, n_mels=40)]
        mels, _, _ = run(mel, batch_size=1)
        logs, _, _ = run(mel + [ops.Log()], batch_size=1)
        for m, got in zip(mels, logs):
            want = torch.log(torch.from_numpy(m) + 1e-6).numpy()
            self.assertLessEqual(float((np.abs(got - want) / np.spacing(want)).max()), 2)
        # The DCT on prepflow's own log-mels: torchaudio's matrix and matmul.
        for norm in ("ortho", None):
            mfcc, _, _ = run(mel + [ops.Log(), ops.Dct(n_mfcc=13, ortho=norm == "ortho")],
                             batch_size=1)
            dct = torchaudio.functional.create_dct(13, 40, norm)
            for x, got in zip(logs, mfcc):
                want = torch.matmul(torch.from_numpy(x).transpose(-1, -2), dct).transpose(-1, -2)
                scale = float(np.abs(x).max()) * np.sqrt(40)
                self.assertLessEqual(float(np.abs(got - want.numpy()).max()), 1e-5 * scale)
        # torchaudio's MFCC, translated, on the same waveforms: as close as
        # its mel bands allow (their error grows far below the frame's peak).
        worst = 0.0
        for kw in (dict(n_mfcc=13, melkwargs=dict(n_fft=400, n_mels=40)),
                   dict(n_mfcc=20, log_mels=True, norm=None, melkwargs=dict(n_mels=64))):
            transform = torchaudio.transforms.MFCC(rate, **kw)
            stages = prepflow.transforms.to_stages([transform])
            self.assertEqual(stages[-1].text(), "dct { n_mfcc: %d ortho: %s }" % (
                kw["n_mfcc"], "false" if "norm" in kw else "true"))
            got_all, _, _ = run(wave + stages[2:], batch_size=1)
            for x, got in zip(waveforms, got_all):
                want = transform(torch.from_numpy(x)).numpy()
                self.assertEqual(got.shape, want.shape)
                worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
        print("\nmfcc: worst %.2e of the sample's largest coefficient" % worst, file=sys.stderr)
        self.assertLessEqual(worst, 1e-5)  # 1.3e-6 measured

    def test_spectrogram_time_shift_and_iid_masks(self):
        rate = 16000
        wave = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=rate)]
        waveforms, _, _ = run(wave, batch_size=1)
        transform = torchaudio.transforms.Spectrogram(n_fft=512, hop_length=160)
        stages = prepflow.transforms.to_stages([transform])
        got_all, _, _ = run(wave + stages[2:], batch_size=1)
        worst = whole = 0.0
        for x, got in zip(waveforms, got_all):
            want = transform(torch.from_numpy(x)).numpy()
            self.assertEqual(got.shape, want.shape)
            peak = want.max(axis=1, keepdims=True)  # each frame's largest bin
            worst = max(worst, float((np.abs(got - want) / np.maximum(peak, 1e-30)).max()))
            whole = max(whole, float(np.abs(got - want).max() / want.max()))
        print("\nspectrogram: worst %.2e of the frame's largest bin, %.2e of the sample's"
              % (worst, whole), file=sys.stderr)
        self.assertLessEqual(worst, 1e-4)
        self.assertLessEqual(whole, 1e-5)
        # Each sample shifted by one k in [-K, K]: torch.roll's, or zero-filled.
        for rollover in (True, False):
            shifted, _, _ = run(wave + [ops.TimeShift(max_seconds=0.01, rollover=rollover)],
                                batch_size=1)
            ks = set()
            for x, got in zip(waveforms, shifted):
                x = torch.from_numpy(x)
                for k in range(-160, 161):
                    want = torch.roll(x, k, -1)
                    if not rollover and k > 0:
                        want[..., :k] = 0
                    elif not rollover and k < 0:
                        want[..., k:] = 0
                    if torch.equal(torch.from_numpy(got), want):
                        ks.add(k)
                        break
                else:
                    self.fail("no shift in [-160, 160] gives the output (rollover=%s)" % rollover)
            self.assertGreater(len(ks), 1)  # drawn per sample
        masks = prepflow.transforms.to_stages([torchaudio.transforms.FrequencyMasking(
            8, iid_masks=True)])  # a sample is 3-D: torchaudio draws one mask either way
        self.assertEqual(masks[-1].text(), "frequency_masking { freq_mask_param: 8 }")

    def test_time_stretch_magnitude_and_mel_scale_are_torchaudios(self):
        # cedar's frequency-domain stretch: complex STFT -> phase vocoder ->
        # |z|^2 -> mel. Each op against torchaudio on the same input.
        base = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000),
                ops.Spectrogram(n_fft=512, complex=True)]
        spectra, _, _ = run(base, batch_size=1)
        # The complex spectrum is torch.stft's (view_as_real), on the same
        # waveform.
        waves, _, _ = run(base[:-1], batch_size=1)
        stft = torchaudio.transforms.Spectrogram(n_fft=512, power=None)
        for w, z in zip(waves, spectra):
            want = torch.view_as_real(stft(torch.from_numpy(w.copy()))).numpy()
            self.assertEqual(z.shape, want.shape)
            self.assertLess(np.abs(z - want).max(), 1e-6 * np.abs(want).max())
        worst_mag = worst_z = 0.0
        for rate in (0.8, 1.25):
            got, _, _ = run(base + [ops.TimeStretch(fixed_rate=rate)], batch_size=1)
            stretch = torchaudio.transforms.TimeStretch(n_freq=257, fixed_rate=rate)
            for z, g in zip(spectra, got):
                ref = stretch(torch.view_as_complex(torch.from_numpy(z.copy())))
                self.assertEqual(g.shape[:-1], tuple(ref.shape))
                peak = float(ref.abs().max())
                worst_mag = max(worst_mag, float(np.abs(np.hypot(g[..., 0], g[..., 1]) -
                                                        ref.abs().numpy()).max()) / peak)
                worst_z = max(worst_z, float(np.abs(g - torch.view_as_real(ref).numpy()).max())
                              / peak)
        self.assertLess(worst_mag, 1e-5)
        self.assertLess(worst_z, 5e-4)
        power, _, _ = run(base + [ops.Magnitude()], batch_size=1)
        mels, _, _ = run(base + [ops.Magnitude(), ops.MelScale(n_mels=64, sample_rate=16000)],
                         batch_size=1)
        scale = torchaudio.transforms.MelScale(64, 16000, n_stft=257)
        worst_mel = 0.0
        for z, p, m in zip(spectra, power, mels):
            ref = torch.view_as_complex(torch.from_numpy(z.copy())).abs().pow(2).numpy()
            self.assertLessEqual(np.abs(p - ref).max(), 1e-6 * np.abs(ref).max() + 1e-30,
                                 np.abs(p - ref).max() / np.abs(ref).max())
            want = scale(torch.from_numpy(p.copy())).numpy()
            peak = np.maximum(want.max(axis=-2, keepdims=True), 1e-30)
            worst_mel = max(worst_mel, float((np.abs(m - want) / peak).max()))
        self.assertLess(worst_mel, 5e-5)
        print("time_stretch: magnitude %.3g, complex %.3g of the peak; mel_scale %.3g" %
              (worst_mag, worst_z, worst_mel), file=sys.stderr)
        # And translated from torchaudio (ops.Magnitude where torchaudio's
        # users write spec.abs().pow(2)); a rate per call does not translate.
        seq = [torchaudio.transforms.Spectrogram(n_fft=512, power=None),
               torchaudio.transforms.TimeStretch(n_freq=257, fixed_rate=1.25), ops.Magnitude(),
               torchaudio.transforms.MelScale(64, 16000, n_stft=257)]
        loader = prepflow.Loader(ROOT, transform=[torchaudio.transforms.Resample(16000, 16000)]
                                 + seq, batch_size=2, shuffle=False)
        batch = next(iter(loader))
        self.assertEqual(tuple(batch["audio"].shape[:3]), (2, 1, 64))
        loader.close()
        with self.assertRaisesRegex(ValueError, "fixed_rate"):
            prepflow.Loader(ROOT, transform=[torchaudio.transforms.TimeStretch(n_freq=257)],
                            batch_size=2)

    def test_what_does_not_translate_runs_in_the_python_tail(self):
        # prepflow's part: decode, downmix, resample; the tail (from Fade on)
        # gets each waveform at its own length, and its outputs (which vary
        # in frames) are padded with their lengths.
        rate = 16000

        class Trim(torch.nn.Module):  # the user's own: cuts quiet ends, so lengths vary
            def forward(self, x):
                loud = (x.abs() > 0.02).any(0).nonzero()
                return x[:, int(loud[0]):int(loud[-1]) + 1] if len(loud) else x

        tail = [torchaudio.transforms.Fade(fade_in_len=800, fade_out_len=800), Trim(),
                torchaudio.transforms.MelSpectrogram(rate, n_mels=40)]
        stages, rest = prepflow.transforms.split([ops.Resample(rate=rate)] + tail)
        self.assertEqual([s.name for s in stages], ["decode_audio", "downmix", "resample"])
        self.assertEqual(len(rest.transforms), 3)
        waveforms, _, _ = run(stages, batch_size=1)
        loader = prepflow.Loader(ROOT, transform=[ops.Resample(rate=rate)] + tail, batch_size=4,
                                 shuffle=False, python_tail="thread", tail_workers=2)
        count, lengths = 0, set()
        for record in loader:
            self.assertEqual(record["audio"].dim(), 4)  # [B, 1, 40, longest]
            for mel, n in zip(record["audio"], record["audio_lengths"]):
                want = torch.nn.Sequential(*tail)(torch.from_numpy(waveforms[count]))
                self.assertEqual(int(n), want.shape[-1])
                self.assertTrue(torch.equal(mel[..., :int(n)], want), count)
                self.assertFalse(mel[..., int(n):].any())  # zeros past its length
                lengths.add(int(n))
                count += 1
        loader.close()
        self.assertEqual(count, len(files()))
        self.assertGreater(len(lengths), 1)

    def test_a_torchaudio_sequential_translates(self):
        # Each WAV/FLAC clip (exact decodes) through torchaudio's own
        # Sequential, made for the clip's rate, and through the loader.
        rate = 16000
        def sequential(orig):
            return torch.nn.Sequential(
                torchaudio.transforms.Vol(0.5),
                torchaudio.transforms.Resample(orig, rate),
                torchaudio.transforms.MelSpectrogram(rate, n_fft=512, hop_length=160, n_mels=40),
                torchaudio.transforms.AmplitudeToDB(top_db=80))
        loader = prepflow.Loader(ROOT, transform=sequential(44100), batch_size=1, shuffle=False)
        self.assertIn('name: "torchaudio"',
                      prepflow.transforms.to_pipeline_text(sequential(44100)))
        checked = 0
        for path, record in zip(files(), loader):
            if bound(path) != 0:
                continue
            wave, sr = torchaudio.load(path)
            want = sequential(sr)(wave.mean(0, keepdim=True))
            n = int(record["audio_lengths"][0])
            got = record["audio"][0, ..., :n]
            self.assertEqual(got.shape, want.shape, path)
            loud = want >= want.max() - 50  # within 50 dB of the peak
            self.assertLessEqual(float((got - want).abs()[loud].max()), 1e-3, path)
            checked += 1
        loader.close()
        self.assertGreaterEqual(checked, 4)
        masks = prepflow.transforms.to_stages(torch.nn.Sequential(
            torchaudio.transforms.FrequencyMasking(8), torchaudio.transforms.TimeMasking(10, p=0.5)))
        self.assertEqual([s.text() for s in masks[2:]],
                         ["frequency_masking { freq_mask_param: 8 }",
                          "time_masking { time_mask_param: 10 p: 0.5 }"])
        for bad, why in ((torchaudio.transforms.TimeStretch(), "fixed_rate"),
                         (torchaudio.transforms.Spectrogram(normalized=True), "normalized"),
                         (torchaudio.transforms.MelSpectrogram(center=False), "center")):
            with self.assertRaisesRegex(ValueError, "cannot translate %s.*%s"
                                        % (type(bad).__name__, why)):
                prepflow.Loader(ROOT, transform=torch.nn.Sequential(bad))

    def test_random_segments_are_windows_and_repeat_by_seed(self):
        pipeline = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=8000),
                    ops.RandomSegment(seconds=0.25)]
        a, _, _ = run(pipeline, seed=5)
        b, _, _ = run(pipeline, seed=5)
        c, _, _ = run(pipeline, seed=6)
        self.assertTrue(all(np.array_equal(x, y) for x, y in zip(a, b)))
        self.assertFalse(all(np.array_equal(x, y) for x, y in zip(a, c)))
        self.assertEqual(a[0].shape, (1, 2000))

    def test_a_worker_gives_the_local_checksum(self):
        pipeline = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000),
                    ops.RandomSegment(seconds=0.5)]
        local, _, st_local = run(pipeline, seed=3)
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=2", "cut=3"):
                remote, _, st = run(pipeline, seed=3, offload=offload, workers=[worker.address])
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(SPEECH), offload)
                self.assertTrue(all(np.array_equal(x, y) for x, y in zip(local, remote)))

    def test_variable_lengths_are_padded_with_lengths(self):
        # Waveforms and log-mel features of every clip's own length: each
        # batch is padded with zeros to its longest, and its lengths say
        # where each value ends; unpadded, each is what a batch of one gives.
        for pipeline in (
                [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000)],
                [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000),
                 ops.MelSpectrogram(n_fft=400, n_mels=40),
                 ops.AmplitudeToDb()]):
            alone, _, st_alone = run(pipeline, batch_size=1)
            loader = prepflow.Loader(ROOT, pipeline=pipeline, batch_size=3, shuffle=False)
            seen = padding = 0
            for record in loader:
                self.assertEqual(sorted(record), ["audio", "audio_lengths", "index", "label"])
                audio, lengths = record["audio"], record["audio_lengths"]
                self.assertEqual(lengths.dtype, torch.int64)
                self.assertEqual(audio.shape[-1], int(lengths.max()))
                for row, n, index in zip(audio, lengths.tolist(), record["index"]):
                    expect = torch.from_numpy(alone[index][..., :n])
                    self.assertTrue(torch.equal(row[..., :n], expect), index)
                    self.assertEqual(alone[index].shape[-1], n)
                    self.assertFalse(row[..., n:].any())
                    padding += row[..., n:].numel() * 4
                seen += len(lengths)
            self.assertEqual(seen, len(SPEECH))
            # The checksum is the values' own, whatever they were padded to;
            # the padding is counted.
            self.assertEqual(loader.stats()["checksum"], st_alone["checksum"])
            self.assertEqual(loader.stats()["padding_bytes"], padding)
            self.assertGreater(padding, 0)
            self.assertEqual(st_alone["padding_bytes"], 0)
            loader.close()

    def test_variable_lengths_offload_at_every_cut(self):
        pipeline = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000),
                    ops.MelSpectrogram(n_fft=400, n_mels=40),
                    ops.TimeMasking(time_mask_param=8)]
        local, _, st_local = run(pipeline, seed=4)
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=1", "cut=3", "cut=4"):
                remote, _, st = run(pipeline, seed=4, offload=offload, workers=[worker.address])
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(SPEECH), offload)
                self.assertTrue(all(np.array_equal(x, y) for x, y in zip(local, remote)))

    def test_a_shape_that_cannot_be_padded_is_refused(self):
        with self.assertRaisesRegex(ValueError, "sample rate of each file.*resample"):
            prepflow.Loader(ROOT, pipeline=[ops.DecodeAudio(), ops.Downmix()])
        with self.assertRaisesRegex(ValueError, "more than one dimension.*downmix"):
            prepflow.Loader(ROOT, pipeline=[ops.DecodeAudio(), ops.Resample(rate=8000)])

    def test_limits_fail_the_sample_naming_the_flag(self):
        loader = prepflow.Loader(ROOT, pipeline=[ops.DecodeAudio(), ops.Downmix(),
                                                 ops.FixLength(frames=100)],
                                 batch_size=4, shuffle=False, max_audio_seconds=0.3,
                                 on_error="fail")
        with self.assertRaisesRegex(RuntimeError, "--max-audio-seconds"):
            for _ in loader:
                pass
        loader.close()


def write_manifest(path, lines):
    import json
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


@unittest.skipIf(torchaudio is None or not TOOLS,
                 "needs torchaudio (python3-torchaudio), espeak-ng and sox")
class Datasets(unittest.TestCase):
    PIPELINE = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000),
                ops.MelSpectrogram(n_fft=400, n_mels=40)]

    def test_a_manifest_gives_records_with_transcripts(self):
        # NeMo's layout: paths relative to the manifest, one object a line.
        clips = files()
        lines = [{"audio_filepath": os.path.relpath(p, TMP), "duration": 1.0,
                  "text": SPEECH[n][1] + (" é" if n == 2 else "")}
                 for n, p in enumerate(sorted(clips, key=lambda p: int(pathlib.Path(p).stem)))]
        manifest = os.path.join(TMP, "train.jsonl")
        write_manifest(manifest, lines)
        loader = prepflow.Loader(manifest, pipeline=self.PIPELINE, batch_size=3, shuffle=False)
        texts, order = [], []
        for record in loader:
            self.assertEqual(sorted(record), ["audio", "audio_lengths", "index", "text"])
            self.assertEqual(record["audio"].shape[:3], (len(record["text"]), 1, 40))
            texts.extend(record["text"])
            order.extend(record["index"])
        self.assertEqual(texts, [line["text"] for line in lines])
        self.assertEqual(texts[2], "go now é")
        self.assertEqual(order, list(range(len(lines))))
        checksum = loader.stats()["checksum"]
        loader.close()
        # Shuffled, each record keeps its own transcript.
        shuffled = prepflow.Loader(manifest, pipeline=self.PIPELINE, batch_size=3, seed=2)
        for record in shuffled:
            self.assertEqual(record["text"], [lines[i]["text"] for i in record["index"]])
        shuffled.close()
        # A worker reads the manifest below its data root: the same values.
        with testdata.Worker(BIN, TMP) as worker:
            remote = prepflow.Loader(manifest, pipeline=self.PIPELINE, batch_size=3,
                                     shuffle=False, offload="cut=2", workers=[worker.address])
            for record in remote:
                pass
            st = remote.stats()
            remote.close()
        self.assertEqual(st["checksum"], checksum)
        self.assertEqual(st["remote_images"], len(lines))

    def epoch(self, data, **kw):
        """Each batch's indices and padded length in frames, and the stats."""
        loader = prepflow.Loader(data, pipeline=self.PIPELINE[:3], batch_size=4, seed=5,
                                 max_batch_seconds=4.0, **kw)
        batches = [(record["index"], record["audio"].shape[-1]) for record in loader]
        stats = loader.stats()
        self.assertEqual(len(loader), len(batches))
        loader.close()
        return batches, stats

    def test_batches_by_length_keep_the_budget_and_repeat(self):
        # Lengths from the headers (a class folder gives none): torchaudio's.
        seconds = {}
        for n, path in enumerate(files()):
            info = torchaudio.info(path)
            seconds[n] = info.num_frames / info.sample_rate
        batches, stats = self.epoch(ROOT)
        self.assertEqual(sorted(i for b, _ in batches for i in b), list(range(len(SPEECH))))
        for indices, frames in batches:
            self.assertLessEqual(len(indices), 4)
            longest = max(seconds[i] for i in indices)
            self.assertTrue(len(indices) == 1 or len(indices) * longest <= 4.0 + 1e-6,
                            (indices, longest))
            self.assertLessEqual(frames, 16000 * longest + 16)
        # The same batches at another thread count, and offloaded.
        again, _ = self.epoch(ROOT, threads=1)
        self.assertEqual(again, batches)
        with testdata.Worker(BIN, TMP) as worker:
            remote, st = self.epoch(ROOT, offload="cut=1", workers=[worker.address])
        self.assertEqual(remote, batches)
        self.assertEqual(st["checksum"], stats["checksum"])

    def test_batches_by_length_resume_and_share_among_ranks(self):
        pipeline = self.PIPELINE[:3]
        kw = dict(pipeline=pipeline, batch_size=4, seed=5, max_batch_seconds=4.0)
        full = prepflow.Loader(ROOT, **kw)
        whole = [record["index"] for record in full]
        full.close()
        first = prepflow.Loader(ROOT, **kw)
        it = iter(first)
        next(it)
        state = first.state_dict()
        first.close()
        self.assertIsNone(state["step"])  # epochs differ in batches
        rest = prepflow.Loader(ROOT, **kw)
        rest.load_state_dict(state)
        self.assertEqual([record["index"] for record in rest], whole[1:])
        rest.close()
        ranks = []
        for rank in range(2):
            loader = prepflow.Loader(ROOT, rank=rank, world_size=2, **kw)
            ranks.append([record["index"] for record in loader])
            loader.close()
        self.assertEqual(len(ranks[0]), len(ranks[1]))
        dealt = sorted(map(tuple, ranks[0] + ranks[1]))
        self.assertTrue(set(map(tuple, whole)) <= set(dealt))
        with self.assertRaisesRegex(ValueError, "max_batch_seconds: not with echo"):
            prepflow.Loader(ROOT, echo=2, **kw)

    def test_librispeech_folders_carry_their_transcripts(self):
        root = pathlib.Path(TMP, "LibriSpeech", "train-clean-5")
        expect = {}
        for n, clip in enumerate(files()[:4]):
            speaker, chapter = 100 + n // 2, 7
            folder = root / str(speaker) / str(chapter)
            folder.mkdir(parents=True, exist_ok=True)
            utt = "%d-%d-%04d" % (speaker, chapter, n)
            subprocess.run(["sox", clip, "-r", "16000", "-c", "1", str(folder / (utt + ".flac"))],
                           check=True)
            with open(folder / ("%d-%d.trans.txt" % (speaker, chapter)), "a") as f:
                f.write("%s %s\n" % (utt, SPEECH[n][1].upper()))
            expect[utt] = SPEECH[n][1].upper()
        loader = prepflow.Loader(str(root), pipeline=self.PIPELINE, batch_size=2, shuffle=False)
        self.assertEqual(loader.classes, ["100", "101"])
        texts = [t for record in loader for t in record["text"]]
        checksum = loader.stats()["checksum"]
        loader.close()
        self.assertEqual(texts, [expect[k] for k in sorted(expect)])
        # Packed into WebDataset shards: key.flac, key.txt, key.cls.
        shards = os.path.join(TMP, "librispeech-shards")
        subprocess.run([str(BIN / "prepflow"), "pack", "--data", str(root), "--out", shards],
                       check=True, capture_output=True)
        packed = prepflow.Loader(shards, pipeline=self.PIPELINE, batch_size=2, shuffle=False)
        self.assertEqual([t for record in packed for t in record["text"]], texts)
        self.assertEqual(packed.stats()["checksum"], checksum)
        packed.close()


if __name__ == "__main__":
    unittest.main()
