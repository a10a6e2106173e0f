"""The `prepflow` Python package against the C++ command line and real workers.

Run by ctest with Debian's /usr/bin/python3, PYTHONPATH=build/python and
PREPFLOW_BUILD_DIR=build. Tests that need torch skip cleanly without it.
"""
import gc
import inspect
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import prepflow
import testdata

try:
    import torch
except ImportError:
    torch = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
SOURCE = pathlib.Path(__file__).resolve().parents[2]
BIN = BUILD / "bin"
needs_torch = unittest.skipIf(torch is None, "torch is not installed (Debian: python3-torch)")


def setUpModule():
    global TMP, DATA
    TMP = tempfile.mkdtemp(prefix="prepflow-py-")
    DATA = testdata.demo_dataset(BIN, os.path.join(TMP, "data"))


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def cli_checksum(*args):
    out = subprocess.run([BIN / "prepflow", "run", "--data", DATA, "--json", *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["checksum"]


def loader(**kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("seed", 7)
    kw.setdefault("threads", 2)
    if "transform" not in kw:
        kw.setdefault("pipeline", "imagenet-train")
    return prepflow.Loader(DATA, **kw)


class Delivery(unittest.TestCase):
    @needs_torch
    def test_torch_shapes_and_dtypes(self):
        sizes = []
        for images, labels in loader():
            self.assertIsInstance(images, torch.Tensor)
            self.assertEqual(images.dtype, torch.float32)
            self.assertEqual(tuple(images.shape[1:]), (3, 224, 224))
            self.assertEqual(labels.dtype, torch.int64)
            self.assertEqual(labels.shape[0], images.shape[0])
            self.assertTrue(images.is_contiguous())
            sizes.append(images.shape[0])
        self.assertEqual(sizes, [8, 8, 8, 8, 8])

    def test_numpy_and_uint8_pipelines(self):
        pipeline = os.path.join(TMP, "crop.pbtxt")
        with open(pipeline, "w") as f:
            f.write('name: "crop"\nstages { decode {} }\nstages { random_resized_crop { size: 64 } }\n')
        batches = list(loader(pipeline=pipeline, as_numpy=True, batch_size=16).batches())
        self.assertEqual([b.images.shape for b in batches],
                         [(16, 64, 64, 3), (16, 64, 64, 3), (8, 64, 64, 3)])
        self.assertEqual(batches[0].images.dtype, np.uint8)
        self.assertEqual(batches[0].labels.dtype, np.int64)
        self.assertEqual(sorted(i for b in batches for i in b.indices), list(range(40)))

    @needs_torch
    def test_torch_and_numpy_see_the_same_bytes(self):
        t = next(iter(loader()))
        n = next(iter(loader(as_numpy=True)))
        self.assertTrue(np.array_equal(t[0].numpy(), n[0]))
        self.assertTrue(np.array_equal(t[1].numpy(), n[1]))

    @needs_torch
    def test_tensors_outlive_the_loader_without_copies(self):
        l = loader()
        images, labels = next(iter(l))
        kept = images.clone()
        del l
        gc.collect()
        self.assertTrue(torch.equal(images, kept))  # still the loader's memory, intact

    def test_checksum_equals_the_cli(self):
        l = loader()
        for _ in range(2):  # two passes: epochs 0 and 1
            for _ in l:
                pass
        self.assertEqual(l.stats()["images"], 80)
        self.assertEqual(l.stats()["checksum"],
                         cli_checksum("--batch", "8", "--seed", "7", "--epochs", "2"))

    def test_echo_yields_every_copy_once_and_len_counts_them(self):
        l = loader(echo=2, echo_window=8, epochs=1)
        seen = set()
        for b in l.batches():
            self.assertEqual(len(b.copies), len(b.indices))
            for i, c in zip(b.indices, b.copies):
                self.assertNotIn((int(i), int(c)), seen)
                seen.add((int(i), int(c)))
        self.assertEqual(len(seen), 80)  # 40 samples, 2 copies each
        self.assertEqual({c for _, c in seen}, {0, 1})
        stats = l.stats()
        self.assertEqual((stats["fresh_samples"], stats["echoed_samples"]), (40, 40))
        self.assertEqual(stats["checksum"],
                         cli_checksum("--batch", "8", "--seed", "7", "--echo", "2",
                                      "--echo-window", "8"))
        with self.assertRaises(ValueError):
            loader(echo=0)

    @needs_torch
    def test_classes_and_class_to_idx_are_image_folders(self):
        from torchvision.datasets import ImageFolder
        folder = ImageFolder(DATA)
        l = loader()
        self.assertEqual(l.classes, folder.classes)
        self.assertEqual(l.class_to_idx, folder.class_to_idx)

    def test_auto_echo_picks_each_epochs_factor_and_state_dict_keeps_it(self):
        # A pipeline whose stages before the echo boundary (decode, resize)
        # cost many times those after it, and a demand out of reach: after
        # the first epoch (fresh, measuring) the planner asks for the most
        # copies allowed. Each epoch delivers every (sample, copy) once.
        spec = ("stages { decode {} } stages { resize { shorter_side: 48 } } "
                "stages { random_crop { size: 32 } } stages { normalize {} }")
        l = loader(pipeline=spec, echo="auto", max_echo=2, demand=1e9, epochs=3,
                   echo_window=8)
        for epoch in range(3):
            seen = set()
            for b in l.batches():
                for i, c in zip(b.indices, b.copies):
                    self.assertNotIn((int(i), int(c)), seen)
                    seen.add((int(i), int(c)))
            self.assertEqual(len(seen), 40 * (1 if epoch == 0 else 2), epoch)
            if epoch == 0:
                self.assertEqual(len(l), 10)  # the next epoch's: 80 samples
        self.assertEqual(l.stats()["echo_factor_per_epoch"], [1, 2, 2])
        # Resuming mid-epoch runs that epoch's factor again.
        again = loader(pipeline=spec, echo="auto", max_echo=2, demand=1e9, epochs=3,
                       echo_window=8)
        again.load_state_dict({"epoch": 1, "batch": 3, "echo": 2})
        rest = sum(len(b.indices) for b in again.batches())
        self.assertEqual(rest, 80 - 3 * 8)
        with self.assertRaises(ValueError):
            loader(echo="often")

    def test_stats_have_the_same_keys_as_the_table_and_the_cli(self):
        # One field table (client/loader_stats.h) renders the Python dict and
        # the CLI's JSON: a key in one and not the other fails here.
        l = loader()
        for _ in l:
            pass
        stats = l.stats()
        resume = {"epoch", "batch"}  # the Python loader's own position
        self.assertEqual(set(stats) - resume, set(prepflow._prepflow.stat_keys()))
        out = subprocess.run([BIN / "prepflow", "run", "--data", DATA, "--json", "--batch", "8"],
                             capture_output=True, text=True, check=True)
        cli = json.loads(out.stdout.strip().splitlines()[-1])
        context = {"command", "epochs", "batch", "threads", "pipeline", "dataset", "format",
                   "samples_per_epoch", "job_id", "rank", "world_size"}
        self.assertEqual(set(cli) - context, set(stats) - resume)
        self.assertEqual(set(stats["stages"][0]), set(cli["stages"][0]))
        self.assertEqual(stats["checksum_value"], int(stats["checksum"], 16))

    def test_set_epoch_gives_that_epochs_batches(self):
        whole = loader(epochs=2)
        first = [b.indices for b in whole.batches()]
        second = [b.indices for b in whole.batches()]
        self.assertNotEqual(first, second)  # shuffled per epoch
        jump = loader(epochs=2)
        jump.set_epoch(1)
        self.assertEqual([b.indices for b in jump.batches()], second)
        self.assertEqual([b.indices for b in jump.batches()], [])  # epochs=2: nothing after
        with self.assertRaisesRegex(ValueError, "epoch: must be below epochs"):
            jump.set_epoch(2)


class Resume(unittest.TestCase):
    def test_mid_epoch_resume_delivers_exactly_the_rest(self):
        whole = loader(epochs=2)
        full = [i for _ in range(2) for b in whole.batches() for i in b.indices]

        first = loader(epochs=2)
        seen = []
        for n, b in enumerate(first.batches()):
            seen.extend(b.indices)
            if n == 1:
                break  # stop after 2 batches of epoch 0
        state = first.state_dict()
        self.assertEqual((state["epoch"], state["batch"]), (0, 2))
        part = first.stats()["checksum"]
        del first

        resumed = loader(epochs=2)
        resumed.load_state_dict(state)
        rest = [i for _ in range(2) for b in resumed.batches() for i in b.indices]
        self.assertEqual(seen + rest, full)
        total = (int(part, 16) + int(resumed.stats()["checksum"], 16)) % (1 << 64)
        self.assertEqual(f"{total:016x}", whole.stats()["checksum"])

        with self.assertRaisesRegex(ValueError, "saved with batch_size=8"):
            loader(batch_size=4).load_state_dict(state)
        for bad in (-1, "3", 2.5):
            with self.assertRaisesRegex((ValueError, TypeError), "state_dict sample"):
                loader().load_state_dict(dict(state, sample=bad))
        # Where the saved batch ended: exactly the rest, as without it.
        again = loader(epochs=2)
        again.load_state_dict(dict(state, sample=16))
        self.assertEqual([i for _ in range(2) for b in again.batches() for i in b.indices], rest)


class Api(unittest.TestCase):
    # Every option is a row of one table (client/loader_options.h): the
    # keyword, its default and its help come from it.
    def test_every_option_is_a_keyword_with_the_tables_default_and_help(self):
        params = inspect.signature(prepflow.Loader.__init__).parameters
        self.assertEqual(params["options"].kind, inspect.Parameter.VAR_KEYWORD)
        defaults = prepflow._prepflow.loader_option_defaults()
        help_text = subprocess.run([BIN / "prepflow", "run", "--help"], capture_output=True,
                                   text=True, check=True).stdout
        rows = prepflow._prepflow.loader_option_rows()
        self.assertGreater(len(rows), 55)
        for key, flag, _kind, _help, is_keyword in rows:
            with self.subTest(key=key):
                self.assertIn(f"  --{flag} ", help_text)
                if not is_keyword:
                    continue
                if key in params:  # else taken through **options
                    self.assertEqual(params[key].default, defaults[key])
                self.assertIn(f"\n    {key} (", prepflow.Loader.__doc__)

    def test_a_row_without_a_named_keyword_is_taken_through_options(self):
        self.assertNotIn("replan_gain", inspect.signature(prepflow.Loader.__init__).parameters)
        l = loader(offload="auto", replan_gain=0.5, epochs=1)
        for _ in l:
            pass
        with self.assertRaisesRegex(ValueError, "replan_gain: must be >= 0, got -1"):
            loader(replan_gain=-1)

    def test_metrics_port_and_max_file_bytes(self):
        import urllib.request
        l = loader(metrics_port=0, epochs=1)
        for _ in l:
            pass
        self.assertGreater(l.metrics_port, 0)
        text = urllib.request.urlopen(f"http://127.0.0.1:{l.metrics_port}/metrics",
                                      timeout=30).read().decode()
        self.assertIn("prepflow_client_samples_total", text)
        self.assertIsNone(loader().metrics_port)
        # Every demo JPEG is over 100 bytes: each is refused, naming the limit.
        small = loader(max_file_bytes=100, epochs=1)
        for _ in small:
            pass
        st = small.stats()
        self.assertEqual(st["errors"], 40)
        self.assertIn("100", st["first_errors"][0]["error"])


class Logging(unittest.TestCase):
    def test_core_lines_go_to_the_prepflow_logger(self):
        # auto with no workers: the core says it runs locally, at info.
        with self.assertLogs("prepflow", level="INFO") as logs:
            l = loader(offload="auto", epochs=1)
            for _ in l:
                pass
        self.assertTrue(any("no workers given" in line for line in logs.output), logs.output)
        # Silenced like any library's logger: nothing reaches stderr either.
        script = ("import logging, prepflow\n"
                  "logging.getLogger('prepflow').setLevel(logging.ERROR)\n"
                  f"l = prepflow.Loader({str(DATA)!r}, 'imagenet-train', offload='auto', batch_size=8)\n"
                  "for _ in l: pass\n")
        env = dict(os.environ)
        env.pop("PREPFLOW_LOG_LEVEL", None)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=env, check=True)
        self.assertNotIn("no workers given", out.stderr)
        # Unconfigured, Python's last resort shows warnings only: still quiet.
        script = script.replace("logging.getLogger('prepflow').setLevel(logging.ERROR)\n", "")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=env, check=True)
        self.assertNotIn("no workers given", out.stderr)


class Errors(unittest.TestCase):
    def test_bad_arguments_raise_with_the_message(self):
        with self.assertRaisesRegex(ValueError, "batch_size: must be 1 to 1048576, got 0"):
            loader(batch_size=0)
        with self.assertRaisesRegex(TypeError, "batch_size: expected an int"):
            loader(batch_size="8")
        with self.assertRaisesRegex(FileNotFoundError, "nowhere"):
            prepflow.Loader(os.path.join(TMP, "nowhere"), "imagenet-train")
        with self.assertRaisesRegex(ValueError, "pipeline"):
            loader(pipeline="no-such-preset")
        with self.assertRaisesRegex(ValueError, "^offload: 'sideways'"):
            loader(offload="sideways")
        with self.assertRaisesRegex(ValueError, "needs workers"):
            loader(offload="remote")
        with self.assertRaisesRegex(ValueError, "device: 'tpu'"):
            loader(device="tpu")
        with self.assertRaisesRegex(ValueError, "on_error"):
            loader(on_error="maybe")
        with self.assertRaisesRegex(ValueError, "^auth_token_file .*nowhere"):
            loader(auth_token_file=os.path.join(TMP, "nowhere"))
        # Out of the core's range or of the wrong type: named, never "Unable
        # to cast", a MemoryError or an abort.
        for kw, error, pattern in (
                ({"batch_size": 10**12}, ValueError, "batch_size: must be 1 to 1048576"),
                ({"seed": 2**64}, ValueError, r"seed: must be 0 to 2\*\*64-1"),
                ({"job": 5}, TypeError, "job: expected a str"),
                ({"workers": [None]}, TypeError, "workers: expected a list"),
                ({"metrics_port": 70000}, ValueError, "metrics_port: must be at most 65535"),
                ({"prefetch": 10**9}, ValueError, "prefetch: must be 1 to 256"),
                ({"threads": 4096}, ValueError, "threads: must be 0 to 1024"),
                ({"auth_token_file": "/dev/zero"}, ValueError, "/dev/zero: over 1048576 bytes"),
                ({"echo_window": 2**63}, ValueError, "echo_window: 9223372036854775808 is out "
                                                     "of range"),
                ({"max_jpeg_scans": 2**40}, ValueError, "max_jpeg_scans: must be at least 1, "
                                                        "got 1099511627776"),
                ({"weight": "heavy"}, TypeError, "weight: expected a number, got str"),
                ({"cache_at": 1.5}, TypeError, 'cache_at: expected an int or "auto"'),
                ({"replan_seconds": 0}, ValueError, "replan_seconds: must be positive"),
                ({"batchsize": 8}, TypeError, "unexpected keyword argument 'batchsize'; "
                                              "did you mean 'batch_size'")):
            with self.assertRaisesRegex(error, pattern, msg=str(kw)):
                loader(**kw)
        # Scheduler labels: the CLI's k=v syntax as well as a dict.
        loader(labels="zone=a, rack=r1")
        loader(labels={"zone": 1})
        with self.assertRaisesRegex(ValueError, "labels: 'zone' is not key=value"):
            loader(labels="zone")

    def test_a_bad_file_fails_with_its_path_under_on_error_fail(self):
        data = os.path.join(TMP, "broken")
        shutil.copytree(DATA, data)
        victim = sorted(pathlib.Path(data).rglob("*.jpg"))[3]
        victim.write_bytes(b"\xff\xd8 not a jpeg")
        skipped = prepflow.Loader(data, "imagenet-train", batch_size=8, threads=2, as_numpy=True)
        for _ in skipped:
            pass
        self.assertEqual(skipped.stats()["images"], 39)
        self.assertEqual(skipped.stats()["errors"], 1)
        failing = prepflow.Loader(data, "imagenet-train", batch_size=8, threads=2,
                                  on_error="fail", as_numpy=True)
        with self.assertRaisesRegex(RuntimeError, victim.name):
            for _ in failing:
                pass

    def test_failed_samples_are_replaced_from_later_batches_and_resume_exactly(self):
        data = os.path.join(TMP, "broken-batch")
        shutil.copytree(DATA, data)
        # Samples 8 to 15 (all of batch 1) and 20: ImageFolder's order is the sorted paths.
        files = sorted(p for p in pathlib.Path(data).rglob("*") if p.is_file())
        for victim in files[8:16] + [files[20]]:
            victim.write_bytes(b"\xff\xd8 not an image")
        kw = dict(batch_size=8, threads=2, shuffle=False, as_numpy=True)
        loader = prepflow.Loader(data, "imagenet-train", **kw)
        batches = [(b.number, list(b.indices)) for b in loader.batches()]
        good = [i for i in range(40) if not 8 <= i < 16 and i != 20]
        # Batch 1 takes batch 2 whole (not handed out) and batch 3's first;
        # every batch but the last is full.
        self.assertEqual([n for n, _ in batches], [0, 1, 3, 4])
        self.assertEqual([i for _, ix in batches for i in ix], good)
        self.assertEqual([len(ix) for _, ix in batches], [8, 8, 8, 7])
        self.assertEqual(loader.stats()["errors"], 9)
        self.assertEqual(loader.stats()["filled_samples"], 9)
        # Stopped after batch 1: the rest, and nothing twice.
        first = prepflow.Loader(data, "imagenet-train", **kw)
        it = iter(first.batches())
        next(it), next(it)
        state = first.state_dict()
        self.assertEqual((state["batch"], state["sample"]), (2, 25))
        resumed = prepflow.Loader(data, "imagenet-train", **kw)
        resumed.load_state_dict(state)
        self.assertEqual([i for b in resumed.batches() for i in list(b.indices)], good[16:])

    def test_a_batch_whose_samples_all_fail_is_not_handed_out(self):
        data = os.path.join(TMP, "broken-last")
        shutil.copytree(DATA, data)
        # Samples 32 to 39 (all of the last batch): nothing comes after them.
        for victim in sorted(p for p in pathlib.Path(data).rglob("*") if p.is_file())[32:]:
            victim.write_bytes(b"\xff\xd8 not an image")
        loader = prepflow.Loader(data, "imagenet-train", batch_size=8, threads=2, shuffle=False,
                                 as_numpy=True)
        numbers = [b.number for b in loader.batches()]
        self.assertEqual(numbers, [0, 1, 2, 3])
        self.assertEqual(loader.stats()["errors"], 8)

    def test_a_name_that_is_not_utf8_is_reported_not_raised(self):
        data = os.path.join(TMP, "latin1")
        shutil.copytree(DATA, data)
        folder = sorted(p for p in pathlib.Path(data).iterdir() if p.is_dir())[0]
        name = os.fsencode(folder) + b"/caf\xe9.jpg"
        with open(name, "wb") as f:
            f.write(b"\xff\xd8 not a jpeg")
        skipped = prepflow.Loader(data, "imagenet-train", batch_size=8, threads=2, as_numpy=True)
        for _ in skipped:
            pass
        stats = skipped.stats()
        self.assertEqual(stats["errors"], 1)
        error = stats["first_errors"][0]
        self.assertEqual(os.fsencode(error["path"]), name)  # as os.listdir names it
        failing = prepflow.Loader(data, "imagenet-train", batch_size=8, threads=2,
                                  on_error="fail", as_numpy=True)
        with self.assertRaisesRegex(RuntimeError, r"caf\\xe9\.jpg"):
            for _ in failing:
                pass

    def test_a_root_that_is_not_utf8_is_read_by_str_or_bytes(self):
        # os.fsdecode's str (with surrogates) raised "Unable to cast", and
        # bytes a TypeError: a Linux path is any bytes.
        root = os.fsencode(TMP) + b"/data-\xff"
        shutil.copytree(DATA, os.fsdecode(root))
        want = cli_checksum("--seed", "7")
        for data in (root, os.fsdecode(root), pathlib.Path(os.fsdecode(root))):
            got = prepflow.Loader(data, "imagenet-train", batch_size=8, seed=7, threads=2, as_numpy=True)
            for _ in got:
                pass
            self.assertEqual(got.stats()["checksum"], want, repr(data))

    @needs_torch
    def test_cuda_without_a_device_falls_back_to_cpu(self):
        if torch.cuda.is_available():
            self.skipTest("a CUDA device is present")
        with self.assertLogs("prepflow", "WARNING") as logs:
            l = loader(device="cuda:0")
        self.assertIn("no CUDA device", logs.output[0])
        images, _ = next(iter(l))
        self.assertEqual(images.device.type, "cpu")


class Gpu(unittest.TestCase):
    def test_the_gpu_path_validates_normalize_with_or_without_a_device(self):
        # The normalize taken off for the GPU is checked as the CPU's would be,
        # before the device is looked at: a wrong count is not padded.
        bad = ("stages { decode {} } stages { center_crop { size: 8 } } "
               "stages { normalize { mean: [0.5, 0.5] std: [1, 1, 1] } }")
        with self.assertRaisesRegex(ValueError, r"stage 2 \(normalize\): mean: needs 3 values"):
            prepflow._prepflow.Loader({"data": DATA, "gpu_normalize": True, "pipeline": bad})
        zero = bad.replace("mean: [0.5, 0.5] std: [1, 1, 1]", "std: [1, 0, 1]")
        with self.assertRaisesRegex(ValueError, "std: channel 1 must be positive"):
            prepflow._prepflow.Loader({"data": DATA, "gpu_normalize": True, "pipeline": zero})

    def test_without_a_device_the_gpu_path_says_why(self):
        ok, why = prepflow._prepflow.gpu_available()
        if ok:
            self.skipTest("a CUDA device is present")
        self.assertTrue(why)
        with self.assertRaisesRegex(RuntimeError, "CUDA"):
            prepflow._prepflow.Loader({"data": DATA, "gpu_normalize": True})

    @needs_torch
    def test_gpu_batches_equal_cpu_batches_bit_for_bit(self):
        if not (torch.cuda.is_available() and prepflow._prepflow.gpu_available()[0]):
            self.skipTest("needs a CUDA device and prepflow built with CUDA")
        cpu = loader(epochs=1)
        gpu = loader(epochs=1, device="cuda:0")
        n = 0
        for (ci, cl), (gi, gl) in zip(cpu, gpu):
            self.assertEqual(gi.device.type, "cuda")
            self.assertTrue(torch.equal(gi.cpu(), ci))  # the same bits: IEEE on both sides
            self.assertTrue(torch.equal(gl.cpu(), cl))
            n += ci.shape[0]
        self.assertEqual(n, 40)


def python_tail_stays_here(test, address):
    """prepflow's part offloaded, the Python tail run here: the batches
    are the local run's, bit for bit."""
    if torch is None:
        return
    try:
        import torchvision.transforms as T
    except ImportError:
        return
    tf = T.Compose([T.RandomResizedCrop(48), T.ToTensor(), _Noise()])
    got = []
    for kw in ({"offload": "remote", "workers": [address]}, {}):
        with loader(transform=tf, python_tail="process", tail_workers=2, **kw) as one:
            got.append(torch.cat([images for images, _ in one]))
            if kw:
                test.assertEqual(one.stats()["remote_images"], 40)
    test.assertTrue(torch.equal(got[0], got[1]))


class Remote(unittest.TestCase):
    def test_remote_workers_give_the_local_checksum(self):
        with testdata.Worker(BIN, TMP) as worker:
            address = worker.address
            remote = loader(offload="remote", workers=[address], as_numpy=True)
            for _ in remote:
                pass
            st = remote.stats()
            self.assertEqual(st["remote_images"], 40)
            self.assertEqual(st["workers"][0]["address"], address)
            local = loader(as_numpy=True)
            for _ in local:
                pass
            self.assertEqual(st["checksum"], local.stats()["checksum"])
            remote.close()
            python_tail_stays_here(self, address)


class _Noise:
    """A transform prepflow cannot translate: Gaussian noise on a tensor,
    from torch's global generator."""

    def __call__(self, x):
        return x + 0.05 * torch.randn_like(x)

    def __repr__(self):
        return "Noise()"


class _Fails:
    def __call__(self, x):
        raise OSError("the disk is on fire")

    def __repr__(self):
        return "Fails()"


@needs_torch
class PythonTail(unittest.TestCase):
    def compose(self, *middle):
        import torchvision.transforms as T
        return T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                          *middle, T.Normalize([0.5] * 3, [0.25] * 3)])

    def setUp(self):
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("torchvision is not installed (Debian: python3-torchvision)")

    def run_all(self, **kw):
        got = loader(transform=self.compose(_Noise()), python_tail="process", **kw)
        try:
            batches = [(b.images, b.labels, b.epoch, b.indices) for b in got.batches()]
            # The tail's CPU (in its processes) reached the planner's input.
            self.assertGreater(got._core.trainer_cpu_seconds, 0)
            return batches, got.stats()
        finally:
            got.close()

    def test_untranslatable_transforms_are_an_error_that_names_the_option(self):
        with self.assertRaisesRegex(ValueError, r"cannot translate Noise\(\) \(item 4 of 5\).*"
                                                r"python_tail='process'"):
            loader(transform=self.compose(_Noise()))

    def test_split_keeps_the_translatable_prefix(self):
        import torchvision.transforms as T
        stages, tail = prepflow.transforms.split(self.compose(_Noise()))
        self.assertEqual([s.name for s in stages],
                         ["decode", "random_resized_crop", "random_horizontal_flip", "normalize"])
        self.assertEqual(repr(tail), "[Noise(), Normalize(mean=[0.5, 0.5, 0.5], "
                                     "std=[0.25, 0.25, 0.25])]")
        # A PILToTensor waiting for its ConvertImageDtype goes with the tail.
        stages, tail = prepflow.transforms.split(
            [T.CenterCrop(32), T.PILToTensor(), _Noise()])
        self.assertEqual([s.name for s in stages], ["decode", "center_crop"])
        self.assertEqual(len(tail.transforms), 2)
        self.assertIsNone(prepflow.transforms.split([T.CenterCrop(32), T.ToTensor()])[1])

    def test_the_tail_runs_on_prepflows_output_seeded_per_sample(self):
        batches, stats = self.run_all(tail_workers=2)
        self.assertEqual(stats["images"], 40)
        self.assertEqual(tuple(batches[0][0].shape), (8, 3, 48, 48))
        # The same by hand: prepflow's part as ops, then the tail on each
        # sample with its seed.
        from prepflow import _tail
        stages, tail = prepflow.transforms.split(self.compose(_Noise()))
        native = loader(pipeline=stages, as_numpy=True)
        for (images, _, epoch, indices), b in zip(batches, native.batches()):
            self.assertEqual(list(indices), list(b.indices))
            want, _ = _tail.run_chunk(b.images, epoch, b.indices, 7, tail)
            self.assertTrue(torch.equal(images, torch.from_numpy(np.stack(want))))

    def test_the_output_does_not_depend_on_the_worker_count(self):
        one, _ = self.run_all(tail_workers=1)
        three, _ = self.run_all(tail_workers=3)
        for a, b in zip(one, three):
            self.assertTrue(torch.equal(a[0], b[0]))
            self.assertTrue(torch.equal(a[1], b[1]))

    def test_errors_in_the_tail_name_the_transform_and_sample(self):
        got = loader(transform=self.compose(_Fails()), python_tail="thread", tail_workers=1)
        with self.assertRaisesRegex(RuntimeError, r"python tail: .*Fails\(\).* failed on sample "
                                                  r"\d+ of epoch 0: OSError: the disk is on fire"):
            next(iter(got))
        got.close()
        import torchvision.transforms as T
        with self.assertRaisesRegex(ValueError, "no fixed shape"):
            loader(transform=[T.Resize(40), _Noise()], python_tail="process")
        with self.assertRaisesRegex(ValueError, "batch_ops: .* ends in Python"):
            loader(transform=self.compose(_Noise()), python_tail="process",
                   batch_ops=[prepflow.ops.MixupCutmix(mixup_alpha=0.2, num_classes=2)])
        with self.assertRaisesRegex(ValueError, "python_tail: 'fork'"):
            loader(transform=self.compose(_Noise()), python_tail="fork")


class Plugins(unittest.TestCase):
    PLUGIN = BUILD / "examples" / "plugin" / "libprepflow_cutout.so"

    def test_a_plugin_op_runs_from_python_as_from_the_cli(self):
        from prepflow import ops
        stages = [ops.Decode(), ops.RandomResizedCrop(size=224), ops.RandomHorizontalFlip(),
                  ops.Custom("cutout", size=56), ops.Normalize()]
        self.assertEqual(stages[3].text(),
                         'custom { name: "cutout" params { key: "size" value: "56" } }')
        self.assertEqual(repr(stages[3]), "Custom('cutout', size=56)")
        with self.assertRaisesRegex(FileNotFoundError, "/nonexistent/libx.so"):
            loader(pipeline=stages, plugins=["/nonexistent/libx.so"])
        got = loader(pipeline=stages, plugins=[self.PLUGIN], as_numpy=True)
        self.assertIn("cutout", [op["name"] for op in prepflow.plugin_ops()])
        for _ in got:
            pass
        text = os.path.join(TMP, "cutout.txt")
        with open(text, "w") as f:
            f.write(prepflow.ops.pipeline_text(stages, name="cutout"))
        self.assertEqual(got.stats()["checksum"],
                         cli_checksum("--batch", "8", "--seed", "7", "--pipeline", text,
                                      "--plugin", str(self.PLUGIN)))
        bad = [ops.Decode(), ops.CenterCrop(size=8), ops.Custom("cutout", size=0)]
        with self.assertRaisesRegex(ValueError, "custom op 'cutout': size"):
            loader(pipeline=bad)


class DataLoaderHabits(unittest.TestCase):
    """What a DataLoader user passes: a torchvision ImageFolder, shard lists,
    DataLoader's keywords; each honoured or refused with why."""

    def setUp(self):
        try:
            import torchvision.transforms as T
            from torchvision.datasets import ImageFolder
        except ImportError:
            self.skipTest("torchvision is not installed (Debian: python3-torchvision)")
        self.T, self.ImageFolder = T, ImageFolder

    def batches(self, data, **kw):
        loader = prepflow.Loader(data, batch_size=8, seed=5, threads=2, as_numpy=True, **kw)
        out = [(b.images.tobytes(), tuple(b.labels)) for b in loader.batches()]
        loader.close()
        return out

    def test_an_image_folder_object_is_its_root_and_its_transform(self):
        T = self.T
        transform = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
        folder = self.ImageFolder(DATA, transform=transform)
        self.assertEqual(self.batches(folder), self.batches(DATA, transform=transform))
        plain = self.ImageFolder(DATA)
        self.assertEqual(self.batches(plain, transform=transform),
                         self.batches(DATA, transform=transform))
        with self.assertRaisesRegex(ValueError, "has a transform, and so does this Loader"):
            prepflow.Loader(folder, transform=transform)
        with self.assertRaisesRegex(TypeError, "custom loader"):
            prepflow.Loader(self.ImageFolder(DATA, loader=lambda p: p), transform=transform)
        with self.assertRaisesRegex(TypeError, "target_transform"):
            prepflow.Loader(self.ImageFolder(DATA, target_transform=int), transform=transform)
        relabelled = self.ImageFolder(DATA, transform=transform)
        n = len(relabelled.classes)
        relabelled.class_to_idx = {c: n - 1 - i for c, i in relabelled.class_to_idx.items()}
        with self.assertRaisesRegex(ValueError, "class_to_idx"):
            prepflow.Loader(relabelled)

    def test_no_transform_is_an_error_not_a_train_recipe(self):
        with self.assertRaisesRegex(ValueError, "give transform="):
            prepflow.Loader(DATA)

    def test_dataloader_keywords_map_or_say_why_not(self):
        T = self.T
        transform = T.Compose([T.CenterCrop(32)])
        base = self.batches(DATA, transform=transform)
        self.assertEqual(self.batches(DATA, transform=transform, pin_memory=True,
                                      persistent_workers=True, prefetch_factor=4), base)
        loader = prepflow.Loader(DATA, transform=transform, num_workers=3, prefetch_factor=5,
                                 as_numpy=True)
        self.assertEqual((loader._options["threads"], loader._options["prefetch"]), (3, 15))
        loader.close()
        from torch.utils.data import default_collate
        self.assertEqual(self.batches(DATA, transform=transform, collate_fn=default_collate),
                         base)
        for kw, error in [({"collate_fn": lambda b: b},
                           "collate_fn: prepflow assembles.*v2's MixUp"),
                          ({"sampler": [0, 1]}, "sampler: not taken"),
                          ({"worker_init_fn": print}, "worker_init_fn: not taken"),
                          ({"num_workers": -1}, "num_workers: must be an int >= 0"),
                          ({"num_workers": 2, "threads": 2}, "give threads= or num_workers=")]:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaisesRegex((TypeError, ValueError), error):
                    prepflow.Loader(DATA, transform=transform, **kw)

    def test_a_list_of_shards_is_one_dataset(self):
        shards = os.path.join(TMP, "habit-shards")
        subprocess.run([BIN / "prepflow", "pack", "--data", DATA, "--out", shards,
                        "--shard-samples", "16"], check=True, capture_output=True)
        names = sorted(os.path.join(shards, f) for f in os.listdir(shards) if f.endswith(".tar"))
        transform = self.T.CenterCrop(32)
        self.assertEqual(self.batches(names, transform=transform),
                         self.batches(shards, transform=transform))
        with self.assertRaisesRegex(ValueError, "may not hold"):
            prepflow.Loader([names[0] + ",x"], transform=transform)


class Example(unittest.TestCase):
    @needs_torch
    def test_train_resnet_trains_with_either_loader(self):
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("torchvision is not installed (Debian: python3-torchvision)")
        for which, recipe in (("prepflow", "imagenet-train"), ("torch", "imagenet-train"),
                              ("prepflow", "resnet50-v2")):
            with self.subTest(loader=which, recipe=recipe):
                out = subprocess.run(
                    [sys.executable, SOURCE / "examples/train_resnet.py", "--data", DATA,
                     "--loader", which, "--recipe", recipe, "--steps", "3", "--batch", "8",
                     "--threads", "1"],
                    capture_output=True, text=True, env=dict(os.environ))
                self.assertEqual(out.returncode, 0, out.stderr[-2000:])
                summary = json.loads(out.stdout.strip().splitlines()[-1])
                self.assertEqual(summary["steps"], 3)
                self.assertEqual(summary["images"], 24)
                self.assertGreater(summary["first_loss"], 0)


class RemoteData(unittest.TestCase):
    """A URL as `data`: shards served by a real HTTP server (tests/servers)."""

    def setUp(self):
        shards = os.path.join(TMP, "www", "shards")
        if not os.path.isdir(shards):
            subprocess.run([BIN / "prepflow", "pack", "--data", DATA, "--out", shards,
                            "--shard-samples", "8"], check=True, capture_output=True)
        self.server = subprocess.Popen(
            ["node", "--openssl-legacy-provider", SOURCE / "tests/servers/serve.js", "http",
             os.path.join(TMP, "www")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        self.addCleanup(self.server.stdout.close)
        line = self.server.stdout.readline()
        self.assertTrue(line.startswith("listening "), line)
        self.address = line.split()[1]
        self.addCleanup(self.server.wait)
        self.addCleanup(self.server.terminate)

    def test_a_cache_reads_storage_once(self):
        n = len([f for f in os.listdir(os.path.join(TMP, "www", "shards")) if f.endswith(".tar")])
        url = f"http://{self.address}/shards/shard-{{000000..{n - 1:06d}}}.tar"
        loader = prepflow.Loader(url, "imagenet-train", batch_size=8, seed=7, threads=2,
                                 as_numpy=True, epochs=2,
                                 cache_bytes=64 << 20)
        for _ in range(2):  # one epoch per pass, as a DataLoader
            for _ in loader:
                pass
        stats = loader.stats()
        self.assertEqual(stats["checksum"], cli_checksum("--seed", "7", "--epochs", "2"))
        first, second = stats["storage_bytes_read_per_epoch"]
        self.assertGreater(first, 0)
        self.assertEqual(second, 0)
        self.assertEqual(stats["cache_hits"], stats["images"] // 2)

    def test_a_url_gives_the_local_checksum_and_counts_its_requests(self):
        n = len([f for f in os.listdir(os.path.join(TMP, "www", "shards")) if f.endswith(".tar")])
        url = f"http://{self.address}/shards/shard-{{000000..{n - 1:06d}}}.tar"
        remote = prepflow.Loader(url, "imagenet-train", batch_size=8, seed=7, threads=2, as_numpy=True,
                                 storage_attempts=2, read_ahead_requests=4)
        for _ in remote:
            pass
        stats = remote.stats()
        self.assertEqual(stats["checksum"], cli_checksum("--seed", "7"))
        self.assertEqual(stats["errors"], 0)
        self.assertGreaterEqual(stats["storage_requests"], stats["images"])
        self.assertGreater(stats["storage_bytes_read"], 0)
        self.assertEqual(stats["storage_retries"], 0)
        with self.assertRaises(ValueError):
            prepflow.Loader(url, "imagenet-train", read_ahead_requests=-1)
        with self.assertRaises(ValueError):
            prepflow.Loader(url, "imagenet-train", cache_bytes=-1)
        with self.assertRaises(FileNotFoundError):
            prepflow.Loader(f"http://{self.address}/shards/nothing-{{0..1}}.tar", "imagenet-train")


if __name__ == "__main__":
    unittest.main()
