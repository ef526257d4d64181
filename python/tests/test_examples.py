"""The Python examples and benchmarks on small settings, and the generated stubs."""

import json
import os
import subprocess
import sys

import pytest

import shardflow as sf

SRC = os.environ.get("SF_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_json(script, *args, timeout=600):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, os.path.join(SRC, script), "--json", *args], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stdout
    return lines


def test_fashion_mnist_small(tmp_path):
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.fail("the dataset-fashion-mnist package is not installed (scripts/setup installs it)")
    lines = run_json("examples/python/fashion_mnist.py", "--epochs", "2", "--limit", "3000", "--run-dir", str(tmp_path))
    summary = lines[-1]
    assert summary["test_accuracy"] > 0.6
    assert lines[1]["train_loss"] < lines[0]["train_loss"]
    assert (tmp_path / "metrics.csv").exists()


def test_tf1_examples_small_run_with_only_the_import_changed():
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.fail("the dataset-fashion-mnist package is not installed (scripts/setup installs it)")
    softmax = run_json("examples/python/tf1/softmax_fashion_mnist.py", "--max_steps", "800")[-1]
    assert softmax["example"] == "softmax_fashion_mnist" and softmax["test_accuracy"] > 0.72
    cnn = run_json("examples/python/tf1/cnn_layers_fashion_mnist.py", "--max_steps", "150", "--limit", "4000",
                   "--test_limit", "2000")[-1]
    assert cnn["example"] == "cnn_layers_fashion_mnist" and cnn["test_accuracy"] > 0.7
    lstm = run_json("examples/python/tf1/lstm_fashion_mnist.py", "--max_steps", "60", "--test_limit", "2000")[-1]
    assert lstm["example"] == "lstm_fashion_mnist" and lstm["test_accuracy"] > 0.6


@pytest.mark.parametrize("loss", ["nce", "sampled_softmax"])
def test_tf1_word2vec_example_learns_its_topics(loss):
    w2v = run_json("examples/python/tf1/word2vec_nce.py", "--max_steps", "6000", "--loss", loss)[-1]
    assert w2v["loss"] == loss and w2v["topic_neighbour_rate"] > 0.5  # chance: 1/40


def test_embedding_ctr_small_on_a_local_cluster():
    summary = run_json("examples/python/embedding_ctr.py", "--rows", "2000", "--steps", "200", "--eval-every", "100")[-1]
    assert summary["mode"] == "cluster" and summary["nodes"] == 2
    assert summary["auc"] > 0.6


def test_custom_async_small():
    summary = run_json("examples/python/custom_async.py", "--workers", "3", "--steps", "40")[-1]
    assert summary["final_loss"] < summary["initial_loss"]
    assert summary["staleness_max"] <= 3 * summary["workers"]
    assert summary["updates"] == 120


def test_benchmarks_small():
    mlp = run_json("bench/python/mlp_step.py", "--steps", "10", "--warmup", "2", "--rounds", "1")[-1]
    assert mlp["python_steps_per_sec"] > 0 and mlp["cpp_steps_per_sec"] > 0
    assert mlp["python_callable_steps_per_sec"] > 0 and mlp["callable_ratio"] > 0
    ff = run_json("bench/python/feed_fetch.py", "--mib", "4", "--reps", "3")[-1]
    assert ff["feed_ms"] >= 0 and ff["fetch_ms"] >= 0


def test_stubs_cover_every_op():
    path = os.path.join(os.path.dirname(sf.__file__), "ops.pyi")
    text = open(path).read()
    for pyname in sf.ops.OP_NAMES:
        assert f"def {pyname}(" in text
    assert "def mat_mul(a: TensorLike, b: TensorLike, *, transpose_a: bool = ..., transpose_b: bool = ..." in text


def test_readme_python_example_runs():
    # The README's Python program, as a newcomer copies it.
    text = open(os.path.join(SRC, "README.md")).read()
    start = text.index("```python\n") + len("```python\n")
    code = text[start:text.index("```", start)]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert abs(float(out.stdout.split()[-1]) - 2.302585) < 1e-3  # ln(10): zero inputs, untrained
