#!/usr/bin/env python3
"""Training steps per second of the Fashion-MNIST MLP driven from Python, beside bench_mlp_step (C++).

    PYTHONPATH=build/python python3 bench/python/mlp_step.py --json

The same model and step as bench/bench_mlp_step.cc (784-512-256-10, SGD with
momentum, a learning-rate placeholder, random inputs, batch 128, 20 warm-up
and 600 timed steps: with 300 the ratio moved 0.87-1.05 between runs on this
shared machine), built and run through `import shardflow`, once with
Session.run and once with a function from Session.make_callable (the feeds
and fetches resolved once). The three run alternately, --rounds times each,
so all see the same machine; each reports its median. With --json the last
line is {"python_steps_per_sec" (run), "cpp_steps_per_sec", "ratio" (run over
C++), "python_callable_steps_per_sec", "callable_ratio", ...}.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np


def build():
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None, 784], name="x")
        labels = sf.placeholder(sf.int32, [None], name="labels")
        lr = sf.placeholder(sf.float32, [], name="lr")
        h = x
        for i, (fi, fo) in enumerate([(784, 512), (512, 256), (256, 10)]):
            with sf.name_scope(f"fc{i + 1}"):
                w = sf.Variable(sf.random.truncated_normal([fi, fo], stddev=math.sqrt(2.0 / fi), seed=1 + i), name="w")
                b = sf.Variable(np.zeros(fo, np.float32), name="b")
                h = sf.nn.bias_add(h @ w, b)
                if i < 2:
                    h = sf.nn.relu(h)
        loss = sf.ops.mean(sf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))
        train = sf.train.MomentumOptimizer(lr, 0.9).minimize(loss)
        init = sf.global_variables_initializer()
    return g, x, labels, lr, loss, train, init


def python_round(batch, steps, warmup, threads, use_callable):
    g, x, labels, lr, loss, train, init = build()
    rng = np.random.default_rng(1)
    xb = rng.random((batch, 784), dtype=np.float32)
    yb = rng.integers(0, 10, batch).astype(np.int32)
    lrv = np.float32(0.05)
    with sf.Session(g, compute_threads=threads) as s:
        s.run(init)
        if use_callable:
            step = s.make_callable([loss, train], [x, labels, lr])
            args = (xb, yb, lrv)
        else:
            feeds = {x: xb, labels: yb, lr: lrv}
            fetches = [loss, train]

            def step():
                return s.run(fetches, feeds)
            args = ()
        for _ in range(warmup):
            step(*args)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*args)
        return steps / (time.perf_counter() - t0)


def cpp_round(binary, batch, steps, warmup, threads):
    out = subprocess.run([binary, "--json", "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
                          "--threads", str(threads)], check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])["steps_per_sec"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="compute threads (0: one per core)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    sf.keep_tensor_memory_warm()  # as bench_mlp_step does (shardflow/tensor.h)
    binary = os.path.join(os.environ.get("SF_BIN_DIR") or
                          os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(sf.__file__))), "..", "bin"),
                          "bench_mlp_step")
    py, pc, cpp = [], [], []
    for r in range(args.rounds):
        cpp.append(cpp_round(binary, args.batch, args.steps, args.warmup, args.threads))
        py.append(python_round(args.batch, args.steps, args.warmup, args.threads, use_callable=False))
        pc.append(python_round(args.batch, args.steps, args.warmup, args.threads, use_callable=True))
        if args.json:
            print(json.dumps({"round": r, "python_steps_per_sec": py[-1], "cpp_steps_per_sec": cpp[-1],
                              "python_callable_steps_per_sec": pc[-1]}), flush=True)
    ps, pcs, cs = statistics.median(py), statistics.median(pc), statistics.median(cpp)
    summary = {"model": "mlp", "batch": args.batch, "steps": args.steps, "rounds": args.rounds,
               "python_steps_per_sec": ps, "cpp_steps_per_sec": cs, "ratio": ps / cs,
               "python_callable_steps_per_sec": pcs, "callable_ratio": pcs / cs}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"MLP batch {args.batch}: C++ {cs:.1f} steps/s; Python run() {ps:.1f} steps/s, ratio {ps / cs:.3f}; "
              f"make_callable {pcs:.1f} steps/s, ratio {pcs / cs:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
