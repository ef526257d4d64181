#!/usr/bin/env python3
"""A user-written asynchronous algorithm: bounded-staleness SGD from Python threads.

    PYTHONPATH=build/python python3 examples/python/custom_async.py --workers 4 --staleness 2

N worker threads train one logistic-regression model whose variable lives in
a shard actor. Each worker step, written here with the ops the registry
exports (no special Python support):
  1. stale_sync_wait(handle, clock): waits, as a pending reply in the shard
     actor, while this worker is more than --staleness clocks ahead of the
     slowest (a bounded-staleness barrier; no thread sleeps);
  2. read_variable_with_version(handle): the weights and their version;
  3. the gradient of the loss on the worker's batch at those weights;
  4. apply_gradient_async(handle, lr, grad, version): applied on arrival in
     the shard, which records the staleness (version now - version read).
The GIL is released while a step runs, so the threads' steps overlap.
--json prints one line per worker and a summary last: {"final_loss",
"accuracy", "staleness_mean", "staleness_max", "steps_per_sec"}.
"""

import argparse
import json
import sys
import threading
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np


def data(n, d, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((d, 1)).astype(np.float32)
    y = (x @ w > 0).astype(np.float32)
    flip = rng.random((n, 1)) < 0.05
    return x, np.where(flip, 1 - y, y).astype(np.float32)


def build(d, workers, staleness, lr):
    g = sf.Graph()
    with g.as_default():
        w = sf.Variable(np.zeros((d, 1), np.float32), name="w")
        x = sf.placeholder(sf.float32, [None, d], name="x")
        y = sf.placeholder(sf.float32, [None, 1], name="y")
        clock = sf.placeholder(sf.int64, [], name="clock")
        lr_t = sf.constant(lr, sf.float32)
        steps = []
        for r in range(workers):
            with g.name_scope(f"worker{r}"):
                wait = sf.ops.stale_sync_wait(w.handle, clock, worker=r, num_workers=workers, staleness=staleness)
                with g.control_dependencies([wait]):
                    value, version = sf.ops.read_variable_with_version(w.handle, dtype=sf.float32)
                logit = x @ value
                loss = sf.ops.mean(sf.ops.softplus(logit) - y * logit)
                (grad,) = sf.gradients(loss, [value])
                apply = sf.ops.apply_gradient_async(w.handle, lr_t, grad, version, optimizer="GradientDescent")
                steps.append(sf.group(apply, name="step"))
        logit = x @ w
        loss = sf.ops.mean(sf.ops.softplus(logit) - y * logit)
        accuracy = sf.ops.mean(sf.ops.cast(sf.ops.equal(sf.ops.greater(logit, 0.0), sf.ops.greater(y, 0.5)),
                                           DstT=sf.float32))
        stats = sf.ops.staleness_stats(w.handle)
        init = sf.global_variables_initializer()
    return g, dict(x=x, y=y, clock=clock, steps=steps, loss=loss, accuracy=accuracy, stats=stats, init=init)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=150, help="steps per worker")
    p.add_argument("--staleness", type=int, default=2, help="clocks a worker may run ahead of the slowest")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    xs, ys = data(4096, args.dim, args.seed)
    g, m = build(args.dim, args.workers, args.staleness, args.lr)
    errors = []
    with sf.Session(g) as sess:
        sess.run(m["init"])
        first = float(sess.run(m["loss"], {m["x"]: xs, m["y"]: ys}))

        def worker(r):
            rng = np.random.default_rng((args.seed, r))
            try:
                for k in range(args.steps):
                    idx = rng.integers(0, len(xs), args.batch)
                    sess.run(m["steps"][r], {m["x"]: xs[idx], m["y"]: ys[idx], m["clock"]: k})
            except sf.errors.OpError as e:
                errors.append(e)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(r,)) for r in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        secs = time.perf_counter() - t0
        if errors:
            raise errors[0]
        loss, acc, stats = sess.run([m["loss"], m["accuracy"], m["stats"]], {m["x"]: xs, m["y"]: ys})
    summary = {"workers": args.workers, "staleness": args.staleness, "initial_loss": first,
               "final_loss": float(loss), "accuracy": float(acc), "updates": int(stats[0]),
               "staleness_mean": float(stats[1]), "staleness_max": float(stats[2]),
               "steps_per_sec": args.workers * args.steps / secs}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"{args.workers} workers x {args.steps} steps, staleness bound {args.staleness}: loss "
              f"{first:.4f} -> {summary['final_loss']:.4f}, accuracy {summary['accuracy']:.3f}, "
              f"staleness mean {summary['staleness_mean']:.2f} max {summary['staleness_max']:.0f}, "
              f"{summary['steps_per_sec']:.0f} steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
