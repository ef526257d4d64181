"""Shared fixtures: a fresh graph per test, the build's bin/ directory."""

import os

import pytest

import shardflow as sf


@pytest.fixture
def g():
    graph = sf.Graph()
    with graph.as_default():
        yield graph


@pytest.fixture(scope="session")
def bin_dir():
    d = os.environ.get("SF_BIN_DIR")
    if not d:
        d = os.path.join(os.path.dirname(os.path.dirname(sf.__file__)), "..", "bin")
    d = os.path.abspath(d)
    if not os.path.isfile(os.path.join(d, "shardflow")):
        pytest.fail(f"the shardflow program is not built in {d}")
    return d
