#!/usr/bin/env python3
"""DLRM on Criteo-format click logs from Python, the model of build/bin/dlrm (examples/dlrm/main.cc).

    build/bin/criteo_synth --lines 300000 --files 5 --max-cardinality 200000 --out /tmp/criteo
    PYTHONPATH=build/python python3 examples/dlrm/dlrm.py --data /tmp/criteo --json

--data DIR: DIR/train and DIR/test when both exist, else DIR's files sorted by name with the last
--test-files held out. The files are read and parsed in the graph (sf.ops.criteo_reader: reader
threads parsing ahead), each training run taking one batch, until the input ends. The model:
bottom MLP 13-512-256-64-16, the 26 field tables as one hash embedding table of width 16 (the
reader hashes each value with its field, so the fields' keys never meet), sf.ops.dot_interaction,
top MLP 367-512-256-1, logistic loss; Adagrad on the table, Adam on the MLPs, with one backward
pass for both (Optimizer.set_sparse_optimizer, as the C++ program's Optimizer::SetSparseOptimizer). The last JSON line: {"steps", "examples",
"examples_per_sec", "auc", "logloss", "test_examples", "final_loss"}.
"""

import argparse
import json
import os
import sys
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np


def files_of(data, test_files):
    def listing(d):
        return sorted(os.path.join(d, f) for f in os.listdir(d)
                      if not f.startswith(".") and os.path.isfile(os.path.join(d, f)))
    if not os.path.isdir(data):
        sys.exit(f"dlrm.py: cannot list the data directory '{data}'")
    if os.path.isdir(os.path.join(data, "train")) and os.path.isdir(os.path.join(data, "test")):
        return listing(os.path.join(data, "train")), listing(os.path.join(data, "test"))
    files = listing(data)
    if len(files) <= test_files:
        sys.exit(f"dlrm.py: --data {data} holds {len(files)} file(s): it needs more than --test-files {test_files}")
    return files[:-test_files], files[-test_files:]


def auc(labels, scores):
    """The area under the ROC curve (rank statistic; ties get half credit)."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order] > 0.5
    ranks = np.arange(1, len(s) + 1, dtype=np.float64)
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    for f, c in zip(first, counts):  # average ranks of ties
        if c > 1:
            ranks[f:f + c] = ranks[f:f + c].mean()
    n_pos, n_neg = y.sum(), (~y).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def layers(prefix, sizes, seed):
    out = []
    for i in range(len(sizes) - 1):
        a = (6.0 / (sizes[i] + sizes[i + 1])) ** 0.5
        w = sf.Variable(sf.random.uniform([sizes[i], sizes[i + 1]], -a, a, seed=seed + i), name=f"{prefix}/{i}/w")
        b = sf.Variable(np.zeros(sizes[i + 1], np.float32), name=f"{prefix}/{i}/b")
        out.append((w, b))
    return out


def logits(table, bottom, top, dense, cat):
    x = dense
    for w, b in bottom:
        x = sf.ops.fused_mat_mul(x, w, b, activation="relu")
    z = sf.ops.dot_interaction(x, table.lookup(cat, combiner="none"))
    for i, (w, b) in enumerate(top):
        z = sf.ops.fused_mat_mul(z, w, b, activation="relu" if i + 1 < len(top) else "none")
    return sf.ops.reshape(z, [-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a directory of Criteo-format files")
    p.add_argument("--test-files", type=int, default=1)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--table-lr", type=float, default=0.05)
    p.add_argument("--mlp-lr", type=float, default=0.001)
    p.add_argument("--log-every", type=int, default=200)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    train_files, test_files = files_of(a.data, a.test_files)
    g = sf.Graph()
    with g.as_default():
        label, dense, cat, _ = sf.ops.criteo_reader(files="\n".join(train_files), batch_size=a.batch, num_threads=1,
                                                    num_epochs=a.epochs, name="train_reader")
        t_label, t_dense, t_cat, _ = sf.ops.criteo_reader(files="\n".join(test_files), batch_size=8192,
                                                          num_threads=1, name="test_reader")
        table = sf.embedding.HashEmbeddingTable("emb", 16, num_shards=a.shards, scale=0.05, seed=65)
        bottom = layers("bottom", [13, 512, 256, 64, 16], 72)
        top = layers("top", [16 + 27 * 26 // 2, 512, 256, 1], 76)
        z = logits(table, bottom, top, dense, cat)
        loss = sf.ops.mean(sf.ops.softplus(z) - label * z)
        eval_z = logits(table.read_only_view(), bottom, top, t_dense, t_cat)
        mlp_vars = [v for layer in bottom + top for v in layer]
        # One backward pass: Adam hands the table's sparse updates to Adagrad.
        adam = sf.train.AdamOptimizer(a.mlp_lr).set_sparse_optimizer(sf.train.AdagradOptimizer(a.table_lr))
        train = adam.minimize(loss, var_list=[table] + mlp_vars)
        init = sf.global_variables_initializer()
    sess = sf.Session(g, num_cpu_devices=a.shards)
    try:
        sess.run(init)
        steps = examples = 0
        losses = []
        t0 = time.perf_counter()
        while True:
            try:
                n, l, _ = sess.run([label, loss, train])
            except sf.errors.OutOfRangeError:
                break
            steps += 1
            examples += len(n)
            losses.append(float(l))
            if steps % a.log_every == 0:
                line = {"step": steps, "loss": float(np.mean(losses[-a.log_every:])),
                        "examples_per_sec": examples / (time.perf_counter() - t0)}
                print(json.dumps(line) if a.json else f"step {steps}: loss {line['loss']:.4f}", flush=True)
        train_secs = time.perf_counter() - t0
        labels, scores = [], []
        while True:
            try:
                y, s = sess.run([t_label, eval_z])
            except sf.errors.OutOfRangeError:
                break
            labels.append(y)
            scores.append(s)
    finally:
        sess.close()
    if not labels:
        sys.exit("dlrm.py: the held-out data holds no example")
    y, s = np.concatenate(labels).astype(np.float64), np.concatenate(scores).astype(np.float64)
    logloss = float(np.mean(np.maximum(s, 0) + np.log1p(np.exp(-np.abs(s))) - y * s))
    summary = {"steps": steps, "examples": examples, "train_secs": train_secs,
               "examples_per_sec": examples / train_secs if train_secs > 0 else 0.0,
               "final_loss": float(np.mean(losses[-a.log_every:])) if losses else float("nan"),
               "auc": auc(y, s), "logloss": logloss, "test_examples": int(len(y))}
    if a.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"{steps} steps, {summary['examples_per_sec']:.0f} examples/s; held-out AUC {summary['auc']:.4f}, "
              f"log loss {logloss:.4f} on {len(y)} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
