#!/usr/bin/env python3
"""Autoscaling without a cluster: the HorizontalPodAutoscaler's formula, with
the settings of deploy/k8s/autoscale/hpa.yaml, run against a real
prepflow-scheduler's /metrics, starting and stopping real prepflow-worker
processes. It stands in for the controller only: the signal, the drain and
the workers are the real ones.

  1. A scheduler and one elastic worker (class "spot", one thread: a pod of
     one core here, so the target is 1 core a pod, not hpa.yaml's 4).
  2. JOBS jobs with --offload auto and the scheduler run at once (their
     demand adds up in the signal); every tick the
     stand-in computes prepflow:elastic_wanted_cores as the recording rule
     does (deploy/prometheus/rules.yml) from the scheduler's series, and sets
     the replicas as the HPA would: ceil(signal / target) outside its 10%
     tolerance, within [minReplicas, MAX_REPLICAS], scaling down to the
     highest recommendation of the last STABILIZE seconds (hpa.yaml: 300;
     shortened here). A pod removed gets SIGTERM, newest first, and drains.
  3. Checked: the pool grew past one worker while the jobs ran; each job
     delivered every sample once (its count, and its checksum against the
     same job run all local) and re-issued nothing; every worker stopped
     exited 0; and after the jobs ended the pool went back to minReplicas.

    tests/deploy/autoscale_test.py BUILD_DIR
"""
import json
import math
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from daemons import Daemon, demo_dataset, start_scheduler, tear_down

SOURCE = pathlib.Path(__file__).resolve().parents[2]
PATIENCE = 120  # seconds for any one wait; only a stalled machine gets near it
MAX_REPLICAS = 4  # this machine's share of hpa.yaml's 64
STABILIZE = 3.0  # seconds of scale-down stabilization (hpa.yaml: 300)
TICK = 0.5
EPOCHS = 150  # each job's
JOBS = 2


def series(metrics_text, name, **labels):
    """Values of `name` whose labels include `labels`, from Prometheus text."""
    values = []
    for line in metrics_text.splitlines():
        m = re.match(r"(\w+)\{([^}]*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            values.append(float(m.group(3)))
    return values


def elastic_wanted_cores(metrics_text, elastic_class):
    """prepflow:elastic_wanted_cores, as deploy/prometheus/rules.yml records it."""
    wanted = sum(series(metrics_text, "prepflow_scheduler_pool", what="wanted_cores"))
    fixed = 0.0
    for line in metrics_text.splitlines():
        m = re.match(r'prepflow_scheduler_class_cores\{class="([^"]*)",what="pool"\} (\S+)$', line)
        if m and m.group(1) != elastic_class:
            fixed += float(m.group(2))
    return max(0.0, wanted - fixed)


class StandInHpa:
    """The HPA's replica calculation for one External AverageValue metric."""

    def __init__(self, hpa, target):
        self.min = hpa["spec"]["minReplicas"]
        self.max = MAX_REPLICAS
        self.target = target
        self.tolerance = 0.1  # the controller's default
        self.recommendations = []  # (time, replicas)

    def desired(self, now, current, signal):
        ratio = signal / (self.target * current)
        wanted = current if abs(ratio - 1) <= self.tolerance else math.ceil(signal / self.target)
        wanted = max(self.min, min(self.max, wanted))
        self.recommendations.append((now, wanted))
        self.recommendations = [(t, r) for t, r in self.recommendations if now - t <= STABILIZE]
        if wanted < current:  # down only as far as the window's highest
            wanted = max(r for _, r in self.recommendations)
        return wanted


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_dir = pathlib.Path(sys.argv[1], "bin").resolve()
    hpa = yaml.safe_load((SOURCE / "deploy/k8s/autoscale/hpa.yaml").read_text())
    config = yaml.safe_load((SOURCE / "deploy/k8s/configmap.yaml").read_text())["data"]
    elastic_class = config["ELASTIC_WORKER_CLASS"]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="prepflow-autoscale-"))
    workers, daemons, exits = [], [], []
    try:
        data, generated = demo_dataset(bin_dir, 64)
        job = [bin_dir / "prepflow", "run", "--data", data, "--epochs", str(EPOCHS),
               "--threads", "1", "--json"]
        local = subprocess.run(job + ["--offload", "off"], capture_output=True, text=True)
        assert local.returncode == 0, local.stderr[-3000:]
        local = json.loads(local.stdout.strip().splitlines()[-1])

        scheduler, address, metrics = start_scheduler(bin_dir, tmp, PATIENCE)
        daemons.append(scheduler)
        metrics_url = f"http://{metrics}/metrics"

        def start_worker():
            w = Daemon([bin_dir / "prepflow-worker", "--port", "0", "--data-root", generated,
                        "--threads", "1", "--scheduler", address, "--class", elastic_class,
                        "--cost-per-core-hour", "0.012", "--grace-seconds", "30"],
                       tmp, f"worker{len(daemons)}", PATIENCE)
            daemons.append(w)
            w.wait_for(r"listening (\S+)", w.out)
            workers.append(w)

        def pool_size(metrics_text):
            return sum(series(metrics_text, "prepflow_scheduler_pool", what="workers"))

        def scale(desired):
            while len(workers) < desired:
                start_worker()
            while len(workers) > desired:
                exits.append(workers.pop().drain())  # newest first

        def scrape():
            with urllib.request.urlopen(metrics_url, timeout=5) as r:
                return r.read().decode()

        start_worker()
        hpa_loop = StandInHpa(hpa, target=1.0)
        deadline = time.time() + PATIENCE
        while pool_size(scrape()) < 1:
            assert time.time() < deadline, "the first worker never registered"
            time.sleep(0.1)

        runs = [subprocess.Popen(job + ["--offload", "auto", "--scheduler", address],
                                 stdout=subprocess.PIPE, stderr=(tmp / f"job{k}.err").open("w"),
                                 text=True) for k in range(JOBS)]
        most, signals, jobs_seen = 1, [], 0
        while any(run.poll() is None for run in runs):
            text = scrape()
            jobs_seen = max([jobs_seen] + series(text, "prepflow_scheduler_pool", what="jobs"))
            signal = elastic_wanted_cores(text, elastic_class)
            signals.append(round(signal, 2))
            scale(hpa_loop.desired(time.time(), len(workers), signal))
            most = max(most, len(workers))
            time.sleep(TICK)
        summaries = []
        for k, run in enumerate(runs):
            out = run.stdout.read()
            assert run.returncode == 0, (tmp / f"job{k}.err").read_text()[-3000:]
            summaries.append(json.loads(out.strip().splitlines()[-1]))
        # After the job: back down to minReplicas once the window passes.
        deadline = time.time() + PATIENCE
        while len(workers) > hpa_loop.min:
            assert time.time() < deadline, f"the pool stayed at {len(workers)} workers"
            scale(hpa_loop.desired(time.time(), len(workers),
                                   elastic_wanted_cores(scrape(), elastic_class)))
            time.sleep(TICK)

        assert most > 1, (f"the pool never grew: the signal was {signals}; the first job's log:\n"
                          + (tmp / "job0.err").read_text()[-4000:])
        for summary in summaries:
            assert summary["images"] == EPOCHS * 64, summary["images"]
            assert summary["errors"] == 0, summary
            assert summary["checksum"] == local["checksum"], (summary["checksum"], local["checksum"])
            assert summary["reissued_items"] == 0, summary["reissued_items"]
        assert jobs_seen == JOBS, f"the scheduler saw {jobs_seen} jobs at most, not {JOBS}"
        assert exits and all(code == 0 for code in exits), exits
        print(f"ok: the pool grew to {most} workers for {JOBS} jobs that wanted up to "
              f"{max(signals):.1f} cores together, and went back to {len(workers)} after them; "
              f"{EPOCHS * 64} samples once each per job, {len(exits)} workers drained, "
              f"{[s['remote_images'] for s in summaries]} samples remote")
        return 0
    finally:
        # The workers removed have drained already: the rest need no grace.
        tear_down(daemons, locals().get("generated"), tmp, graceful=False)


if __name__ == "__main__":
    sys.exit(main())
