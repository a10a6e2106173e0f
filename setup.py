"""Builds the prepflow Python package with the project's CMake.

pyproject.toml holds the metadata; this file only teaches setuptools to make
the `prepflow._prepflow` extension by configuring the C++ tree for the
Python that runs it (Python_EXECUTABLE) and building the `_prepflow` and
`prepflow_python_sources` and `prepflow_python_commands` targets, then
copying the assembled package (extension, pure-Python modules, _version.py,
and the commands in bin/ that the console scripts run) into the wheel.
setuptools' egg-info goes into the build folder, not the source tree.

Environment:
  PREPFLOW_PIP_BUILD_DIR      the CMake build folder (default: build/pip-<ABI>
                              in this tree; kept, so a second install is
                              incremental)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: every CPU)
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(prepflow VERSION ([0-9][0-9.]*)", text)
    if not match:
        sys.exit("setup.py: CMakeLists.txt names no project(prepflow VERSION ...)")
    return match.group(1)


def build_dir():
    abi = sysconfig.get_config_var("SOABI") or "py%d%d" % sys.version_info[:2]
    return pathlib.Path(os.environ.get("PREPFLOW_PIP_BUILD_DIR") or ROOT / "build" / f"pip-{abi}")


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = build_dir()
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPython_EXECUTABLE={sys.executable}"]
        # The generator is chosen once, when the folder is first configured.
        if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                          "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", str(build), "--target", "_prepflow",
                        "prepflow_python_sources", "prepflow_python_commands", "--parallel",
                        jobs], check=True)
        package = build / "python" / "prepflow"
        if not (package / "__init__.py").exists():
            sys.exit(f"setup.py: the build made no package in {package} (is python3-dev, "
                     "pybind11-dev and libdlpack-dev installed? scripts/setup.sh installs them)")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name)).parent
        dest.mkdir(parents=True, exist_ok=True)
        for f in package.iterdir():
            if f.is_file() and f.suffix in (".py", ".so"):
                shutil.copy2(f, dest / f.name)
        shutil.copytree(package / "bin", dest / "bin", dirs_exist_ok=True)  # the commands


# setuptools' metadata folder (prepflow.egg-info) goes beside the CMake
# build, not into the source tree.
EGG_BASE = build_dir() / "egg-info"
EGG_BASE.mkdir(parents=True, exist_ok=True)


setup(
    version=project_version(),
    ext_modules=[Extension("prepflow._prepflow", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"egg_info": {"egg_base": str(EGG_BASE)}},
    zip_safe=False,
)
