"""Weighted mixtures of datasets (Loader([(data, weight), ...]), --mix).

Two WebDataset shards of short texts (one of 50 records, one of 20), made
here, mixed 70/30 over epochs of 10,000 records: each epoch holds the
weights (exactly, by construction: each source its share of the epoch) and
any window of it holds them within sampling error; each source goes through
its own epoch order; the mixture is the same at 1 and 2 threads and on a
worker, and a loader resumed from a state_dict taken at 3 random points
gives the rest of the epoch exactly."""
import io
import os
import pathlib
import random
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import numpy as np

import prepflow
import testdata
from prepflow import ops

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
SIZES = (50, 20)
EPOCH = 10000


def setUpModule():
    global TMP, SOURCES, PIPELINE
    TMP = tempfile.mkdtemp(prefix="prepflow-mix-")
    rng = random.Random(3)
    SOURCES = []
    for s, n in enumerate(SIZES):
        path = os.path.join(TMP, "source%d.tar" % s)
        with tarfile.open(path, "w") as tar:
            for k in range(n):
                words = " ".join(rng.choice(["hello", "world", "mix", "ture", "a", "b"])
                                 for _ in range(rng.randint(1, 6)))
                for ext, data in (("txt", words.encode()), ("cls", str(s).encode())):
                    info = tarfile.TarInfo("s%d-%04d.%s" % (s, k, ext))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        SOURCES.append(path)
    merges = os.path.join(TMP, "merges.txt")
    pathlib.Path(merges).write_text("#version: 0.2\nh e\nl l\nw o\n", encoding="utf-8")
    PIPELINE = {"txt": [ops.Tokenize(kind="clip", merges=merges, context_length=8, pad=True,
                                     add_bos=True, add_eos=True)]}


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def mixture(weights=(0.7, 0.3)):
    return [(SOURCES[0], weights[0]), (SOURCES[1], weights[1])]


def run(loader, batches=None):
    """(indices, token rows) of the loader's epoch (or its first `batches`)."""
    indices, rows = [], []
    for n, batch in enumerate(loader):
        indices.extend(int(i) for i in batch["index"])
        rows.extend(np.asarray(batch["txt"]).tolist())
        if batches is not None and n + 1 == batches:
            break  # (taking another batch would count it as delivered)
    return indices, rows


def make(**kw):
    kw.setdefault("batch_size", 100)
    return prepflow.Loader(mixture(), pipeline=PIPELINE, seed=9, epochs=1, as_numpy=True,
                           mix_epoch_samples=EPOCH, **kw)


class Mixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        loader = make(threads=1)
        cls.indices, cls.rows = run(loader)
        cls.stats = loader.stats()
        loader.close()

    def test_the_weights_hold(self):
        self.assertEqual(len(self.indices), EPOCH)
        first = [i < SIZES[0] for i in self.indices]
        self.assertEqual(sum(first), 7000)  # each source its share of the epoch
        self.assertEqual(self.stats["mix_samples"], [7000, 3000])
        # Drawn, not in blocks: every window of 1,000 within 4 sigma of 700.
        sigma = (1000 * 0.7 * 0.3) ** 0.5
        for w in range(0, EPOCH, 1000):
            self.assertLess(abs(sum(first[w:w + 1000]) - 700), 4 * sigma, w)

    def test_each_source_goes_through_its_own_order(self):
        # Source 1's 3,000 samples are 150 of its own epochs of 20: each one
        # a permutation of its samples.
        second = [i - SIZES[0] for i in self.indices if i >= SIZES[0]]
        for e in range(0, len(second), SIZES[1]):
            self.assertEqual(sorted(second[e:e + SIZES[1]]), list(range(SIZES[1])), e)
        first = [i for i in self.indices if i < SIZES[0]]
        for e in range(0, len(first), SIZES[0]):
            self.assertEqual(sorted(first[e:e + SIZES[0]]), list(range(SIZES[0])), e)

    def test_the_same_at_any_thread_count_and_on_a_worker(self):
        loader = make(threads=2)
        self.assertEqual(run(loader), (self.indices, self.rows))
        self.assertEqual(loader.stats()["checksum"], self.stats["checksum"])
        loader.close()
        with testdata.Worker(BIN, TMP) as worker:
            loader = make(threads=1, offload="remote", workers=[worker.address])
            self.assertEqual(run(loader), (self.indices, self.rows))
            st = loader.stats()
            self.assertEqual(st["checksum"], self.stats["checksum"])
            self.assertEqual(st["remote_images"], EPOCH)
            loader.close()

    def test_resumes_exactly_from_a_state_dict(self):
        rng = random.Random(11)
        for stop in sorted(rng.sample(range(1, EPOCH // 100 - 1), 3)):
            first = make(threads=1)
            head, _ = run(first, batches=stop)
            state = first.state_dict()
            first.close()
            resumed = make(threads=1)
            resumed.load_state_dict(state)
            tail, rows = run(resumed)
            resumed.close()
            self.assertEqual(head + tail, self.indices, stop)
            self.assertEqual(rows, self.rows[len(head):], stop)

    def test_stop_at_the_first_end(self):
        loader = prepflow.Loader(mixture((0.5, 0.5)), pipeline=PIPELINE, seed=9, epochs=2,
                                 as_numpy=True, batch_size=8, mix_stop_at_first_end=True)
        epochs = [run(loader)[0], run(loader)[0]]
        loader.close()
        for indices in epochs:
            # 20 of each: the second source once (its own epoch), then the end.
            self.assertEqual(sorted(i - SIZES[0] for i in indices if i >= SIZES[0]),
                             list(range(SIZES[1])))
            self.assertEqual(len(indices), 40)
            self.assertEqual(len(set(indices)), 40)
        self.assertNotEqual(epochs[0], epochs[1])

    def test_bad_mixtures_are_refused(self):
        with self.assertRaisesRegex(ValueError, "must be a number > 0"):
            prepflow.Loader([(SOURCES[0], 0), (SOURCES[1], 1)], pipeline=PIPELINE)
        with self.assertRaisesRegex(Exception, "--mix: source 1 .*missing"):
            prepflow.Loader([(SOURCES[0], 1), (os.path.join(TMP, "missing.tar"), 1)],
                            pipeline=PIPELINE)
        with self.assertRaisesRegex(Exception, "mixture .* is not echoed yet"):
            prepflow.Loader(mixture(), pipeline=PIPELINE, echo=2)
        for bad in ("%s:0.7,%s" % tuple(SOURCES), "%s:nan" % SOURCES[0], "%s:-1" % SOURCES[0],
                    "%s:1," % SOURCES[0], ":1", "%s:1e999" % SOURCES[0]):
            cli = subprocess.run([BIN / "prepflow", "run", "--mix", bad], capture_output=True,
                                 text=True)
            self.assertNotEqual(cli.returncode, 0, bad)
            self.assertIn("expected PATH:WEIGHT", cli.stderr, bad)


if __name__ == "__main__":
    unittest.main()
