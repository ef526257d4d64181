#!/usr/bin/env bash
# `pip install` of the repository into a fresh venv of the build's interpreter, offline,
# then the package used from outside the source tree without PYTHONPATH: import, a
# LocalCluster on the `shardflow` program the wheel put in the venv's bin/, and
# examples/python/fashion_mnist.py for one epoch. The venv sees Debian's NumPy,
# setuptools, wheel and pybind11 (--system-site-packages). setup.py takes the package
# BUILD_DIR already holds (SF_SKIP_CMAKE=1) instead of building it again for minutes;
# a plain `pip install .` runs the same CMake build as scripts/build in a fresh tree.
# Usage: pip_install_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 src=$2 py=$3
tmp=$(mktemp -d /tmp/sf-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH SF_BIN_DIR
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$py" -m venv --system-site-packages "$tmp/venv"
vpy=$tmp/venv/bin/python
cd "$tmp"  # outside the source tree: nothing is found there by accident
if ! SF_BUILD_DIR="$build" SF_SKIP_CMAKE=1 "$vpy" -m pip install --no-build-isolation --no-index --no-cache-dir \
       "$src" > "$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log"
  exit 1
fi

"$vpy" -c '
import os, sys, shardflow as sf
assert sf.__file__.startswith(sys.prefix + os.sep), (sf.__file__, sys.prefix)
assert sf.cluster.find_shardflow_binary() == os.path.join(sys.prefix, "bin", "shardflow")
g = sf.Graph()
with g.as_default():
    x = sf.placeholder(sf.float32, [None], name="x")
    y = x * 2.0
with sf.LocalCluster(nodes=1) as c, sf.ClusterSession(g, cluster=c) as s:
    assert s.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 4.0]
print("pip-installed package ok:", sf.__file__)
'

"$vpy" "$src/examples/python/fashion_mnist.py" --epochs 1 --json --run-dir "$tmp/run" > "$tmp/fashion.json"
"$vpy" -c '
import json, sys
summary = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert summary["test_accuracy"] > 0.75, summary
print("fashion_mnist.py, 1 epoch: test accuracy", summary["test_accuracy"])
' "$tmp/fashion.json"
echo "pip install test ok"
