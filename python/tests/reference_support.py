"""What the reference tests share: a runner for a snippet expected to raise (in a subprocess, so a
crash fails the test instead of the run), NumPy references of a lookup's combined rows, of
the table gradient it passes back and of one sparse step, and the raw sparse update ops of Ftrl and RowwiseAdagrad, which
sf.train has no optimizer classes for, built on one table shard as Optimizer::Minimize builds them
in C++ (a fixed table's slots are variables named as Minimize names them, a hash table's slots its
own arena)."""

import subprocess
import sys
import textwrap

import numpy as np

import shardflow as sf

# The hyperparameters the ops get: Ftrl (lr, l1, l2, lr_power), RowwiseAdagrad (lr,); both start
# their accumulators at 0.1.
FTRL = (0.1, 0.02, 0.01, -0.5)
ROWWISE_ADAGRAD = (0.2,)


def run_error_case(body):
    """Runs body (statements in a fresh default graph g) in a subprocess; its last line: "EXC <type>
    <message>" for the exception it raised, or "NO ERROR". A crash fails the calling test."""
    code = ("import numpy as np, shardflow as sf\ng = sf.Graph()\nwith g.as_default():\n" +
            textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") +
            "\n    print('NO ERROR')\n")
    wrapper = ("import sys, traceback\ntry:\n" + textwrap.indent(code, "    ") +
               "\nexcept Exception as e:\n    print('EXC', type(e).__name__, e)\n")
    p = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"crashed (rc {p.returncode}): {p.stderr[-2000:]}"
    return p.stdout.strip().splitlines()[-1]


def ref_combine(E, bags, combiner):
    """[len(bags), dim] combined rows and the weight of each bag's ids."""
    out = np.zeros((len(bags), E.shape[1]))
    weights = []
    for b, ids in enumerate(bags):
        n = len(ids)
        w = 0.0 if n == 0 else {"sum": 1.0, "mean": 1.0 / n, "sqrtn": 1.0 / np.sqrt(n)}[combiner]
        weights.append(w)
        for i in ids:
            out[b] += w * E[i]
    return out, weights


def ref_table_grad(shape, bags, weights, dy):
    """The table gradient of combined rows whose upstream gradient is dy."""
    G = np.zeros(shape)
    for b, ids in enumerate(bags):
        for i in ids:
            G[i] += weights[b] * dy[b]
    return G


def ref_sparse_update(kind, E, G, touched, st, lr, p):
    """One sparse step on table E (float64): only rows `touched` move (lazy Adam, one beta power per step)."""
    E = E.copy()
    t = np.asarray(sorted(set(int(x) for x in touched)), np.int64)
    if kind == "sgd":
        E[t] -= lr * G[t]
    elif kind == "adagrad":
        A = st.setdefault("a", np.full_like(E, p[0]))
        A[t] += G[t] ** 2
        E[t] -= lr * G[t] / np.sqrt(A[t])
    elif kind == "adam":
        b1, b2, eps = p
        st["t"] = st.get("t", 0) + 1
        M = st.setdefault("m", np.zeros_like(E))
        V = st.setdefault("v", np.zeros_like(E))
        M[t] = b1 * M[t] + (1 - b1) * G[t]
        V[t] = b2 * V[t] + (1 - b2) * G[t] ** 2
        alpha = lr * np.sqrt(1 - b2 ** st["t"]) / (1 - b1 ** st["t"])
        E[t] -= alpha * M[t] / (np.sqrt(V[t]) + eps)
    else:
        raise ValueError(kind)
    return E


def raw_sparse_apply(kind, hashed, shard, rows, dim, inputs, attrs):
    """The EmbeddingSparseApply op of kind ("ftrl" or "rowwise_adagrad") on shard: its slots, the
    hyperparameters above, then inputs (a lookup's ids and gradient, or rows and row gradients)."""
    c = lambda v: sf.constant(np.float32(v))  # noqa: E731
    if kind == "ftrl":
        if hashed:
            slots, extra = [shard, shard], dict(slot_init=[0.1, 0.0])
        else:
            slots = [sf.Variable(np.full((rows, dim), 0.1, np.float32), name="t/part_0/Ftrl/accumulator",
                                 trainable=False).handle,
                     sf.Variable(np.zeros((rows, dim), np.float32), name="t/part_0/Ftrl/linear",
                                 trainable=False).handle]
            extra = {}
        return sf.ops.embedding_sparse_apply_ftrl(shard, *slots, *[c(h) for h in FTRL], *inputs, **extra, **attrs)
    if hashed:
        slots, extra = [shard], dict(slot_init=[0.1])
    else:
        slots = [sf.Variable(np.full((rows, dim), 0.1, np.float32), name="t/part_0/R/accumulator",
                             trainable=False).handle]
        extra = {}
    return sf.ops.embedding_sparse_apply_rowwise_adagrad(shard, *slots, *[c(h) for h in ROWWISE_ADAGRAD], *inputs,
                                                         **extra, **attrs)
