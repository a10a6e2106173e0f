"""Real prepflow daemons for the deploy tests (prometheus_test.py,
autoscale_test.py): a process whose stdout and stderr go to files, so its
log can be searched for what it announces."""
import pathlib
import re
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
