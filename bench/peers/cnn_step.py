#!/usr/bin/python3
"""The bench_cnn_step workload in PyTorch: the Fashion-MNIST CNN
(conv5x5x32-pool-conv5x5x64-pool-fc1024-fc10, SAME padding, 2x2 max pools),
SGD with momentum, batch 64, random inputs. JSON lines with --json: one per
timed round, then the summary (the last line) with steps_per_sec (the median
round) and cpu_ms_per_step, as bench_cnn_step prints.

Run it with Debian's python3-torch and OpenBLAS (see bench/compare_cnn_step);
PyTorch's convolutions go through its own bundled oneDNN (mkldnn).
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: torch.autocast on the CPU (bf16 matmuls and convolutions)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(7 * 7 * 64, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    rounds = []
    cpu0 = time.process_time()  # CPU seconds of every thread of the process
    for r in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sps = a.steps / (time.perf_counter() - t0)
        rounds.append(sps)
        if a.json:
            print(json.dumps({"system": "pytorch", "round": r, "steps_per_sec": round(sps, 2)}))
    cpu_ms_per_step = 1000.0 * (time.process_time() - cpu0) / (a.steps * a.rounds)
    s = sorted(rounds)
    median = s[len(s) // 2]
    out = {"system": "pytorch", "torch": torch.__version__, "model": "cnn", "precision": a.precision,
           "batch": a.batch, "steps": a.steps * a.rounds, "threads": a.threads,
           "cpu_ms_per_step": round(cpu_ms_per_step, 2), "min_steps_per_sec": round(s[0], 2), "max_steps_per_sec": round(s[-1], 2),
           "steps_per_sec": round(median, 2)}
    print(json.dumps(out) if a.json else f"pytorch cnn batch {a.batch}: {median:.1f} steps/s")


if __name__ == "__main__":
    main()
