#!/usr/bin/env python3
"""A real Prometheus server scrapes a real prepflow-worker and prepflow-scheduler.

A job runs 16 samples through the worker (which it got from the scheduler,
never named); then Prometheus, loaded with deploy/prometheus/rules.yml, must
report through its HTTP API exactly those 16 samples, the scheduler's pool
of one worker, both targets up, and every prepflow rule evaluated without
error. Exits 77 (skipped) where the `prometheus` binary is absent; scripts/
setup.sh installs it.

    tests/deploy/prometheus_test.py BUILD_DIR
"""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from daemons import Daemon, demo_dataset, start_scheduler, tear_down

SOURCE = pathlib.Path(__file__).resolve().parents[2]
PATIENCE = 60  # seconds; only a stalled machine gets near it


def free_port():
    # Prometheus cannot listen on port 0, so ask the kernel for a free one.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def query(base, promql):
    body = json.loads(get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def poll(what, fn):
    deadline = time.time() + PATIENCE
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except OSError as e:  # not listening yet
            last = e
        time.sleep(0.25)
    sys.exit(f"FAIL: {what} (last: {last})")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_dir = pathlib.Path(sys.argv[1], "bin").resolve()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("SKIP: no prometheus binary (Debian package 'prometheus'; scripts/setup.sh installs it)")
        return 77
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="prepflow-prom-"))
    daemons = []
    try:
        data, generated = demo_dataset(bin_dir, 16)
        scheduler, sched_addr, sched_metrics = start_scheduler(bin_dir, tmp)
        daemons.append(scheduler)

        worker = Daemon([bin_dir / "prepflow-worker", "--port", "0", "--metrics-port", "0",
                         "--data-root", generated, "--threads", "1", "--scheduler", sched_addr],
                        tmp, "worker")
        daemons.append(worker)
        worker.wait_for(r"listening (\S+)", worker.out)
        worker_metrics = worker.wait_for(r"metrics (127\.0\.0\.1:\d+)[,)]", worker.err).group(1)
        poll("the worker registered with the scheduler",
             lambda: 'prepflow_scheduler_pool{what="workers"} 1' in
             get(f"http://{sched_metrics}/metrics"))

        run = subprocess.run([bin_dir / "prepflow", "run", "--data", data, "--offload", "remote",
                              "--scheduler", sched_addr, "--threads", "1", "--json"],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        assert summary["remote_images"] == 16, summary

        port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{SOURCE / 'deploy/prometheus/rules.yml'}"]
scrape_configs:
  - job_name: prepflow-worker
    static_configs: [{{targets: ["{worker_metrics}"]}}]
  - job_name: prepflow-scheduler
    static_configs: [{{targets: ["{sched_metrics}"]}}]
""")
        server = Daemon([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/tsdb",
                         f"--web.listen-address=127.0.0.1:{port}"], tmp, "prometheus")
        daemons.append(server)
        base = f"http://127.0.0.1:{port}"

        samples = poll("Prometheus reported the worker's samples",
                       lambda: query(base, 'prepflow_worker_samples_total{job="prepflow-worker"}'))
        assert float(samples[0]["value"][1]) == 16, samples
        pool = poll("Prometheus reported the scheduler's pool",
                    lambda: query(base, 'prepflow_scheduler_pool{what="workers"}'))
        assert float(pool[0]["value"][1]) == 1, pool
        up = poll("both targets up", lambda: len(query(base, "up == 1")) == 2 or None)
        assert up

        def rules_evaluated():
            groups = json.loads(get(f"{base}/api/v1/rules"))["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if not rules or any(r.get("lastEvaluation", "").startswith("0001") for r in rules):
                return None  # not all evaluated yet
            return rules
        rules = poll("every rule evaluated", rules_evaluated)
        bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        assert not bad, bad
        alerts = {r["name"] for r in rules if r["type"] == "alerting"}
        assert {"PrepflowWorkerDown", "PrepflowSchedulerDown", "PrepflowJobInputBound"} <= alerts
        firing = [r["name"] for r in rules if r["type"] == "alerting" and r["state"] != "inactive"]
        assert not firing, f"alerts on a healthy cluster: {firing}"
        print(f"ok: Prometheus {base} scraped 16 worker samples, a pool of 1 worker, "
              f"{len(rules)} rules healthy")
        return 0
    finally:
        tear_down(daemons, locals().get("generated"), tmp)


if __name__ == "__main__":
    sys.exit(main())
