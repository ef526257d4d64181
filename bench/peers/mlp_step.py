#!/usr/bin/python3
"""The bench_mlp_step workload in PyTorch: MLP 784-512-256-10, SGD with
momentum, batch 128, random inputs. Prints {"system": "pytorch", ..., "steps_per_sec"}.

Run it with Debian's python3-torch and OpenBLAS (see bench/compare_mlp_step):
the netlib reference BLAS is ~25x slower and not a fair peer.
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(a.batch, 784)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - t0
    sps = a.steps / secs
    out = {"system": "pytorch", "torch": torch.__version__, "batch": a.batch, "steps": a.steps,
           "threads": a.threads, "steps_per_sec": round(sps, 2)}
    print(json.dumps(out) if a.json else f"pytorch batch {a.batch}: {sps:.1f} steps/s")


if __name__ == "__main__":
    main()
