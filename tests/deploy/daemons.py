"""Real prepflow daemons for the deploy tests (prometheus_test.py,
autoscale_test.py): a process whose stdout and stderr go to files, so its
log can be searched for what it announces."""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time

PATIENCE = 60  # seconds for any one wait; only a stalled machine gets near it


class Daemon:
    def __init__(self, args, logdir, name, patience=PATIENCE):
        self.name = name
        self.patience = patience
        self.out = pathlib.Path(logdir, f"{name}.out")
        self.err = pathlib.Path(logdir, f"{name}.err")
        self.proc = subprocess.Popen(args, stdout=self.out.open("w"), stderr=self.err.open("w"))

    def wait_for(self, pattern, path):
        """The first match of `pattern` in `path` (its .out or .err); exits
        the test, with the daemon's log, if it never comes."""
        deadline = time.time() + self.patience
        while time.time() < deadline:
            m = re.search(pattern, path.read_text())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        sys.exit(f"FAIL: {self.name} never logged /{pattern}/ (exit {self.proc.poll()}):\n"
                 f"{self.err.read_text()[-3000:]}")

    def drain(self):
        """SIGTERM, as Kubernetes or systemd sends it; its exit status."""
        self.proc.terminate()
        try:
            return self.proc.wait(self.patience)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.drain()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def tear_down(daemons, *dirs, graceful=True):
    """Stops `daemons`, newest first (SIGTERM and a wait where `graceful`,
    else SIGKILL), and removes the folders of `dirs` that are not None."""
    for d in reversed(daemons):
        if graceful:
            d.stop()
        else:
            d.kill()
    for path in dirs:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def demo_dataset(bin_dir, images):
    """A generated ImageFolder of `images` photos-like JPEGs (prepflow demo
    --keep): its path, and the folder to remove afterwards."""
    demo = subprocess.run([bin_dir / "prepflow", "demo", "--images", str(images),
                           "--local-workers", "0", "--keep", "--json", "--threads", "1"],
                          capture_output=True, text=True, check=True)
    data = json.loads(demo.stdout.strip().splitlines()[-1])["dataset"]
    return data, str(pathlib.Path(data).parent)


def start_scheduler(bin_dir, logdir, patience=PATIENCE):
    """A prepflow-scheduler beating fast (0.2 s, expiry 2 s) with /metrics:
    the daemon, its address and its metrics address."""
    scheduler = Daemon([bin_dir / "prepflow-scheduler", "--port", "0", "--metrics-port", "0",
                        "--heartbeat-seconds", "0.2", "--expire-after", "2"], logdir, "scheduler",
                       patience)
    address = scheduler.wait_for(r"listening (\S+)", scheduler.out).group(1)
    metrics = scheduler.wait_for(r"metrics (127\.0\.0\.1:\d+)\)", scheduler.err).group(1)
    return scheduler, address, metrics
