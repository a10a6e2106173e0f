"""The newcomer's path: `pip install` of the package into a fresh virtual
environment, then the commands and the Python tests from outside the source
tree against what was installed.

As a user would: a copy of the tree (no build folder, as a fresh clone), a
venv with --system-site-packages (this machine reaches no package index
beyond Debian's, so numpy, torch, setuptools and wheel come from there), and
the README's offline command, `pip install --no-build-isolation --no-index
COPY`, which builds the extension and the commands with the project's CMake
for the venv's Python. It must leave the copy as it was (its build folder
aside). Then, from a folder outside both trees and with no PYTHONPATH: the
import, its version and location; the console scripts `prepflow`,
`prepflow-worker` and `prepflow-scheduler` and `python -m prepflow`; and
test_loader.py (ImageFolder objects, DataLoader keywords, ...) and
without_torch.py.

Run by ctest (python_test_install) with PREPFLOW_BUILD_DIR=build (for the
`prepflow` binary the tests compare against).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", SOURCE / "build")).resolve()
# Not part of a user's tree: build folders, git's, the test servers' npm
# packages.
IGNORED = shutil.ignore_patterns("build", "build-*", ".git", "node_modules", "__pycache__")


def run(cmd, **kw):
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {result.returncode}:\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="prepflow-install-"))
        cls.copy = cls.tmp / "prepflow-src"
        shutil.copytree(SOURCE, cls.copy, ignore=IGNORED, symlinks=True)
        cls.files_before = cls.tree_files()
        cls.venv = cls.tmp / "venv"
        run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv])
        cls.python = cls.venv / "bin" / "python"
        env = dict(os.environ)
        for name in ("PYTHONPATH", "PREPFLOW_BUILD_DIR", "PREPFLOW_PIP_BUILD_DIR"):
            env.pop(name, None)
        # Compile with ccache rooted at the copy, so a second run of this
        # test (or CI's warm cache) does not build from scratch.
        env["CCACHE_BASEDIR"] = str(cls.copy)
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        cls.install = run([cls.python, "-m", "pip", "install", "--no-build-isolation",
                           "--no-index", cls.copy], env=env, cwd=cls.tmp)
        cls.outside = cls.tmp / "elsewhere"
        cls.outside.mkdir()
        cls.env = dict(os.environ, PREPFLOW_BUILD_DIR=str(BUILD))
        cls.env.pop("PYTHONPATH", None)

    @classmethod
    def tree_files(cls):
        """The copy's files, its build folder aside."""
        return sorted(str(p.relative_to(cls.copy)) for p in cls.copy.rglob("*")
                      if p.relative_to(cls.copy).parts[0] != "build")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_imports_from_the_venv_with_the_projects_version(self):
        out = run([self.python, "-c",
                   "import prepflow; print(prepflow.__version__); print(prepflow.__file__)"],
                  cwd=self.outside, env=self.env).stdout.split()
        version = re.search(r"project\(prepflow VERSION ([0-9.]+)",
                            (SOURCE / "CMakeLists.txt").read_text()).group(1)
        self.assertEqual(out[0], version)
        self.assertTrue(out[1].startswith(str(self.venv)), out[1])
        listed = run([self.python, "-m", "pip", "show", "prepflow"], cwd=self.outside,
                     env=self.env).stdout
        self.assertIn(f"Version: {version}", listed)
        self.assertIn("Requires: numpy", listed)

    def test_the_install_leaves_the_tree_as_it_was(self):
        added = sorted(set(self.tree_files()) - set(self.files_before))
        self.assertEqual(added, [], "pip install left files in the source tree")

    def test_the_commands_are_installed(self):
        version = re.search(r"project\(prepflow VERSION ([0-9.]+)",
                            (SOURCE / "CMakeLists.txt").read_text()).group(1)
        bin_dir = self.venv / "bin"
        for command in ([bin_dir / "prepflow", "--version"],
                        [self.python, "-m", "prepflow", "--version"],
                        [bin_dir / "prepflow-worker", "--version"],
                        [bin_dir / "prepflow-scheduler", "--version"]):
            with self.subTest(command=command[-2]):
                out = run(command, cwd=self.outside, env=self.env).stdout
                self.assertIn(version, out)
        listed = run([bin_dir / "prepflow", "ops"], cwd=self.outside, env=self.env).stdout
        self.assertIn("random_resized_crop", listed)

    def test_the_python_tests_pass_against_the_installed_package(self):
        for script in ("test_loader.py", "without_torch.py"):
            with self.subTest(script=script):
                run([self.python, SOURCE / "tests" / "python" / script], cwd=self.outside,
                    env=self.env)


if __name__ == "__main__":
    unittest.main()
