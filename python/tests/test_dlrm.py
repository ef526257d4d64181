"""examples/dlrm/dlrm.py on a small synthetic Criteo-format log: it learns (held-out AUC well above
chance) and matches build/bin/dlrm's AUC on the same files within noise."""

import json
import os
import subprocess
import sys

SRC = os.environ.get("SF_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def last_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


def test_dlrm_py_learns_like_the_cpp_program(tmp_path, bin_dir):
    data = tmp_path / "criteo"
    last_json([os.path.join(bin_dir, "criteo_synth"), "--lines", "30000", "--files", "3", "--max-cardinality", "10000",
               "--out", str(data), "--json"])
    py = last_json([sys.executable, os.path.join(SRC, "examples/dlrm/dlrm.py"), "--data", str(data), "--json",
                    "--batch", "256"])
    cpp = last_json([os.path.join(bin_dir, "dlrm"), "--data", str(data), "--json", "--batch", "256"])
    assert py["examples"] == cpp["examples"] == 20000
    assert py["test_examples"] == cpp["test_examples"] == 10000
    assert py["auc"] > 0.65
    assert abs(py["auc"] - cpp["auc"]) < 0.03
