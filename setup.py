"""Builds shardflow's Python package with the project's CMake build: `pip install --no-build-isolation .`

pip runs this with the interpreter it installs into (a venv's included). CMake
configures a build tree for that interpreter (-DSF_PYTHON_EXECUTABLE) and builds
the target sf_python: the C++ module _core, the Python files, the type stubs and
the `shardflow` program. The wheel holds the package and, as bin/shardflow in the
environment, the program (sf.LocalCluster starts its nodes with it). It works
offline with Debian's setuptools, wheel, pybind11 and NumPy (scripts/setup
installs them; a venv sees them when made with --system-site-packages).

Environment:
  SF_BUILD_DIR=DIR  the CMake build tree to use, and keep: configured for this interpreter
                    when DIR has none yet; an existing one is built as it is configured
                    and must hold a module for this interpreter (this refuses it otherwise).
                    Default: a fresh temporary tree, removed afterwards (minutes on 2 cores).
  SF_SKIP_CMAKE=1   with SF_BUILD_DIR: install the package DIR already holds (build/ after
                    scripts/build, say), without running CMake.
  SF_JOBS=N         parallel compile jobs (default 2).
  SF_CMAKE_ARGS=... more arguments for the configure step, as scripts/build takes them.
"""

import atexit
import glob
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _say(msg):
    print(f"shardflow setup.py: {msg}", file=sys.stderr, flush=True)


def _fail(msg):
    raise SystemExit(f"shardflow setup.py: {msg}")


def _temp_dir(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


def _built_for(pkg):
    """What the build tree's _build_info.py says the package was built for, or None."""
    info = {}
    try:
        with open(os.path.join(pkg, "_build_info.py")) as f:
            exec(f.read(), info)  # noqa: S102 - a file CMake wrote: two string constants
    except OSError:
        return None
    return f"{info.get('PYTHON')} (Python {info.get('PYTHON_VERSION')})"


class CMakePackage(Extension):
    """shardflow._core, which CMake builds (setuptools compiles nothing)."""

    def __init__(self):
        super().__init__("shardflow._core", sources=[])


class BuildWithCMake(build_ext):
    """build_ext that runs CMake and takes the package (and the `shardflow` program) from its tree."""

    def run(self):
        if self.inplace:
            _fail("editable installs are not supported: after scripts/build, use PYTHONPATH=build/python")
        build_dir = os.environ.get("SF_BUILD_DIR", "")
        skip = os.environ.get("SF_SKIP_CMAKE", "") not in ("", "0")
        if skip and not build_dir:
            _fail("SF_SKIP_CMAKE=1 needs SF_BUILD_DIR, the build tree whose package to install")
        build_dir = os.path.abspath(build_dir) if build_dir else _temp_dir("shardflow-cmake-")
        if not skip:
            self._cmake(build_dir)
        self._collect(build_dir)

    def _cmake(self, build_dir):
        try:
            import numpy  # noqa: F401
            import pybind11  # noqa: F401
        except ImportError as e:
            _fail(f"building shardflow for {sys.executable} needs NumPy and pybind11 there ({e}): "
                  "apt-get install python3-numpy python3-pybind11 (scripts/setup), and make a venv with "
                  "--system-site-packages to see them")
        if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
            _say(f"configuring {build_dir} for {sys.executable}")
            self._call(["cmake", "-S", HERE, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        f"-DSF_PYTHON_EXECUTABLE={sys.executable}"] + shlex.split(os.environ.get("SF_CMAKE_ARGS", "")))
        jobs = os.environ.get("SF_JOBS", "2")
        _say(f"building the Python package in {build_dir} with {jobs} jobs (pip install -v shows the progress)")
        self._call(["cmake", "--build", build_dir, "--target", "sf_python", "-j", jobs],
                   f"CMake could not build the target sf_python in {build_dir}: see the lines above (when "
                   "CMake's configure says 'shardflow: Python package SKIPPED', the interpreter it was "
                   "configured for lacks pybind11 or NumPy)")

    @staticmethod
    def _call(cmd, what=None):
        _say(" ".join(shlex.quote(c) for c in cmd))
        try:
            subprocess.run(cmd, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            _fail(what or f"{cmd[0]} failed: {e}")

    def _collect(self, build_dir):
        pkg = os.path.join(build_dir, "python", "shardflow")
        core = "_core" + sysconfig.get_config_var("EXT_SUFFIX")
        if not os.path.isfile(os.path.join(pkg, core)):
            here = f"{sys.executable} (Python {sys.version_info.major}.{sys.version_info.minor})"
            found = [os.path.basename(p) for p in glob.glob(os.path.join(pkg, "_core*.so"))]
            why = (f"its module ({', '.join(found)}) was built for {_built_for(pkg)}" if found else
                   "it has no Python package (see CMake's 'shardflow: Python package' line)")
            _fail(f"{build_dir} holds no {core} for {here}: {why}. Give another SF_BUILD_DIR, or none "
                  "(a temporary build for this interpreter)")
        dest = os.path.join(self.build_lib, "shardflow")
        os.makedirs(dest, exist_ok=True)
        for name in sorted(os.listdir(pkg)):
            src = os.path.join(pkg, name)
            if not os.path.isfile(src) or (name.startswith("_core") and name != core):
                continue  # __pycache__, modules for other interpreters
            shutil.copy2(src, os.path.join(dest, name))
        program = os.path.join(build_dir, "bin", "shardflow")
        if os.path.isfile(program):
            self.distribution.data_files = [("bin", [program])]
        else:
            _say(f"{program} is not built: sf.LocalCluster will need SF_BIN_DIR or `shardflow` on PATH")


# pip builds a wheel, with the `wheel` package (setuptools before 70.1 has no bdist_wheel of its own).
if importlib.util.find_spec("wheel") is None and importlib.util.find_spec("setuptools.command.bdist_wheel") is None:
    _fail(f"{sys.executable} lacks the `wheel` package that building shardflow offline needs: apt-get install "
          "python3-wheel python3-numpy python3-pybind11 (scripts/setup), and make a venv with "
          "--system-site-packages to see them")

# setuptools' own build and egg-info folders go to a temporary folder: build/ is CMake's.
_SETUPTOOLS_DIR = _temp_dir("shardflow-setuptools-")

setup(
    ext_modules=[CMakePackage()],
    cmdclass={"build_ext": BuildWithCMake},
    options={"build": {"build_base": _SETUPTOOLS_DIR}, "egg_info": {"egg_base": _SETUPTOOLS_DIR}},
)
