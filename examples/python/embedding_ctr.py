#!/usr/bin/env python3
"""Click-through-rate prediction on sharded embedding tables, on a LocalCluster of node processes.

    PYTHONPATH=build/python python3 examples/python/embedding_ctr.py            # 2 nodes
    ... --local --json          # the in-process Session; the last JSON line holds "auc"

A synthetic click log (seeded): three sparse features with their own tables,
"user" (--rows rows), "item" (rows / 10) and "category" (rows / 100); each
example holds a bag of 1-3 user, 1-4 item and 1-2 category ids, Zipf
distributed. The click comes from a hidden logistic model: every id has a
hidden weight in [-1, 1) and the logit is a weighted sum of each bag's mean
weight. The model: one table per feature sharded over --shards shards (one
shard per node task), mean bag lookups, concatenated, a ReLU layer and a
logit; logistic loss. The tables get sparse Adagrad updates in their shard
actors, the layers dense Adam. AUC on a held-out set should pass 0.7.
"""

import argparse
import json
import sys
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np

SCALES = {"user": 1.5, "item": 2.0, "category": 1.5}
BAGS = {"user": 3, "item": 4, "category": 2}


class ClickLog:
    """The synthetic log: Zipf ids, hidden weights per id, clicks from a logistic model."""

    def __init__(self, rows, zipf, seed):
        self.rows = {"user": rows, "item": max(10, rows // 10), "category": max(10, rows // 100)}
        self.cdf = {}
        self.hidden = {}
        rng = np.random.default_rng(seed)
        for name, n in self.rows.items():
            p = (np.arange(n) + 1.0) ** -zipf
            self.cdf[name] = np.cumsum(p / p.sum())
            self.hidden[name] = rng.uniform(-1, 1, size=n).astype(np.float32)
            self.hidden[name] = self.hidden[name][rng.permutation(n)]

    def batch(self, n, rng):
        """ids and offsets per table (bags), clicks [n, 1] and the noiseless logit."""
        out = {}
        logit = np.full(n, -0.3)
        for name in self.rows:
            sizes = rng.integers(1, BAGS[name] + 1, size=n)
            ids = np.searchsorted(self.cdf[name], rng.random(sizes.sum()))
            ids = np.minimum(ids, self.rows[name] - 1).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            out[name] = (ids, offsets)
            logit += SCALES[name] * np.add.reduceat(self.hidden[name][ids], offsets) / sizes
        clicks = (rng.random(n) < 1 / (1 + np.exp(-(logit + rng.normal(0, 0.3, n))))).astype(np.float32)
        return out, clicks.reshape(n, 1), logit


def auc(labels, scores):
    """The area under the ROC curve (rank statistic; ties get half credit)."""
    labels = np.asarray(labels).ravel()
    order = np.argsort(scores.ravel(), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    s = scores.ravel()
    for v in np.unique(s):  # average ranks of ties
        m = s == v
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def build(log, dim, shards, hidden, lr, tasks):
    g = sf.Graph()
    feeds = {}
    with g.as_default():
        bags, tables = [], []
        for k, (name, rows) in enumerate(log.rows.items()):
            table = sf.embedding.EmbeddingTable(name, rows=rows, dim=dim, num_shards=shards, seed=11 + k)
            ids = sf.placeholder(sf.int64, [None], name=f"{name}_ids")
            offsets = sf.placeholder(sf.int64, [None], name=f"{name}_offsets")
            feeds[name] = (ids, offsets)
            tables.append(table)
            bags.append(table.lookup_bag(ids, offsets, combiner="mean"))
        clicks = sf.placeholder(sf.float32, [None, 1], name="clicks")
        device = "/job:worker/task:0" if tasks else ""
        with g.device(device):
            x = sf.ops.concat(*bags, axis=1)
            w1 = sf.Variable(sf.random.truncated_normal([3 * dim, hidden], stddev=(2.0 / (3 * dim)) ** 0.5, seed=3),
                             name="w1")
            b1 = sf.Variable(np.zeros(hidden, np.float32), name="b1")
            w2 = sf.Variable(sf.random.truncated_normal([hidden, 1], stddev=(2.0 / hidden) ** 0.5, seed=4), name="w2")
            b2 = sf.Variable(np.zeros(1, np.float32), name="b2")
            logit = sf.nn.relu(x @ w1 + b1) @ w2 + b2
            # Logistic loss, stable: softplus(z) - y * z.
            loss = sf.ops.mean(sf.ops.softplus(logit) - clicks * logit)
        train_tables = sf.train.AdagradOptimizer(lr).minimize(loss, var_list=tables)
        train_dense = sf.train.AdamOptimizer(lr / 10).minimize(loss, var_list=[w1, b1, w2, b2])
        train = sf.group(train_tables, train_dense)
        prob = sf.ops.sigmoid(logit)
        init = sf.global_variables_initializer()
    return g, dict(feeds=feeds, clicks=clicks, loss=loss, train=train, prob=prob, init=init)


def feed_dict(m, batch, clicks=None):
    fd = {}
    for name, (ids, offsets) in batch.items():
        fd[m["feeds"][name][0]] = ids
        fd[m["feeds"][name][1]] = offsets
    if clicks is not None:
        fd[m["clicks"]] = clicks
    return fd


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100000, help="user table rows")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=2, help="node processes of the LocalCluster")
    p.add_argument("--local", action="store_true", help="train in the in-process Session instead")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    log = ClickLog(args.rows, args.zipf, args.seed)
    rng_train, rng_test = np.random.default_rng(args.seed + 1), np.random.default_rng(args.seed + 2)
    test, test_clicks, test_logit = log.batch(5000, rng_test)
    g, m = build(log, args.dim, args.shards, args.hidden, args.lr, tasks=not args.local)
    cluster = None
    if args.local:
        sess = sf.Session(g, num_cpu_devices=args.shards)
    else:
        cluster = sf.LocalCluster(nodes=args.nodes)
        sess = sf.ClusterSession(g, cluster=cluster)
    try:
        sess.run(m["init"])
        train_secs = 0.0
        last = {}
        for step in range(1, args.steps + 1):
            batch, clicks, _ = log.batch(args.batch, rng_train)
            fd = feed_dict(m, batch, clicks)
            t0 = time.perf_counter()
            loss, _ = sess.run([m["loss"], m["train"]], fd)
            train_secs += time.perf_counter() - t0
            if step % args.eval_every == 0 or step == args.steps:
                prob = sess.run(m["prob"], feed_dict(m, test))
                last = {"step": step, "loss": float(loss), "auc": auc(test_clicks, prob),
                        "examples_per_sec": step * args.batch / train_secs}
                if args.json:
                    print(json.dumps(last), flush=True)
                else:
                    print(f"step {step}: loss {last['loss']:.4f}, test AUC {last['auc']:.4f}, "
                          f"{last['examples_per_sec']:.0f} examples/s")
    finally:
        sess.close()
        if cluster is not None:
            cluster.close()
    summary = {"auc": last["auc"], "oracle_auc": auc(test_clicks, test_logit), "final_loss": last["loss"],
               "examples_per_sec": last["examples_per_sec"], "steps": args.steps, "batch": args.batch,
               "rows": args.rows, "shards": args.shards, "nodes": 0 if args.local else args.nodes,
               "mode": "local" if args.local else "cluster", "wall_secs": time.perf_counter() - t_start}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"test AUC {summary['auc']:.4f} (the hidden model's: {summary['oracle_auc']:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
