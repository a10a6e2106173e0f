"""Records of several fields from Python: WebDataset shards whose samples
hold an image (key.jpg), speech (key.wav, spoken here by espeak-ng), a JSON
member and a class, each field with its own stages, batched as a dict.

The image field gives what an image pipeline alone gives, the speech field
what torchaudio gives, the JSON member its bytes; offloaded at any cut the
checksum is the local one."""
import io
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import numpy as np

import prepflow
import testdata
from prepflow import ops

try:
    import torch
    import torchaudio
    import torchvision.transforms as T
except ImportError:
    torchaudio = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
ESPEAK = shutil.which("espeak-ng")
WORDS = ["go", "stop here", "yes indeed", "left", "right now", "no", "up again", "down"]


def setUpModule():
    global TMP, SHARD, GAPPY, JPEGS, WAVS
    TMP = tempfile.mkdtemp(prefix="prepflow-records-")
    if not ESPEAK:
        return
    images = sorted(pathlib.Path(testdata.demo_dataset(BIN, os.path.join(TMP, "demo")))
                    .glob("*/*.jpg"))[:len(WORDS)]
    JPEGS = [p.read_bytes() for p in images]
    WAVS = []
    for n, words in enumerate(WORDS):
        wav = pathlib.Path(TMP, "%d.wav" % n)
        subprocess.run(["espeak-ng", "-s", str(140 + 10 * n), "-w", str(wav), words], check=True,
                       capture_output=True)
        WAVS.append(wav.read_bytes())
    SHARD = os.path.join(TMP, "records.tar")
    write_shard(SHARD, range(len(WORDS)))
    GAPPY = os.path.join(TMP, "gappy.tar")
    write_shard(GAPPY, range(len(WORDS)), without_wav={2})


def write_shard(path, keys, without_wav=()):
    with tarfile.open(path, "w") as tar:
        for n in keys:
            members = [("jpg", JPEGS[n])]
            if n not in without_wav:
                members.append(("wav", WAVS[n]))
            members += [("json", json.dumps({"words": WORDS[n]}).encode()),
                        ("cls", str(n % 2).encode())]
            for ext, data in members:
                info = tarfile.TarInfo("%06d.%s" % (n, ext))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


IMAGE = [ops.Decode(), ops.RandomResizedCrop(size=32), ops.RandomHorizontalFlip(),
         ops.Normalize()]
SPEECH = [ops.DecodeAudio(), ops.Downmix(), ops.Resample(rate=16000)]
RECORD = {"jpg": IMAGE, "wav": SPEECH, "json": None}


def records(data, pipeline, **kw):
    """Every record (a dict per sample, unpadded) in dataset order, and the
    loader's stats."""
    loader = prepflow.Loader(data, pipeline=pipeline, batch_size=3, shuffle=False, seed=5,
                             as_numpy=True, **kw)
    out = []
    for batch in loader:
        for i, index in enumerate(batch["index"]):
            one = {"index": index, "label": int(batch["label"][i]),
                   "jpg": batch["jpg"][i], "json": batch["json"][i]}
            if "wav" in batch:
                one["wav"] = batch["wav"][i][..., :int(batch["wav_lengths"][i])]
            out.append(one)
    stats = loader.stats()
    loader.close()
    return out, stats


@unittest.skipIf(torchaudio is None or not ESPEAK, "needs torchaudio and espeak-ng")
class Records(unittest.TestCase):
    def test_a_batch_is_a_dict_of_every_field(self):
        loader = prepflow.Loader(SHARD, pipeline=RECORD, batch_size=3, shuffle=False, seed=5)
        batch = next(iter(loader))
        self.assertEqual(sorted(batch), ["index", "jpg", "json", "label", "wav", "wav_lengths"])
        self.assertEqual(tuple(batch["jpg"].shape), (3, 3, 32, 32))
        self.assertEqual(batch["jpg"].dtype, torch.float32)
        self.assertEqual(batch["wav"].shape[:2], (3, 1))
        self.assertEqual(batch["wav"].shape[2], int(batch["wav_lengths"].max()))
        self.assertEqual([json.loads(j) for j in batch["json"]],
                         [{"words": w} for w in WORDS[:3]])
        self.assertEqual(batch["label"].tolist(), [0, 1, 0])
        loader.close()

    def test_each_field_is_what_its_pipeline_gives_alone(self):
        got, stats = records(SHARD, RECORD)
        self.assertEqual(len(got), len(WORDS))
        # The image stages come first: the same draws as an image pipeline
        # alone on the shard's media.
        alone = prepflow.Loader(SHARD, pipeline=IMAGE, batch_size=3, shuffle=False, seed=5,
                                as_numpy=True)
        images = [x for images, _ in alone for x in images]
        alone.close()
        for record, image in zip(got, images):
            self.assertTrue(np.array_equal(record["jpg"], image), record["index"])
        # The speech is torchaudio's: load (exact for PCM WAV), then its
        # resampling kernel (within 5e-7, docs/ops.md).
        for record in got:
            wave, rate = torchaudio.load(io.BytesIO(WAVS[record["index"]]), format="wav")
            expect = torchaudio.transforms.Resample(rate, 16000)(wave).numpy()
            self.assertEqual(record["wav"].shape, expect.shape)
            self.assertLess(np.abs(record["wav"] - expect).max(), 1e-6)
        self.assertEqual(stats["images"], len(WORDS))

    def test_records_offload_at_every_cut(self):
        # A carried member is bounded by --max-file-bytes and decoded audio
        # by --max-audio-seconds: at their defaults a record after
        # decode_audio may be over what one item holds (below).
        limits = dict(max_file_bytes=1 << 20, max_audio_seconds=60)
        local, st_local = records(SHARD, RECORD, **limits)
        stages = len(IMAGE) + len(SPEECH)
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ["remote"] + ["cut=%d" % k for k in range(1, stages)]:
                remote, st = records(SHARD, RECORD, offload=offload, workers=[worker.address],
                                     **limits)
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(WORDS), offload)
                for a, b in zip(local, remote):
                    self.assertTrue(np.array_equal(a["jpg"], b["jpg"]), offload)
                    self.assertTrue(np.array_equal(a["wav"], b["wav"]), offload)
                    self.assertEqual(a["json"], b["json"])

    def test_a_cut_over_what_an_item_holds_runs_here(self):
        # After decode_audio at the default limits, one record may be 1.2 GB
        # (audio of 600 s at 192 kHz, two channels, and a 256 MiB member):
        # more than a worker's item holds. Those samples run here, the
        # worker stays, and the values are the same.
        local, st_local = records(SHARD, RECORD)
        with testdata.Worker(BIN, TMP) as worker:
            remote, st = records(SHARD, RECORD, offload="cut=5", workers=[worker.address])
            self.assertEqual(st["remote_images"], 0)
            self.assertEqual(st["checksum"], st_local["checksum"])
            self.assertEqual(st["workers_alive"], 1)

    def test_records_materialize_raw_and_resume_from_there(self):
        # The deterministic prefix (speech decoded and resampled; the image
        # still encoded: its decode is planned by the crop's draws) stored
        # raw, each record's fields in one member; a loader on it runs the
        # rest and gives the source's checksum.
        pipeline = {"wav": SPEECH, "jpg": IMAGE, "json": None}
        text = prepflow.ops.pipeline_text(
            [s.on("wav") for s in SPEECH] + [s.on("jpg") for s in IMAGE], carry=["json"])
        out = os.path.join(TMP, "materialized")
        subprocess.run([BIN / "prepflow", "materialize", "--data", SHARD, "--pipeline", text,
                        "--upto", "3", "--out", out, "--overwrite"], check=True,
                       capture_output=True)
        source, st_source = records(SHARD, pipeline)
        stored, st_stored = records(out, pipeline)
        self.assertEqual(st_stored["checksum"], st_source["checksum"])
        self.assertEqual([r["json"] for r in stored], [r["json"] for r in source])
        bad = subprocess.run([BIN / "prepflow", "materialize", "--data", SHARD, "--pipeline",
                              text, "--upto", "3", "--encoding", "png", "--out", out + "-png"],
                             capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("use --encoding raw", bad.stderr)

    def test_a_record_without_a_field_fails_its_sample(self):
        got, stats = records(GAPPY, RECORD, on_error="skip")
        self.assertEqual([r["index"] for r in got], [0, 1, 3, 4, 5, 6, 7])
        # (Counted as samples fail: the next epoch's first batches, read
        # ahead, may have failed it again.)
        self.assertGreaterEqual(stats["errors"], 1)
        self.assertIn("has no member 'wav'", stats["first_errors"][0]["error"])
        with self.assertRaisesRegex(Exception, "has no member 'wav'"):
            records(GAPPY, RECORD, on_error="fail")
        # Batched by length: the record without audio counts as 0 s when the
        # lengths are read, then fails as it does padded.
        by_length, _ = records(GAPPY, RECORD, on_error="skip", max_batch_seconds=2.0)
        self.assertEqual(sorted(r["index"] for r in by_length), [0, 1, 3, 4, 5, 6, 7])

    def test_transforms_translate_per_field(self):
        transform = {
            "jpg": T.Compose([T.RandomResizedCrop(32), T.ToTensor(),
                              T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
            "wav": torch.nn.Sequential(torchaudio.transforms.Resample(22050, 16000),
                                       torchaudio.transforms.MelSpectrogram(16000, n_mels=40)),
            "json": None,
        }
        loader = prepflow.Loader(SHARD, transform=transform, batch_size=4, shuffle=False)
        batch = next(iter(loader))
        self.assertEqual(tuple(batch["jpg"].shape), (4, 3, 32, 32))
        self.assertEqual(tuple(batch["wav"].shape[:3]), (4, 1, 40))
        self.assertEqual(batch["wav"].shape[3], int(batch["wav_lengths"].max()))
        self.assertEqual(len(batch["json"]), 4)
        loader.close()

    def test_records_batch_by_the_length_of_their_audio(self):
        # Each batch's samples x its longest clip stays within the budget (a
        # longer clip alone), every record comes once, and each field is what
        # padded batches of three give.
        padded, _ = records(SHARD, RECORD)
        budget = 2.0  # clips of 0.5-1.2 s: two at most, where batch_size allows three
        loader = prepflow.Loader(SHARD, pipeline=RECORD, batch_size=3, shuffle=True, seed=5,
                                 as_numpy=True, max_batch_seconds=budget)
        seen, batches = [], 0
        for batch in loader:
            n = len(batch["index"])
            longest = int(batch["wav_lengths"].max()) / 16000
            self.assertTrue(n == 1 or n * longest <= budget + 1e-3, (n, longest))
            for i, index in enumerate(batch["index"]):
                want = padded[index]
                self.assertTrue(np.array_equal(batch["jpg"][i], want["jpg"]), index)
                wav = batch["wav"][i][..., :int(batch["wav_lengths"][i])]
                self.assertTrue(np.array_equal(wav, want["wav"]), index)
                self.assertEqual(batch["json"][i], want["json"])
            seen.extend(batch["index"])
            batches += 1
        loader.close()
        self.assertEqual(sorted(seen), list(range(len(WORDS))))
        self.assertGreaterEqual(batches, len(WORDS) // 2)

    def test_fields_need_webdataset_shards(self):
        with self.assertRaisesRegex(Exception, "WebDataset"):
            prepflow.Loader(os.path.join(TMP, "demo"), pipeline=RECORD, batch_size=2)
        with self.assertRaisesRegex(Exception, "no field of pipeline .* decodes audio"):
            prepflow.Loader(SHARD, pipeline={"jpg": IMAGE, "json": None}, batch_size=2,
                            max_batch_seconds=10)
        with self.assertRaisesRegex(ValueError, "not a field name"):
            ops.Decode(field="a/b")


if __name__ == "__main__":
    unittest.main()
