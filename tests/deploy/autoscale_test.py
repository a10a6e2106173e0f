#!/usr/bin/env python3
"""Autoscaling without a cluster: the HorizontalPodAutoscaler's formula, with
the settings of deploy/k8s/autoscale/hpa.yaml and hpa-fallback.yaml, run
against a real prepflow-scheduler's /metrics, starting and stopping real
prepflow-worker processes. It stands in for the controller only: the
signals, the drain and the workers are the real ones.

  1. A scheduler and one elastic worker (class "spot", one thread: a pod of
     one core here, so the targets are 1 core a pod, not the manifests' 4).
  2. JOBS jobs with --offload auto and the scheduler run at once (their
     demand adds up). Every tick the stand-in computes the recording rules
     (deploy/prometheus/rules.yml) from the scheduler's series and sets each
     Deployment's replicas as the HPA would: ceil(signal / target) outside
     its 10% tolerance, within [min, MAX_REPLICAS], scaling down to the
     highest recommendation of the last STABILIZE seconds (the manifests:
     300; shortened here). A pod removed gets SIGTERM, newest first, and
     drains.
       - Spot (prepflow:elastic_wanted_cores) has no capacity at first: its
         pods past the first stay pending, as on a cluster out of spot VMs.
       - The fallback (class "on-demand-fallback", dearer;
         prepflow:fallback_wanted_cores: its grants plus a shortfall that
         lasted SUSTAIN seconds, the rule's 5 minutes shortened) grows.
       - Once it has, spot capacity comes back: spot's pending pods start,
         and grants, which take the cheapest cores, move to them.
  3. Checked: the fallback grew while spot could not, and spot grew once it
     could; each job delivered every sample once (its count, and its
     checksum against the same job run all local) and re-issued nothing;
     every worker stopped exited 0; after the jobs both went back to their
     minimum (spot 1, the fallback 0).

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
SUSTAIN = 2.0  # seconds a shortfall lasts before the fallback grows (rules.yml: 5m)
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


def elastic_wanted_cores(metrics_text, elastic_classes):
    """prepflow:elastic_wanted_cores, as deploy/prometheus/rules.yml records it:
    the plans' want less the fixed pool (every class but the elastic ones)."""
    wanted = sum(series(metrics_text, "prepflow_scheduler_pool", what="wanted_cores"))
    fixed = 0.0
    for line in metrics_text.splitlines():
        m = re.match(r'prepflow_scheduler_class_cores\{class="([^"]*)",what="pool"\} (\S+)$', line)
        if m and m.group(1) not in elastic_classes:
            fixed += float(m.group(2))
    return max(0.0, wanted - fixed)


class FallbackSignal:
    """prepflow:fallback_wanted_cores: the fallback class's granted cores plus
    the least shortfall over the last `sustain` seconds (min_over_time)."""

    def __init__(self, fallback_class, sustain):
        self.fallback_class = fallback_class
        self.sustain = sustain
        self.shorts = []  # (time, short cores)
        self.since = None  # the first scrape: a window needs that much past

    def __call__(self, now, metrics_text):
        self.since = now if self.since is None else self.since
        self.shorts.append((now, sum(series(metrics_text, "prepflow_scheduler_pool",
                                            what="short_cores"))))
        self.shorts = [(t, v) for t, v in self.shorts if now - t <= self.sustain]
        lasting = min(v for _, v in self.shorts) if now - self.since >= self.sustain else 0.0
        granted = sum(series(metrics_text, "prepflow_scheduler_class_cores",
                             **{"class": self.fallback_class, "what": "granted"}))
        return granted + lasting


class StandInHpa:
    """The HPA's replica calculation for one External AverageValue metric."""

    def __init__(self, minimum, target):
        self.min = minimum
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


class Deployment:
    """One elastic Deployment's pods: real workers of one class, started and
    drained (newest first) as its stand-in HPA says, up to `capacity` running
    (the rest pending, as pods with no node to run on)."""

    def __init__(self, env, worker_class, price, hpa, capacity):
        self.env, self.worker_class, self.price = env, worker_class, price
        self.hpa, self.capacity = hpa, capacity
        self.workers, self.most = [], 0

    def scale(self, now, signal):
        desired = min(self.capacity, self.hpa.desired(now, max(1, len(self.workers)), signal))
        while len(self.workers) < desired:
            self.workers.append(self.env.start_worker(self.worker_class, self.price))
        while len(self.workers) > desired:
            self.env.exits.append(self.workers.pop().drain())
        self.most = max(self.most, len(self.workers))


class Env:
    """The scheduler, the dataset and the daemons started, for tear-down."""

    def __init__(self, bin_dir, tmp):
        self.bin_dir, self.tmp = bin_dir, tmp
        self.daemons, self.exits = [], []
        self.data, self.generated = demo_dataset(bin_dir, 64)
        scheduler, self.address, metrics = start_scheduler(bin_dir, tmp, PATIENCE)
        self.daemons.append(scheduler)
        self.metrics_url = f"http://{metrics}/metrics"

    def start_worker(self, worker_class, price):
        w = Daemon([self.bin_dir / "prepflow-worker", "--port", "0", "--data-root",
                    self.generated, "--threads", "1", "--scheduler", self.address, "--class",
                    worker_class, "--cost-per-core-hour", price, "--grace-seconds", "30"],
                   self.tmp, f"worker{len(self.daemons)}", PATIENCE)
        self.daemons.append(w)
        w.wait_for(r"listening (\S+)", w.out)
        return w

    def scrape(self):
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            return r.read().decode()


def run_jobs(env, job, spot, fallback, fallback_signal, classes):
    """Runs JOBS jobs while the stand-ins scale both Deployments; spot's
    capacity comes back once the fallback has a worker. Returns the jobs'
    summaries, the largest spot signal and the most jobs the scheduler saw."""
    runs = [subprocess.Popen(job + ["--offload", "auto", "--scheduler", env.address],
                             stdout=subprocess.PIPE,
                             stderr=(env.tmp / f"job{k}.err").open("w"), text=True)
            for k in range(JOBS)]
    signals, jobs_seen = [0.0], 0
    while any(run.poll() is None for run in runs):
        text, now = env.scrape(), time.time()
        jobs_seen = max([jobs_seen] + series(text, "prepflow_scheduler_pool", what="jobs"))
        signals.append(round(elastic_wanted_cores(text, classes), 2))
        spot.scale(now, signals[-1])
        fallback.scale(now, fallback_signal(now, text))
        if fallback.workers:
            spot.capacity = MAX_REPLICAS  # spot VMs to be had again
        time.sleep(TICK)
    summaries = []
    for k, run in enumerate(runs):
        out = run.stdout.read()
        assert run.returncode == 0, (env.tmp / f"job{k}.err").read_text()[-3000:]
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    return summaries, max(signals), jobs_seen


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_dir = pathlib.Path(sys.argv[1], "bin").resolve()
    autoscale = SOURCE / "deploy/k8s/autoscale"
    spot_hpa = yaml.safe_load((autoscale / "hpa.yaml").read_text())
    fallback_keda = yaml.safe_load((autoscale / "keda-fallback.yaml").read_text())
    config = yaml.safe_load((SOURCE / "deploy/k8s/configmap.yaml").read_text())["data"]
    classes = (config["ELASTIC_WORKER_CLASS"], config["FALLBACK_WORKER_CLASS"])
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="prepflow-autoscale-"))
    env = None
    try:
        env = Env(bin_dir, tmp)
        job = [bin_dir / "prepflow", "run", "--data", env.data, "--epochs", str(EPOCHS),
               "--threads", "1", "--json"]
        local = subprocess.run(job + ["--offload", "off"], capture_output=True, text=True)
        assert local.returncode == 0, local.stderr[-3000:]
        local = json.loads(local.stdout.strip().splitlines()[-1])
        spot = Deployment(env, classes[0], config["ELASTIC_WORKER_COST_PER_CORE_HOUR"],
                          StandInHpa(spot_hpa["spec"]["minReplicas"], 1.0), capacity=1)
        fallback = Deployment(env, classes[1], config["FALLBACK_WORKER_COST_PER_CORE_HOUR"],
                              StandInHpa(fallback_keda["spec"]["minReplicaCount"], 1.0),
                              capacity=MAX_REPLICAS)
        spot.scale(time.time(), 0.0)  # its minimum: one
        deadline = time.time() + PATIENCE
        while sum(series(env.scrape(), "prepflow_scheduler_pool", what="workers")) < 1:
            assert time.time() < deadline, "the first worker never registered"
            time.sleep(0.1)

        fallback_signal = FallbackSignal(classes[1], SUSTAIN)
        summaries, most_wanted, jobs_seen = run_jobs(env, job, spot, fallback,
                                                     fallback_signal, classes)
        # After the jobs: each back to its minimum once the window passes.
        deadline = time.time() + PATIENCE
        while len(spot.workers) > spot.hpa.min or len(fallback.workers) > fallback.hpa.min:
            assert time.time() < deadline, (len(spot.workers), len(fallback.workers))
            text, now = env.scrape(), time.time()
            spot.scale(now, elastic_wanted_cores(text, classes))
            fallback.scale(now, fallback_signal(now, text))
            time.sleep(TICK)

        assert fallback.most >= 1, ("the fallback never grew while spot could not; the "
                                    "first job's log:\n"
                                    + (tmp / "job0.err").read_text()[-4000:])
        assert spot.most > 1, f"spot never grew once it could (wanted up to {most_wanted})"
        for summary in summaries:
            assert summary["images"] == EPOCHS * 64, summary["images"]
            assert summary["errors"] == 0, summary
            assert summary["checksum"] == local["checksum"], (summary["checksum"], local["checksum"])
            assert summary["reissued_items"] == 0, summary["reissued_items"]
        assert jobs_seen == JOBS, f"the scheduler saw {jobs_seen} jobs at most, not {JOBS}"
        assert env.exits and all(code == 0 for code in env.exits), env.exits
        print(f"ok: with no spot capacity the fallback grew to {fallback.most} workers; spot, "
              f"once it could, to {spot.most}, for {JOBS} jobs that wanted up to "
              f"{most_wanted:.1f} cores together; after them spot {len(spot.workers)} and "
              f"fallback {len(fallback.workers)}; {EPOCHS * 64} samples once each per job, "
              f"{len(env.exits)} workers drained, "
              f"{[s['remote_images'] for s in summaries]} samples remote")
        return 0
    finally:
        # The workers removed have drained already: the rest need no grace.
        if env is not None:
            tear_down(env.daemons, env.generated, tmp, graceful=False)


if __name__ == "__main__":
    sys.exit(main())
