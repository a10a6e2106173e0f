"""A multi-GPU training job's ranks as real processes (issue 19).

torchrun (Debian's python3-torch) starts three ranks of rank_job.py, which
pass nothing about ranks or the job to prepflow.Loader: every rank must run
the same number of batches, the union of what they deliver must be the
dataset exactly once plus the padding they report, locally and with the
job offloaded to a real prepflow-worker, which must see one job with three
streams. Without torch the ranks are started by hand with the variables
torchrun sets. Resuming every rank from one rank's state is tested in
process.
"""
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np

import prepflow
from prepflow import ops

try:
    import torch.distributed.run  # noqa: F401
    HAVE_TORCHRUN = True
except ImportError:
    HAVE_TORCHRUN = False

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
HERE = pathlib.Path(__file__).resolve().parent
SAMPLES = 2048
RANKS = 3
PIPELINE = [ops.Decode(), ops.RandomResizedCrop(size=16), ops.RandomHorizontalFlip(),
            ops.Normalize()]


def setUpModule():
    global TMP, DATA
    from PIL import Image
    TMP = tempfile.mkdtemp(prefix="prepflow-ranks-")
    DATA = os.path.join(TMP, "data")
    rng = np.random.default_rng(5)
    for i in range(SAMPLES):
        folder = os.path.join(DATA, f"class{i % 4}")
        os.makedirs(folder, exist_ok=True)
        pixels = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"img{i:04d}.jpg"), quality=90)


def tearDownModule():
    if not os.environ.get("PREPFLOW_KEEP_TMP"):
        shutil.rmtree(TMP, ignore_errors=True)


def run_ranks(out_dir, extra):
    """Runs RANKS ranks of rank_job.py; returns their results by rank."""
    args = [str(HERE / "rank_job.py"), out_dir, DATA, json.dumps(extra)]
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    env.pop("PREPFLOW_JOB", None)
    if HAVE_TORCHRUN:
        # --redirects/--tee 2: Debian's torch 1.13 on Python 3.11 fails to
        # parse their default, 0.
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", str(RANKS), "--redirects", "2", "--tee", "2",
                        *args], env=env, check=True, timeout=240,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    else:
        procs = []
        for rank in range(RANKS):
            rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(RANKS), LOCAL_RANK=str(rank),
                            LOCAL_WORLD_SIZE=str(RANKS), TORCHELASTIC_RUN_ID="by-hand",
                            MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
            procs.append(subprocess.Popen([sys.executable, *args], env=rank_env))
        for p in procs:
            if p.wait(240) != 0:
                raise AssertionError(f"a rank failed: exit {p.returncode}")
    results = []
    for r in range(RANKS):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            results.append(json.load(f))
    return results


class Worker:
    """A real prepflow-worker on free ports, with its /metrics."""

    def __init__(self):
        self.err = open(os.path.join(TMP, "worker.err"), "w+")
        self.proc = subprocess.Popen(
            [BIN / "prepflow-worker", "--data-root", TMP, "--port", "0", "--metrics-port", "0",
             "--threads", "2"], stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening "), line
        self.address = line.split()[1]
        deadline = time.time() + 30
        self.metrics = None
        while self.metrics is None and time.time() < deadline:
            self.err.seek(0)
            m = re.search(r"metrics (127\.0\.0\.1:\d+)[,)]", self.err.read())
            self.metrics = m.group(1) if m else None
            time.sleep(0.05)
        assert self.metrics, "the worker never said where its metrics are"

    def metric(self, name):
        text = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10).read().decode()
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.proc.stdout.close()
        self.err.close()


class Ranks(unittest.TestCase):
    def check_one_job(self, results):
        self.assertEqual([r["rank"] for r in results], list(range(RANKS)))
        self.assertTrue(all(r["env_rank"] == r["rank"] and r["world_size"] == RANKS
                            for r in results))
        # One job, named by the launcher.
        self.assertEqual(len({r["job_id"] for r in results}), 1)
        self.assertTrue(results[0]["job_id"].startswith("torchrun-"), results[0]["job_id"])
        # Every rank: the same samples and batches (2048 = 3 x 682 + 2: padded to 683).
        self.assertEqual({len(r["indices"]) for r in results}, {683})
        self.assertEqual({r["batches"] for r in results}, {22})
        self.assertEqual({r["len"] for r in results}, {22})
        # The union: every sample, once, plus the padding the ranks report.
        counts = collections.Counter(i for r in results for i in r["indices"])
        self.assertEqual(set(counts), set(range(SAMPLES)))
        padded = sum(r["padded"] for r in results)
        self.assertEqual(padded, RANKS * 683 - SAMPLES)
        self.assertEqual(sum(counts.values()) - SAMPLES, padded)
        # The ranks on this machine plan with their shares of its cores.
        self.assertAlmostEqual(sum(r["local_cores"] for r in results),
                               RANKS * results[0]["local_cores"])
        self.assertLessEqual(sum(r["local_cores"] for r in results), os.cpu_count() + 1e-9)

    def test_ranks_are_one_job_locally_and_offloaded(self):
        local_dir = tempfile.mkdtemp(dir=TMP)
        local = run_ranks(local_dir, {})
        self.check_one_job(local)
        self.assertEqual({r["remote_images"] for r in local}, {0})

        worker = Worker()
        try:
            remote_dir = tempfile.mkdtemp(dir=TMP)
            remote = run_ranks(remote_dir, {"offload": "remote", "workers": [worker.address]})
            self.check_one_job(remote)
            self.assertEqual({r["remote_images"] for r in remote}, {683})
            # Exactly the same samples and bytes per rank wherever they ran.
            for here, there in zip(local, remote):
                self.assertEqual(here["indices"], there["indices"])
                self.assertEqual(here["checksum"], there["checksum"])
            # The worker served one job for the three ranks' streams.
            self.assertEqual(worker.metric("prepflow_worker_streams_opened_total"), RANKS)
            self.assertEqual(worker.metric("prepflow_worker_jobs_opened_total"), 1)
            self.assertEqual(worker.metric("prepflow_worker_active_jobs"), 0)
        finally:
            worker.stop()


def rank_loader(rank, **kw):
    return prepflow.Loader(DATA, PIPELINE, batch_size=64, seed=3, epochs=2, threads=1,
                           as_numpy=True, rank=rank, world_size=RANKS, **kw)


class Resume(unittest.TestCase):
    def test_every_rank_resumes_from_rank_zeros_state(self):
        whole = []
        for rank in range(RANKS):
            l = rank_loader(rank)
            whole.append(([i for _ in range(2) for b in l.batches() for i in b.indices],
                          l.stats()["checksum"]))
        # Rank 0 checkpoints after 13 steps (epoch 1, batch 2: 11 per epoch,
        # of 683 samples each).
        first = rank_loader(0)
        for _ in first.batches():
            pass
        for n, _ in enumerate(first.batches()):
            if n == 1:
                break
        state = first.state_dict()
        self.assertEqual((state["epoch"], state["batch"], state["step"]), (1, 2, 13))
        for rank in range(RANKS):
            resumed = rank_loader(rank)
            resumed.load_state_dict(state)
            rest = [i for _ in range(2) for b in resumed.batches() for i in b.indices]
            self.assertEqual(rest, whole[rank][0][683 + 2 * 64:], f"rank {rank}")
        # With ranks at different steps, another rank's state is refused.
        with self.assertRaisesRegex(ValueError, "rank 0's.*rank_split='uneven'"):
            rank_loader(1, rank_split="uneven").load_state_dict(
                dict(state, rank_split="uneven"))
        with self.assertRaisesRegex(ValueError, "saved with world_size=3"):
            prepflow.Loader(DATA, PIPELINE, batch_size=64, seed=3, world_size=2,
                            as_numpy=True).load_state_dict(state)

    def test_echo_auto_is_refused_with_ranks(self):
        with self.assertRaisesRegex(ValueError, "echo auto: not with 3 ranks"):
            rank_loader(0, echo="auto")

    def test_a_bad_job_name_is_refused_naming_it(self):
        with self.assertRaisesRegex(ValueError, "^job: 'two words' is not a job name"):
            rank_loader(0, job="two words")


if __name__ == "__main__":
    unittest.main()
