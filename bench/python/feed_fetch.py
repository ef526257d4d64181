#!/usr/bin/env python3
"""The cost of feeding and of fetching a 64 MiB float32 array through a Session, in milliseconds.

    PYTHONPATH=build/python python3 bench/python/feed_fetch.py --json

Feed: a step that feeds the big array to a placeholder and fetches only its
shape, minus the same step fed a 16-element array (so what remains is the
feed's own cost: the array is lent to the tensor, not copied). Fetch: a step
fetching a 64 MiB variable, minus one fetching a 16-element variable (the
array returned shares the variable's buffer). Medians of --reps steps.
"""

import argparse
import json
import statistics
import sys
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    n = args.mib * (1 << 20) // 4
    big = np.random.default_rng(0).random(n, dtype=np.float32)
    small = np.zeros(16, np.float32)
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None], name="x")
        shape = sf.ops.shape(x)
        vbig = sf.Variable(sf.ops.fill(np.array([n], np.int32), np.float32(1)), name="vbig")
        vsmall = sf.Variable(np.zeros(16, np.float32), name="vsmall")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        feed_big = median_ms(lambda: s.run(shape, {x: big}), args.reps)
        feed_small = median_ms(lambda: s.run(shape, {x: small}), args.reps)
        fetched = s.run(vbig)
        assert fetched.nbytes == big.nbytes
        fetch_big = median_ms(lambda: s.run(vbig), args.reps)
        fetch_small = median_ms(lambda: s.run(vsmall), args.reps)
    out = {"mib": args.mib, "feed_ms": max(0.0, feed_big - feed_small), "fetch_ms": max(0.0, fetch_big - fetch_small),
           "feed_step_ms": feed_big, "fetch_step_ms": fetch_big, "small_step_ms": feed_small}
    if args.json:
        print(json.dumps(out), flush=True)
    else:
        print(f"{args.mib} MiB float32: feed {out['feed_ms']:.3f} ms, fetch {out['fetch_ms']:.3f} ms "
              f"(steps: {feed_big:.3f} / {fetch_big:.3f} ms, a 16-element step {feed_small:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
