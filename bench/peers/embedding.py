#!/usr/bin/python3
"""The bench_embedding workload in PyTorch: EmbeddingBag(rows, 32, mode="sum",
sparse=True) + Linear(32, 1) + BCEWithLogitsLoss + torch.optim.SGD(lr=0.1),
batches of 4096 examples x 8 ids from Zipf(1.1) over the rows (ranks
scattered by rank * 2654435761 mod rows, as in bench/bench_embedding.cc).
Prints {"system": "pytorch", ..., "examples_per_sec", "lookups_per_sec"}.

Run it through bench/compare_embedding (OpenBLAS settings, 2 threads).
"""
import argparse
import json
import time

import numpy as np
import torch


def make_batches(rows, batch, ids, num_batches, zipf):
    ranks = np.arange(1, rows + 1, dtype=np.float64)
    cdf = np.cumsum(ranks ** -zipf)
    cdf /= cdf[-1]
    rng = np.random.default_rng(42)
    out = []
    for _ in range(num_batches):
        r = np.minimum(np.searchsorted(cdf, rng.random(batch * ids), side="right"), rows - 1)
        x = (r.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(rows)
        y = (rng.random(batch) >= 0.5).astype(np.float32)
        out.append((torch.from_numpy(x.astype(np.int64).reshape(batch, ids)),
                    torch.from_numpy(y.reshape(batch, 1))))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--ids", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a, _ = p.parse_known_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    batches = make_batches(a.rows, a.batch, a.ids, 16, 1.1)
    emb = torch.nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True)
    with torch.no_grad():
        s = 1.0 / a.dim ** 0.5
        emb.weight.uniform_(-s, s)
    lin = torch.nn.Linear(a.dim, 1)
    opt = torch.optim.SGD(list(emb.parameters()) + list(lin.parameters()), lr=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = [0]

    def step():
        x, y = batches[n[0] % len(batches)]
        n[0] += 1
        opt.zero_grad()
        loss = loss_fn(lin(emb(x)), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - t0
    eps = a.batch * a.steps / secs
    out = {"system": "pytorch", "torch": torch.__version__, "rows": a.rows, "dim": a.dim,
           "batch": a.batch, "threads": a.threads, "examples_per_sec": round(eps, 1),
           "lookups_per_sec": round(eps * a.ids, 1), "ms_per_step": round(1000 * secs / a.steps, 3)}
    print(json.dumps(out) if a.json else
          f"pytorch: {eps:.0f} examples/s ({1000 * secs / a.steps:.2f} ms/step)")


if __name__ == "__main__":
    main()
