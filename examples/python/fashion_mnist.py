#!/usr/bin/env python3
"""Trains the Fashion-MNIST MLP (784-512-256-10) from Python, like build/bin/fashion_mnist.

    PYTHONPATH=build/python python3 examples/python/fashion_mnist.py --epochs 10
    ... --json          # one JSON line per epoch, the last holds test_accuracy

SGD with momentum 0.9 and a cosine learning-rate decay, batch 128, He-initialised
weights, a seeded shuffle per epoch; test accuracy after each epoch, a progress
bar, and metrics.csv plus curves.png (matplotlib, when installed) in the run folder.
The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

try:  # before NumPy: shardflow's own error names the Python its build is for
    import shardflow as sf
except ImportError as e:
    sys.exit(f"{e}" + ("" if e.name != "shardflow" else
                       " (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)"))
import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, images):
    """The array in a gzipped IDX file: uint8 [n, 784] images or [n] labels; ValueError naming the file."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    want = 0x803 if images else 0x801
    if magic != want:
        raise ValueError(f"{path}: not an IDX {'image' if images else 'label'} file (magic {magic:#x})")
    n = int.from_bytes(data[4:8], "big")
    if images:
        rows, cols = int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
        arr = np.frombuffer(data, np.uint8, offset=16)
        if arr.size != n * rows * cols:
            raise ValueError(f"{path}: truncated ({arr.size} of {n * rows * cols} pixels)")
        return arr.reshape(n, rows * cols)
    arr = np.frombuffer(data, np.uint8, offset=8)
    if arr.size != n:
        raise ValueError(f"{path}: truncated ({arr.size} of {n} labels)")
    return arr


def load(data_dir, limit):
    def part(name):
        x = read_idx(os.path.join(data_dir, f"{name}-images-idx3-ubyte.gz"), True)
        y = read_idx(os.path.join(data_dir, f"{name}-labels-idx1-ubyte.gz"), False)
        if limit:
            x, y = x[:limit], y[:limit]
        return (x.astype(np.float32) / 255.0), y.astype(np.int32)
    return part("train"), part("t10k")


def dense(x, fan_in, fan_out, name, seed, relu):
    with sf.name_scope(name):
        w = sf.Variable(sf.random.truncated_normal([fan_in, fan_out], stddev=math.sqrt(2.0 / fan_in), seed=seed),
                        name="w")
        b = sf.Variable(np.zeros(fan_out, np.float32), name="b")
        z = sf.nn.bias_add(x @ w, b)
    return sf.nn.relu(z) if relu else z


def build(seed, momentum):
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None, 784], name="x")
        labels = sf.placeholder(sf.int32, [None], name="labels")
        lr = sf.placeholder(sf.float32, [], name="lr")
        h1 = dense(x, 784, 512, "fc1", seed, True)
        h2 = dense(h1, 512, 256, "fc2", seed + 1, True)
        logits = dense(h2, 256, 10, "fc3", seed + 2, False)
        loss = sf.ops.mean(sf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        correct = sf.ops.equal(sf.ops.arg_max(logits, axis=1), sf.ops.cast(labels, DstT=sf.int64))
        accuracy = sf.ops.mean(sf.ops.cast(correct, DstT=sf.float32))
        train = sf.train.MomentumOptimizer(lr, momentum).minimize(loss)
        init = sf.global_variables_initializer()
    return g, dict(x=x, labels=labels, lr=lr, loss=loss, accuracy=accuracy, train=train, init=init)


def progress(done, total, loss, width=30):
    filled = int(width * done / total)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} loss {loss:.4f}")
    sys.stderr.flush()


def evaluate(sess, m, x, y, batch=1000):
    correct = 0.0
    for i in range(0, len(x), batch):
        a = sess.run(m["accuracy"], {m["x"]: x[i:i + batch], m["labels"]: y[i:i + batch]})
        correct += float(a) * len(x[i:i + batch])
    return correct / len(x)


def plot(run_dir, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (apt-get install python3-matplotlib): no curves.png", file=sys.stderr)
        return None
    epochs = [r["epoch"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(epochs, [r["train_loss"] for r in rows], marker="o")
    a.set_xlabel("epoch"), a.set_ylabel("training loss"), a.grid(True)
    b.plot(epochs, [r["test_accuracy"] for r in rows], marker="o", color="tab:green")
    b.set_xlabel("epoch"), b.set_ylabel("test accuracy"), b.grid(True)
    fig.suptitle("Fashion-MNIST MLP (shardflow from Python)")
    fig.tight_layout()
    path = os.path.join(run_dir, "curves.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05, help="initial learning rate (cosine decay to 0)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="use only the first N examples of each set (0: all)")
    p.add_argument("--data", default=DATA)
    p.add_argument("--run-dir", default=None, help="where metrics.csv and curves.png go (default runs/fashion_mnist_py-<time>)")
    p.add_argument("--json", action="store_true", help="print JSON lines (the last is the summary)")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch < 1:
        p.error("--epochs and --batch must be positive")
    (xtr, ytr), (xte, yte) = load(args.data, args.limit)
    run_dir = args.run_dir or os.path.join("runs", time.strftime("fashion_mnist_py-%Y%m%d-%H%M%S"))
    os.makedirs(run_dir, exist_ok=True)
    g, m = build(args.seed, args.momentum)
    steps_per_epoch = (len(xtr) + args.batch - 1) // args.batch
    total = steps_per_epoch * args.epochs
    if not args.json:
        print(f"training the MLP on {len(xtr)} examples, batch {args.batch}, {args.epochs} epochs; run folder {run_dir}")
    rows = []
    step = 0
    train_secs = 0.0
    with sf.Session(g) as sess:
        sess.run(m["init"])
        for epoch in range(1, args.epochs + 1):
            order = np.random.default_rng((args.seed, epoch)).permutation(len(xtr))
            t0 = time.perf_counter()
            losses = []
            for k in range(steps_per_epoch):
                idx = order[k * args.batch:(k + 1) * args.batch]
                lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / total))
                loss, _ = sess.run([m["loss"], m["train"]],
                                   {m["x"]: xtr[idx], m["labels"]: ytr[idx], m["lr"]: lr})
                losses.append(float(loss))
                step += 1
                if not args.json and (k % 20 == 0 or k == steps_per_epoch - 1):
                    progress(k + 1, steps_per_epoch, float(np.mean(losses[-20:])))
            secs = time.perf_counter() - t0
            train_secs += secs
            acc = evaluate(sess, m, xte, yte)
            row = {"epoch": epoch, "train_loss": float(np.mean(losses)), "test_accuracy": acc,
                   "epoch_seconds": secs, "steps_per_sec": steps_per_epoch / secs}
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                sys.stderr.write("\n")
                print(f"epoch {epoch}: loss {row['train_loss']:.4f}, test accuracy {acc:.4f}, "
                      f"{row['steps_per_sec']:.0f} steps/s")
    with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
        f.write("epoch,train_loss,test_accuracy,epoch_seconds\n")
        for r in rows:
            f.write(f"{r['epoch']},{r['train_loss']:.6f},{r['test_accuracy']:.6f},{r['epoch_seconds']:.3f}\n")
    curves = plot(run_dir, rows)
    summary = {"model": "mlp", "epochs": args.epochs, "test_accuracy": rows[-1]["test_accuracy"],
               "train_steps_per_sec": step / train_secs, "epoch_seconds": train_secs / args.epochs,
               "run_dir": run_dir, "curves": curves}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"test accuracy {summary['test_accuracy']:.4f}; metrics in {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
