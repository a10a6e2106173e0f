"""The prepflow commands from a pip-installed package: the console scripts
`prepflow`, `prepflow-worker` and `prepflow-scheduler` (pyproject.toml) and
`python -m prepflow` run the C++ programs bundled in prepflow/bin/, built
with the package, in place of this process."""
import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _run(name):
    path = os.path.join(_BIN, name)
    if not os.path.isfile(path):
        sys.exit(f"{name}: this prepflow package was built without its commands ({path} is "
                 f"missing); build it with pip install, or run build/bin/{name}")
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)  # a wheel unpacked without its file modes
    os.execv(path, [name] + sys.argv[1:])


def prepflow():
    _run("prepflow")


def worker():
    _run("prepflow-worker")


def scheduler():
    _run("prepflow-scheduler")
