#!/usr/bin/python3
"""The bench_dlrm workload in PyTorch, as the reference DLRM
(facebookresearch/dlrm) builds it: bottom MLP 13-512-256-64-16, 26
nn.EmbeddingBag tables of width 16 (mode "sum", sparse=True), dot interaction
(bmm of the 27 vectors, the lower triangle gathered), top MLP 367-512-256-1,
BCEWithLogitsLoss; Adagrad on the tables (sparse gradients), Adam on the MLPs, as shardflow's
(--table-optimizer sgd, --mlp-optimizer sgd: the reference DLRM's plain SGD).

It reads the same Criteo-format files (--data DIR: its files, sorted; plain or
gzip) into tensors first, untimed: labels, log(1 + max(x, 0)) of the integer
fields (missing = 0), and each categorical value as int(hex, 16) modulo the
field's table size (Criteo Kaggle's cardinality capped by --max-cardinality,
as the generator draws them; missing = row 0). Then it trains from those
tensors in memory: a phase at --batch-large (2048) and one at --batch (512),
each with fresh weights. Prints one JSON line per phase, the last (batch 512)
the summary: {"system": "pytorch", "batch", "steps", "examples_per_sec", ...}.

Run it through bench/compare_dlrm (OpenBLAS settings, 2 threads).
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch

KAGGLE_CARDINALITY = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                      27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def read_files(data, max_lines, rows):
    files = sorted(os.path.join(data, f) for f in os.listdir(data)
                   if not f.startswith(".") and os.path.isfile(os.path.join(data, f)))
    if not files:
        raise SystemExit(f"dlrm.py: {data} holds no file")
    labels, dense, cat = [], [], []
    for path in files:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) != 40:
                    continue
                labels.append(float(fields[0]))
                dense.append([math.log1p(max(int(x), 0)) if x else 0.0 for x in fields[1:14]])
                cat.append([int(x, 16) % rows[j] if x else 0 for j, x in enumerate(fields[14:40])])
                if len(labels) >= max_lines:
                    break
        if len(labels) >= max_lines:
            break
    return (torch.tensor(labels, dtype=torch.float32), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(cat, dtype=torch.int64))


def mlp(sizes, last_linear):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if not (last_linear and i == len(sizes) - 2):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, rows, dim=16):
        super().__init__()
        self.bottom = mlp([13, 512, 256, 64, dim], last_linear=False)
        self.tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(n, dim, mode="sum", sparse=True) for n in rows)
        for t in self.tables:
            torch.nn.init.uniform_(t.weight, -0.05, 0.05)
        f = len(rows) + 1
        self.li, self.lj = torch.tril_indices(f, f, offset=-1)
        self.top = mlp([dim + f * (f - 1) // 2, 512, 256, 1], last_linear=True)

    def forward(self, dense, cat):
        x = self.bottom(dense)
        ly = [t(cat[:, j:j + 1]) for j, t in enumerate(self.tables)]
        t = torch.cat([x] + ly, dim=1).view(x.shape[0], -1, x.shape[1])
        z = torch.bmm(t, t.transpose(1, 2))
        r = torch.cat([x, z[:, self.li, self.lj]], dim=1)
        return self.top(r).squeeze(1)


def phase(batch, steps, warmup, data, rows, table_lr, mlp_lr, table_opt, mlp_opt):
    torch.manual_seed(1)
    model = DLRM(rows)
    sparse = list(model.tables.parameters())
    dense = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    opts = [torch.optim.Adagrad(sparse, lr=table_lr) if table_opt == "adagrad" else torch.optim.SGD(sparse, lr=table_lr),
            torch.optim.Adam(dense, lr=mlp_lr) if mlp_opt == "adam" else torch.optim.SGD(dense, lr=mlp_lr)]
    loss_fn = torch.nn.BCEWithLogitsLoss()
    labels, dense_x, cat = data
    n = labels.shape[0] // batch
    batches = [(labels[i * batch:(i + 1) * batch], dense_x[i * batch:(i + 1) * batch], cat[i * batch:(i + 1) * batch])
               for i in range(n)]

    def step(i):
        y, d, c = batches[i % n]
        for o in opts:
            o.zero_grad()
        loss = loss_fn(model(d, c), y)
        loss.backward()
        for o in opts:
            o.step()
        return loss

    for i in range(warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    secs = time.perf_counter() - t0
    return steps * batch / secs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--max-cardinality", type=int, default=1000000)
    p.add_argument("--lines", type=int, default=200000, help="lines read into memory (batches cycle over them)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--batch-large", type=int, default=2048)
    p.add_argument("--examples", type=int, default=400000, help="timed examples per phase")
    p.add_argument("--warmup-examples", type=int, default=100000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--table-lr", type=float, default=0.05)
    p.add_argument("--mlp-lr", type=float, default=0.001)
    p.add_argument("--table-optimizer", choices=["adagrad", "sgd"], default="adagrad")
    p.add_argument("--mlp-optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = [min(c, a.max_cardinality) if a.max_cardinality > 0 else c for c in KAGGLE_CARDINALITY]
    t0 = time.perf_counter()
    data = read_files(a.data, a.lines, rows)
    read_secs = time.perf_counter() - t0
    if data[0].shape[0] < max(a.batch, a.batch_large):
        raise SystemExit(f"dlrm.py: {a.data} holds fewer lines than a batch")
    for batch in ([a.batch_large] if a.batch_large > 0 else []) + [a.batch]:
        steps = max(10, a.examples // batch)
        eps = phase(batch, steps, a.warmup_examples // batch, data, rows, a.table_lr, a.mlp_lr, a.table_optimizer,
                    a.mlp_optimizer)
        out = {"system": "pytorch", "torch": torch.__version__, "batch": batch, "steps": steps,
               "threads": a.threads, "examples_per_sec": round(eps, 1), "table_optimizer": a.table_optimizer,
               "mlp_optimizer": a.mlp_optimizer, "lines_in_memory": int(data[0].shape[0]),
               "read_secs": round(read_secs, 2)}
        print(json.dumps(out) if a.json else f"pytorch batch {batch}: {eps:.0f} examples/s", flush=True)


if __name__ == "__main__":
    main()
