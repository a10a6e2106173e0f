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
