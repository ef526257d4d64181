#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses the installed copy only:
# a CMake program (find_package(shardflow)), a pkg-config program, and the
# Python package with the installed `shardflow` program (a LocalCluster).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR PYTHON PYTHON_INSTALL_DIR
set -euo pipefail
build=$1 src=$2 py=$3 pydir=$4
tmp=$(mktemp -d /tmp/sf-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
test -f "$prefix/include/shardflow/session.h"
test -x "$prefix/bin/shardflow"

# CMake package, built with only the prefix known (not the source or build tree).
cmake -S "$src/tests/install/consumer" -B "$tmp/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/configure.log"
ninja -C "$tmp/cmake" -j 1 > "$tmp/ninja.log"
"$tmp/cmake/consumer"

# pkg-config.
pc=$(find "$prefix" -name shardflow.pc)
export PKG_CONFIG_PATH=$(dirname "$pc")
g++ -O1 "$src/tests/install/consumer/main.cc" -o "$tmp/pc_consumer" $(pkg-config --cflags --libs shardflow)
"$tmp/pc_consumer"

# The Python package, from the installed copy, with the installed program on PATH.
cd "$tmp"
env -u SF_BIN_DIR PYTHONPATH="$prefix/$pydir" PATH="$prefix/bin:$PATH" "$py" -c '
import os, numpy as np, shardflow as sf
assert sf.__file__.startswith(os.environ["PYTHONPATH"]), sf.__file__
g = sf.Graph()
with g.as_default():
    x = sf.placeholder(sf.float32, [None], name="x")
    y = x * 2.0
with sf.LocalCluster(nodes=1) as c, sf.ClusterSession(g, cluster=c) as s:
    assert s.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 4.0]
print("python package ok:", sf.__file__)
'
echo "install test ok"
