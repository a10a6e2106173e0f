"""Datasets the Python tests make for themselves (the project's tests never
need ../shared/datasets)."""
import json
import pathlib
import shutil
import subprocess


def demo_dataset(bin_dir, dest):
    """`prepflow demo`'s 40 generated JPEGs in two classes, moved to `dest`."""
    out = subprocess.run([pathlib.Path(bin_dir) / "prepflow", "demo", "--images", "40",
                          "--local-workers", "0", "--keep", "--json", "--threads", "1"],
                         capture_output=True, text=True, check=True)
    generated = pathlib.Path(json.loads(out.stdout.strip().splitlines()[-1])["dataset"])
    shutil.move(str(generated), dest)
    shutil.rmtree(generated.parent, ignore_errors=True)
    return dest


class Worker:
    """A prepflow-worker on a free port serving `data_root`, for a `with`
    block: its address, and stopped at the end."""

    def __init__(self, bin_dir, data_root, *args):
        self.process = subprocess.Popen(
            [pathlib.Path(bin_dir) / "prepflow-worker", "--data-root", str(data_root), "--port",
             "0", "--threads", "1", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.close()
            raise RuntimeError(f"prepflow-worker did not start: {line!r}")
        self.address = line.split()[1]

    def close(self):
        self.process.terminate()
        self.process.wait(30)
        self.process.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_loader(root, pipeline, batch_size, **kw):
    """Every sample's output of a prepflow.Loader over `root` in dataset
    order, as arrays (padded as its batch was), their labels, and the
    loader's stats."""
    import prepflow  # here: the module's other helpers need no build
    loader = prepflow.Loader(root, pipeline=pipeline, batch_size=batch_size, shuffle=False,
                             as_numpy=True, **kw)
    out, labels = [], []
    for batch in loader.batches():
        out.extend(batch.images)
        labels.extend(batch.labels)
    stats = loader.stats()
    loader.close()
    return out, labels, stats
