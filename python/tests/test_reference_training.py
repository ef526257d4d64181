"""Optimizers, variables and embedding tables checked against NumPy references.

Every expected value here comes from an independent NumPy implementation of the
TensorFlow 1.x definitions (tf.compat.v1.train.*Optimizer, tf.raw_ops.Apply*,
TF's sparse applies that sum duplicate indices first, and lazy Adam for tables):

- GradientDescent: var -= lr * g
- Momentum:        a = m * a + g; var -= lr * a   (Nesterov: var -= lr * (g + m * a)); a starts at 0
- Adagrad:         acc += g^2; var -= lr * g / sqrt(acc); acc starts at initial_accumulator_value
- Adam:            m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
                   var -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)   (TF's "epsilon hat")
- RMSProp:         ms = rho ms + (1 - rho) g^2; mom = momentum mom + lr g / sqrt(ms + eps); var -= mom;
                   ms starts at 1 (TF1)
- Ftrl (ApplyFtrl), RowwiseAdagrad: the formulas of kernels/optimizer_spec.h / TF's ApplyFtrl.

Tests that fail because of a shardflow bug are xfail(strict=True) with the bug as reason.
"""

import re

import numpy as np
import pytest

import shardflow as sf
from reference_support import raw_sparse_apply, ref_combine, ref_sparse_update, ref_table_grad, run_error_case

# ---------------------------------------------------------------------------
# NumPy references


def ref_dense_update(kind, w, g, st, lr, p):
    """One dense step of optimizer `kind` with hyperparameters p on w (float64)."""
    if kind == "sgd":
        return w - lr * g
    if kind == "momentum":
        mom, nesterov = p
        st["a"] = mom * st.get("a", np.zeros_like(w)) + g
        return w - (lr * (g + mom * st["a"]) if nesterov else lr * st["a"])
    if kind == "adagrad":
        st["a"] = st.get("a", np.full_like(w, p[0])) + g * g
        return w - lr * g / np.sqrt(st["a"])
    if kind == "adam":
        b1, b2, eps = p
        st["t"] = st.get("t", 0) + 1
        t = st["t"]
        st["m"] = b1 * st.get("m", np.zeros_like(w)) + (1 - b1) * g
        st["v"] = b2 * st.get("v", np.zeros_like(w)) + (1 - b2) * g * g
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        return w - alpha * st["m"] / (np.sqrt(st["v"]) + eps)
    if kind == "rmsprop":
        rho, mom, eps = p
        st["ms"] = rho * st.get("ms", np.ones_like(w)) + (1 - rho) * g * g
        st["mom"] = mom * st.get("mom", np.zeros_like(w)) + lr * g / np.sqrt(st["ms"] + eps)
        return w - st["mom"]
    raise ValueError(kind)


def ref_ftrl(w, acc, lin, g, lr, l1, l2, lr_power):
    acc_new = acc + g * g
    lin = lin + g - (acc_new ** (-lr_power) - acc ** (-lr_power)) / lr * w
    quad = acc_new ** (-lr_power) / lr + 2 * l2
    w = np.where(np.abs(lin) > l1, (np.sign(lin) * l1 - lin) / quad, 0.0)
    return w, acc_new, lin


def make_opt(kind, lr, p):
    if kind == "sgd":
        return sf.train.GradientDescentOptimizer(lr)
    if kind == "momentum":
        return sf.train.MomentumOptimizer(lr, p[0], use_nesterov=p[1])
    if kind == "adagrad":
        return sf.train.AdagradOptimizer(lr, p[0])
    if kind == "adam":
        return sf.train.AdamOptimizer(lr, *p)
    if kind == "rmsprop":
        return sf.train.RMSPropOptimizer(lr, *p)
    raise ValueError(kind)


DENSE_OPTS = [
    ("sgd", ()),
    ("momentum", (0.9, False)),
    ("momentum", (0.7, True)),
    ("adagrad", (0.1,)),
    ("adagrad", (0.5,)),
    ("adam", (0.9, 0.999, 1e-8)),
    ("adam", (0.8, 0.9, 1e-3)),
    ("rmsprop", (0.9, 0.0, 1e-10)),
    ("rmsprop", (0.8, 0.5, 1e-3)),
]
SPARSE_OPTS = [("sgd", ()), ("adagrad", (0.1,)), ("adam", (0.9, 0.999, 1e-3))]


def opt_id(o):
    return f"{o[0]}{o[1]}"


# ---------------------------------------------------------------------------
# Dense optimizers


@pytest.mark.parametrize("opt", DENSE_OPTS, ids=opt_id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lr_mode", ["constant", "fed", "varying"])
def test_dense_optimizer_matches_numpy(opt, dtype, lr_mode):
    kind, p = opt
    dt = np.dtype(dtype)
    sdt = getattr(sf, dtype)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 3)).astype(dt)
    Y = rng.standard_normal((5, 2)).astype(dt)
    w0 = rng.standard_normal((3, 2)).astype(dt)
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sdt, [None, 3], name="x")
        y = sf.placeholder(sdt, [None, 2], name="y")
        w = sf.Variable(w0, name="w")
        # w appears in two terms: the gradients must be summed.
        loss = 0.5 * sf.ops.sum(sf.ops.square(x @ w - y)) + 0.1 * sf.ops.sum(w * w)
        if lr_mode == "constant":
            train = make_opt(kind, 0.05, p).minimize(loss)
        else:
            # A float32 learning rate also for float64 variables: minimize casts it.
            lr = sf.placeholder(sf.float32, [], name="lr")
            train = make_opt(kind, lr, p).minimize(loss)
        init = sf.global_variables_initializer()
    W = w0.astype(np.float64)
    Xd, Yd = X.astype(np.float64), Y.astype(np.float64)
    st = {}
    with sf.Session(g) as s:
        s.run(init)
        for step in range(6):
            lr_v = 0.05 if lr_mode != "varying" else 0.02 * (step + 1)
            feeds = {x: X, y: Y}
            if lr_mode != "constant":
                feeds[lr] = lr_v
            s.run(train, feeds)
            lr_ref = float(np.float32(lr_v)) if lr_mode != "constant" else lr_v
            W = ref_dense_update(kind, W, Xd.T @ (Xd @ W - Yd) + 0.2 * W, st, lr_ref, p)
        got = s.run(w)
    assert got.dtype == dt
    tol = dict(rtol=2e-5, atol=2e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, W, **tol)


@pytest.mark.parametrize("opt", DENSE_OPTS, ids=opt_id)
def test_dense_optimizer_on_a_scalar_and_apply_gradients(opt):
    kind, p = opt
    g = sf.Graph()
    with g.as_default():
        w = sf.Variable(np.array(1.5), name="w")
        loss = w * w * w * 0.25 + w  # d/dw = 0.75 w^2 + 1
        o = make_opt(kind, 0.1, p)
        train = o.apply_gradients(o.compute_gradients(loss, [w]))
        init = sf.global_variables_initializer()
    W, st = np.float64(1.5), {}
    with sf.Session(g) as s:
        s.run(init)
        for _ in range(5):
            s.run(train)
            W = ref_dense_update(kind, W, 0.75 * W * W + 1.0, st, 0.1, p)
        np.testing.assert_allclose(s.run(w), W, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("hyper", [(0.1, 0.0, 0.0, -0.5), (0.1, 0.05, 0.01, -0.5), (0.3, 0.01, 0.1, -0.3)])
def test_apply_ftrl_op_matches_tf_formula(dtype, hyper):
    # FtrlOptimizer is not in sf.train: the registry's op is checked directly.
    lr, l1, l2, lr_power = hyper
    dt = np.dtype(dtype)
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((3, 4)).astype(dt)
    grads = [rng.standard_normal((3, 4)).astype(dt) for _ in range(5)]
    g = sf.Graph()
    with g.as_default():
        w = sf.Variable(w0, name="w")
        acc = sf.Variable(np.full((3, 4), 0.1, dt), name="w/Ftrl/accumulator", trainable=False)
        lin = sf.Variable(np.zeros((3, 4), dt), name="w/Ftrl/linear", trainable=False)
        gp = sf.placeholder(getattr(sf, dtype), [3, 4], name="g")
        c = lambda v: sf.constant(np.array(v, dt))  # noqa: E731
        op = sf.ops.apply_ftrl(w.handle, acc.handle, lin.handle, c(lr), c(l1), c(l2), c(lr_power), gp)
        init = sf.global_variables_initializer()
    W, A, L = w0.astype(np.float64), np.full((3, 4), 0.1), np.zeros((3, 4))
    with sf.Session(g) as s:
        s.run(init)
        for G in grads:
            s.run(op, {gp: G})
            W, A, L = ref_ftrl(W, A, L, G.astype(np.float64), lr, l1, l2, lr_power)
        got = s.run([w, acc, lin])
    tol = dict(rtol=1e-4, atol=1e-5) if dt == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for a, b in zip(got, [W, A, L]):
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 3, 2)])
def test_apply_rowwise_adagrad_op_one_accumulator_per_row(shape):
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal(shape)
    grads = [rng.standard_normal(shape) for _ in range(5)]
    g = sf.Graph()
    with g.as_default():
        w = sf.Variable(w0, name="w")
        acc = sf.Variable(np.full(shape, 0.1), name="w/R/accumulator", trainable=False)
        gp = sf.placeholder(sf.float64, list(shape), name="g")
        op = sf.ops.apply_rowwise_adagrad(w.handle, acc.handle, sf.constant(np.array(0.2)), gp)
        init = sf.global_variables_initializer()
    W, A = w0.copy(), np.full(shape[:-1] + (1,), 0.1)
    with sf.Session(g) as s:
        s.run(init)
        for G in grads:
            s.run(op, {gp: G})
            A = A + np.mean(G ** 2, axis=-1, keepdims=True)
            W = W - 0.2 * G / np.sqrt(A)
        got_w, got_a = s.run([w, acc])
    np.testing.assert_allclose(got_w, W, rtol=1e-12)
    np.testing.assert_allclose(got_a, np.broadcast_to(A, shape), rtol=1e-12)


@pytest.mark.parametrize("hashed", [False, True], ids=["fixed", "hash"])
@pytest.mark.parametrize("kind", ["ftrl", "rowwise_adagrad"])
def test_sparse_ftrl_and_rowwise_adagrad_ops_on_tables(hashed, kind):
    # The sparse ops of the two optimizers sf.train lacks, fed a lookup's own attributes.
    rows, dim = 6, 3
    rng = np.random.default_rng(5)
    g = sf.Graph()
    with g.as_default():
        t = (sf.embedding.HashEmbeddingTable("t", dim=dim, seed=2) if hashed else
             sf.embedding.EmbeddingTable("t", rows=rows, dim=dim, seed=2))
        ids = sf.placeholder(sf.int64, [None, 2], name="ids")
        t.lookup(ids)
        lookup = [op for op in g.get_operations() if op.type == "EmbeddingShardLookup"][0]
        attrs = {k: v for k, v in lookup.node_def.items()
                 if k in ("table", "table_rows", "num_shards", "shard", "partition", "combiner", "segments")}
        dy = sf.placeholder(sf.float32, [None, dim], name="dy")
        sh = t.shards[0]
        op = raw_sparse_apply(kind, hashed, sh, rows, dim, [ids, dy], attrs)
        every = sf.constant(np.arange(rows).reshape(1, -1))
        make_rows = t.lookup(every, combiner="none")
        view = t.read_only_view().lookup(every, combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(make_rows)[0].astype(np.float64)
        A, L, R = np.full((rows, dim), 0.1), np.zeros((rows, dim)), np.full((rows, 1), 0.1)
        for _ in range(4):
            I = rng.integers(0, rows, (3, 2))
            I[1, 1] = I[0, 0]
            D = rng.standard_normal((3, dim)).astype(np.float32)
            G = ref_table_grad(E.shape, [list(r) for r in I], [1.0] * 3, D.astype(np.float64))
            tch = sorted(set(I.ravel()))
            if kind == "ftrl":
                E[tch], A[tch], L[tch] = ref_ftrl(E[tch], A[tch], L[tch], G[tch], 0.1, 0.02, 0.01, -0.5)
            else:
                R[tch] += np.mean(G[tch] ** 2, axis=1, keepdims=True)
                E[tch] -= 0.2 * G[tch] / np.sqrt(R[tch])
            s.run(op, {ids: I, dy: D})
        np.testing.assert_allclose(s.run(view)[0], E, rtol=1e-5, atol=1e-6)


def test_two_optimizer_instances_have_their_own_slots(g):
    w = sf.Variable(np.array([1.0], np.float32), name="w")
    t1 = sf.train.MomentumOptimizer(0.1, 0.9).minimize(sf.ops.sum(w * w))
    t2 = sf.train.MomentumOptimizer(0.1, 0.5).minimize(sf.ops.sum(3.0 * w))
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(t1)  # a1 = 2: w = 0.8
        s.run(t2)  # a2 = 3 (its own accumulator): w = 0.5
        np.testing.assert_allclose(s.run(w), [0.5], rtol=1e-6)


# ---------------------------------------------------------------------------
# Fixed embedding tables: sparse training against a dense NumPy model

ROWS, DIM = 11, 4
SHARDINGS = [(1, "mod"), (2, "mod"), (3, "mod"), (4, "mod"), (3, "range"), (4, "range")]


def _batch(mode, rng):
    """(feeds builder inputs, bags as lists of ids) with duplicate ids in a batch and in one example."""
    if mode == "dense":
        I = rng.integers(0, ROWS, (4, 3))
        I[0, 1] = I[0, 0]
        I[2, :] = I[1, 0]
        return (I,), [list(r) for r in I]
    if mode == "bag":
        lens = [3, 0, 2, 4]
        I = rng.integers(0, ROWS, sum(lens))
        I[1] = I[0]
        I[5] = I[0]
        offs = np.cumsum([0] + lens[:-1])
        return (I, offs), [list(I[o:o + n]) for o, n in zip(offs, lens)]
    I = rng.integers(0, ROWS, 7)
    I[3] = I[0]
    S = np.array([0, 0, 2, 2, 2, 3, 0])  # example 1 is empty, segments unsorted
    return (I, S), [[I[j] for j in range(7) if S[j] == b] for b in range(4)]


@pytest.mark.parametrize("sharding", SHARDINGS, ids=lambda s: f"{s[0]}{s[1]}")
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("mode", ["dense", "bag", "segments"])
@pytest.mark.parametrize("opt", SPARSE_OPTS, ids=opt_id)
def test_table_sparse_training_matches_dense_numpy(sharding, combiner, mode, opt):
    K, part = sharding
    kind, p = opt
    rng = np.random.default_rng(1)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=ROWS, dim=DIM, num_shards=K, partition=part, seed=7)
        read_all = t.read_only_view().lookup(sf.constant(np.arange(ROWS).reshape(1, ROWS)), combiner="none")
        target = sf.placeholder(sf.float32, [None, DIM], name="target")
        if mode == "dense":
            ids = sf.placeholder(sf.int64, [None, 3], name="ids")
            emb = t.lookup(ids, combiner=combiner)
            extra = None
        elif mode == "bag":
            ids = sf.placeholder(sf.int64, [None], name="ids")
            extra = sf.placeholder(sf.int32, [None], name="offsets")
            emb = t.lookup_bag(ids, extra, combiner=combiner)
        else:
            ids = sf.placeholder(sf.int64, [None], name="ids")
            extra = sf.placeholder(sf.int64, [None], name="segments")
            emb = t.lookup_segments(ids, extra, 4, combiner=combiner)
        loss = 0.5 * sf.ops.sum(sf.ops.square(emb - target))
        train = make_opt(kind, 0.1, p).minimize(loss)
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(read_all)[0].astype(np.float64)
        st = {}
        for _ in range(4):
            inputs, bags = _batch(mode, rng)
            T = rng.standard_normal((4, DIM))
            feeds = {ids: inputs[0], target: T.astype(np.float32)}
            if extra is not None:
                feeds[extra] = inputs[1]
            want, weights = ref_combine(E, bags, combiner)
            np.testing.assert_allclose(s.run(emb, feeds), want, rtol=1e-5, atol=1e-5)
            G = ref_table_grad(E.shape, bags, weights, want - T)
            E = ref_sparse_update(kind, E, G, sorted({i for b in bags for i in b}), st, 0.1, p)
            s.run(train, feeds)
        np.testing.assert_allclose(s.run(read_all)[0], E, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("opt", SPARSE_OPTS, ids=opt_id)
def test_table_combiner_none_int32_ids_and_an_empty_shard(K, opt):
    # Combiner none ([batch, k, dim]); int32 ids; batches whose ids all live in one shard.
    kind, p = opt
    rows = 12
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=rows, dim=3, num_shards=K, seed=3)
        read_all = t.read_only_view().lookup(sf.constant(np.arange(rows).reshape(1, rows)), combiner="none")
        ids = sf.placeholder(sf.int32, [None, 2], name="ids")
        target = sf.placeholder(sf.float32, [None, 2, 3], name="target")
        loss = 0.5 * sf.ops.sum(sf.ops.square(t.lookup(ids, combiner="none") - target))
        train = make_opt(kind, 0.1, p).minimize(loss)
        init = sf.global_variables_initializer()
    rng = np.random.default_rng(5)
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(read_all)[0].astype(np.float64)
        st = {}
        for step in range(4):
            I = np.array([[0, K], [2 * K, 0]]) + step % K  # one shard's ids only, duplicates
            T = rng.standard_normal((2, 2, 3))
            G = np.zeros_like(E)
            for b in range(2):
                for j in range(2):
                    G[I[b, j]] += E[I[b, j]] - T[b, j]
            E = ref_sparse_update(kind, E, G, sorted(set(I.ravel())), st, 0.1, p)
            s.run(train, {ids: I.astype(np.int32), target: T.astype(np.float32)})
        np.testing.assert_allclose(s.run(read_all)[0], E, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opt", SPARSE_OPTS, ids=opt_id)
def test_sharded_tables_train_exactly_as_one_shard(opt):
    # From identical (zero) initial rows every shard count and partitioning gives the same table,
    # and that table is the NumPy model's; a dense layer and a fed float64 learning rate ride along.
    kind, p = opt
    rng = np.random.default_rng(7)
    batches = [(rng.integers(0, 10, (6, 3)), rng.standard_normal((6, 1))) for _ in range(4)]
    w0 = rng.standard_normal((3, 1)).astype(np.float32)
    results = []
    for K, part, devices in [(1, "mod", 1), (2, "mod", 2), (3, "mod", 1), (4, "range", 4), (3, "range", 1)]:
        g = sf.Graph()
        with g.as_default():
            t = sf.embedding.EmbeddingTable("t", rows=10, dim=3, num_shards=K, partition=part, initializer="uniform",
                                            scale=0.0)
            w = sf.Variable(w0, name="w")
            lr = sf.placeholder(sf.float64, [], name="lr")
            ids = sf.placeholder(sf.int64, [None, 3], name="ids")
            y = sf.placeholder(sf.float32, [None, 1], name="y")
            bias = sf.constant(np.ones((1, 3), np.float32))
            loss = 0.5 * sf.ops.sum(sf.ops.square((t.lookup(ids, combiner="mean") + bias) @ w - y))
            train = make_opt(kind, lr, p).minimize(loss)
            read_all = t.read_only_view().lookup(sf.constant(np.arange(10).reshape(1, 10)), combiner="none")
            init = sf.global_variables_initializer()
        with sf.Session(g, num_cpu_devices=devices) as s:
            s.run(init)
            for step, (I, Y) in enumerate(batches):
                s.run(train, {ids: I, y: Y.astype(np.float32), lr: 0.05 * (step + 1)})
            results.append((s.run(read_all)[0], s.run(w)))
    # NumPy: E starts at zero.
    E, W = np.zeros((10, 3)), w0.astype(np.float64)
    st, stw = {}, {}
    for step, (I, Y) in enumerate(batches):
        bags = [list(r) for r in I]
        emb, weights = ref_combine(E, bags, "mean")
        h = emb + 1.0
        r = h @ W - Y
        gW = h.T @ r
        G = ref_table_grad(E.shape, bags, weights, r @ W.T)
        lr_v = 0.05 * (step + 1)
        E = ref_sparse_update(kind, E, G, sorted(set(I.ravel())), st, lr_v, p)
        W = ref_dense_update(kind, W, gW, stw, lr_v, p)
    for table, wv in results:
        np.testing.assert_allclose(table, E, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(wv, W, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("opt", [("adagrad", (0.1,)), ("adam", (0.9, 0.999, 1e-3))], ids=opt_id)
def test_large_batches_on_the_parallel_paths(K, opt):
    # Many unique rows (>= 4096) and ids (>= 8192): the split gather and sparse gradient use the pool.
    kind, p = opt
    rows, dim = 30000, 8
    rng = np.random.default_rng(4)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=rows, dim=dim, num_shards=K, seed=3)
        ids = sf.placeholder(sf.int64, [None], name="ids")
        off = sf.placeholder(sf.int64, [None], name="off")
        c = sf.placeholder(sf.float32, [None, dim], name="c")
        emb = t.lookup_bag(ids, off, combiner="mean")
        train = make_opt(kind, 0.1, p).minimize(sf.ops.sum(emb * c))
        read_all = t.read_only_view().lookup(sf.constant(np.arange(rows).reshape(1, rows)), combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g, compute_threads=4) as s:
        s.run(init)
        E = s.run(read_all)[0].astype(np.float64)
        st = {}
        for _ in range(2):
            n = 24000
            I, O = rng.integers(0, rows, n), np.arange(0, n, 4)
            C = rng.standard_normal((n // 4, dim))
            np.testing.assert_allclose(s.run(emb, {ids: I, off: O}), E[I].reshape(-1, 4, dim).mean(1),
                                       rtol=1e-5, atol=1e-5)
            G = np.zeros_like(E)
            np.add.at(G, I, np.repeat(C, 4, axis=0) / 4)
            E = ref_sparse_update(kind, E, G, np.unique(I), st, 0.1, p)
            s.run(train, {ids: I, off: O, c: C.astype(np.float32)})
        np.testing.assert_allclose(s.run(read_all)[0], E, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("hashed", [False, True], ids=["fixed", "hash"])
@pytest.mark.parametrize("opt", [
    ("sgd", ()),
    ("adagrad", (1e-12,)),
    ("adam", (0.9, 0.999, 1e-8)),
], ids=opt_id)
def test_two_lookups_of_one_table_update_once_by_the_summed_gradient(hashed, opt):
    kind, p = opt
    g = sf.Graph()
    with g.as_default():
        t = (sf.embedding.HashEmbeddingTable("t", dim=1, initializer="zeros") if hashed else
             sf.embedding.EmbeddingTable("t", rows=4, dim=1, initializer="zeros"))
        a = sf.constant(np.array([[1]], np.int64))
        b = sf.constant(np.array([[1]], np.int64))
        loss = sf.ops.sum(t.lookup(a)) + sf.ops.sum(t.lookup(b))  # d loss / d row 1 = 2
        train = make_opt(kind, 1.0, p).minimize(loss)
        row = t.read_only_view().lookup(a)
        init = sf.global_variables_initializer()
    E = ref_sparse_update(kind, np.zeros((4, 1)), np.array([[0.0], [2.0], [0.0], [0.0]]), [1], {}, 1.0, p)
    with sf.Session(g) as s:
        s.run(init)
        s.run(train)
        np.testing.assert_allclose(s.run(row), E[1:2], rtol=1e-5)


def test_trainable_false_tables_and_var_list(g):
    t = sf.embedding.EmbeddingTable("t", rows=4, dim=2, initializer="zeros", trainable=False)
    u = sf.embedding.EmbeddingTable("u", rows=4, dim=2, initializer="zeros")
    w = sf.Variable(np.ones(2, np.float32), name="w")
    ids = sf.constant(np.array([[1, 2]]))
    loss = sf.ops.sum(t.lookup(ids) * w) + sf.ops.sum(u.lookup(ids) * w)
    train_all = sf.train.GradientDescentOptimizer(1.0).minimize(loss)
    train_u = sf.train.GradientDescentOptimizer(1.0).minimize(loss, var_list=[u])
    every = sf.constant(np.arange(4).reshape(1, 4))
    vt = t.read_only_view().lookup(every, combiner="none")
    vu = u.read_only_view().lookup(every, combiner="none")
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train_all)  # w's gradient is t(1)+t(2)+u(1)+u(2) = 0: w stays
        np.testing.assert_array_equal(s.run(vt)[0], np.zeros((4, 2)))
        np.testing.assert_array_equal(s.run(vu)[0], [[0, 0], [-1, -1], [-1, -1], [0, 0]])
        s.run(train_u)
        np.testing.assert_array_equal(s.run(vu)[0], [[0, 0], [-2, -2], [-2, -2], [0, 0]])
        np.testing.assert_array_equal(s.run(w), [1, 1])


@pytest.mark.parametrize("hashed", [False, True], ids=["fixed", "hash"])
@pytest.mark.parametrize("initializer,scale", [("uniform", -1.0), ("uniform", 0.3), ("truncated_normal", -1.0),
                                               ("truncated_normal", 0.3), ("zeros", -1.0)])
def test_table_initializers_as_documented(hashed, initializer, scale):
    rows, dim = 3000, 16
    g = sf.Graph()
    with g.as_default():
        kw = dict(initializer=initializer, scale=scale, num_shards=2)
        t = (sf.embedding.HashEmbeddingTable("h", dim=dim, **kw) if hashed else
             sf.embedding.EmbeddingTable("t", rows=rows, dim=dim, **kw))
        ids = np.arange(rows).reshape(1, rows) * (7919 if hashed else 1) - (10 ** 6 if hashed else 0)
        v = t.lookup(sf.constant(ids), combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(v)[0]
    sc = 1 / np.sqrt(dim) if scale < 0 else scale
    if initializer == "zeros":
        np.testing.assert_array_equal(E, 0)
    elif initializer == "uniform":  # U(-scale, scale)
        assert np.abs(E).max() <= sc and abs(E.std() - sc / np.sqrt(3)) < 0.02 * sc and abs(E.mean()) < 0.01 * sc
    else:  # stddev scale truncated at two standard deviations (TF's truncated_normal)
        assert np.abs(E).max() <= 2 * sc and abs(E.std() - 0.8796 * sc) < 0.02 * sc and abs(E.mean()) < 0.02 * sc


# ---------------------------------------------------------------------------
# Hash embedding tables

HASH_IDS = np.array([0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 62 + 7, -(2 ** 61), 123456789012345, -5, 42], np.int64)


def _hash_initial_rows(K, seed, dim=4):
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=dim, num_shards=K, seed=seed)
        v = t.lookup(sf.constant(HASH_IDS.reshape(1, -1)), combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        return s.run(v)[0]


def test_hash_initial_rows_depend_on_seed_and_id_only():
    base = _hash_initial_rows(1, 5)
    assert np.abs(base).max() <= 0.5 and len({tuple(r) for r in base}) == len(HASH_IDS)
    for K in [2, 3, 4]:
        np.testing.assert_array_equal(_hash_initial_rows(K, 5), base)
    assert not np.array_equal(_hash_initial_rows(1, 6), base)


@pytest.mark.parametrize("K", [1, 2, 3, 4])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("opt", SPARSE_OPTS, ids=opt_id)
def test_hash_table_trains_as_a_dict_of_rows(K, combiner, opt):
    kind, p = opt
    dim = 4
    rng = np.random.default_rng(3)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=dim, num_shards=K, seed=5)
        every = sf.constant(HASH_IDS.reshape(1, -1))
        make_rows = t.lookup(every, combiner="none")
        view = t.read_only_view().lookup(every, combiner="none")
        ids = sf.placeholder(sf.int64, [None, 3], name="ids")
        target = sf.placeholder(sf.float32, [None, dim], name="target")
        emb = t.lookup(ids, combiner=combiner)
        train = make_opt(kind, 0.1, p).minimize(0.5 * sf.ops.sum(sf.ops.square(emb - target)))
        init = sf.global_variables_initializer()
    pos = {int(v): i for i, v in enumerate(HASH_IDS)}
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(make_rows)[0].astype(np.float64)
        np.testing.assert_array_equal(s.run(view)[0], E)  # the rows exist now, and a view reads them
        st = {}
        for _ in range(4):
            I = HASH_IDS[rng.integers(0, len(HASH_IDS), (4, 3))]
            I[0, 1] = I[0, 0]
            I[3, :] = I[2, 0]
            T = rng.standard_normal((4, dim))
            bags = [[pos[int(v)] for v in r] for r in I]
            want, weights = ref_combine(E, bags, combiner)
            np.testing.assert_allclose(s.run(emb, {ids: I}), want, rtol=1e-5, atol=1e-5)
            G = ref_table_grad(E.shape, bags, weights, want - T)
            E = ref_sparse_update(kind, E, G, sorted({i for b in bags for i in b}), st, 0.1, p)
            s.run(train, {ids: I, target: T.astype(np.float32)})
        np.testing.assert_allclose(s.run(view)[0], E, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K", [1, 3])
def test_hash_table_many_ids_count_like_a_dict(K):
    rng = np.random.default_rng(1)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=8, num_shards=K, initializer="zeros")
        ids = sf.placeholder(sf.int64, [None], name="ids")
        off = sf.placeholder(sf.int64, [None], name="off")
        train = sf.train.GradientDescentOptimizer(1.0).minimize(sf.ops.sum(t.lookup_bag(ids, off)))
        q = sf.placeholder(sf.int64, [None], name="q")
        qo = sf.placeholder(sf.int64, [None], name="qo")
        view = t.read_only_view().lookup_bag(q, qo)
        init = sf.global_variables_initializer()
    pool = np.concatenate([rng.integers(-2 ** 63, 2 ** 63 - 1, 20000, dtype=np.int64), np.arange(-500, 500)])
    counts = {}
    with sf.Session(g) as s:
        s.run(init)
        for _ in range(4):
            I = pool[rng.integers(0, len(pool), 30000)]
            s.run(train, {ids: I, off: np.arange(0, 30000, 3)})
            for k in I.tolist():
                counts[k] = counts.get(k, 0) + 1
        keys = np.array(list(counts), np.int64)
        got = s.run(view, {q: keys, qo: np.arange(len(keys))})
    np.testing.assert_array_equal(got, -np.repeat(np.array([counts[k] for k in keys.tolist()], np.float32)[:, None],
                                                  8, axis=1))


def test_hash_admission_after_min_count_sightings(g):
    t = sf.embedding.HashEmbeddingTable("h", dim=2, min_count=3, seed=1)
    ids = sf.placeholder(sf.int64, [None, None], name="ids")
    emb = t.lookup(ids)
    view = t.read_only_view().lookup(ids)
    train = sf.train.GradientDescentOptimizer(1.0).minimize(sf.ops.sum(emb))
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        a = {ids: np.array([[77]])}
        for _ in range(5):  # a view counts no sighting
            np.testing.assert_array_equal(s.run(view, a), np.zeros((1, 2)))
        for _ in range(2):  # below min_count: zeros, and the gradient is skipped
            np.testing.assert_array_equal(s.run([emb, train], a)[0], np.zeros((1, 2)))
        first = s.run([emb, train], a)[0]  # third sighting: a row, from the initializer
        assert np.all(first != 0) and np.abs(first).max() <= 1 / np.sqrt(2)
        np.testing.assert_allclose(s.run(view, a), first - 1.0, rtol=1e-6)  # and then trained once
        # Three sightings in one batch admit at once.
        assert np.all(s.run(emb, {ids: np.array([[99, 99, 99]])}) != 0)


@pytest.mark.parametrize("opt", ["adagrad", "adam"])
def test_hash_ttl_remakes_an_expired_row_with_fresh_slots(g, opt):
    t = sf.embedding.HashEmbeddingTable("h", dim=2, ttl_steps=2, seed=1)
    ids = sf.placeholder(sf.int64, [None, None], name="ids")
    emb = t.lookup(ids)
    view = t.read_only_view().lookup(ids)
    o = sf.train.AdagradOptimizer(0.5) if opt == "adagrad" else sf.train.AdamOptimizer(0.5)
    train = o.minimize(sf.ops.sum(emb))
    a, b = {ids: np.array([[5]])}, {ids: np.array([[6]])}
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        _, e0 = s.run([train, emb], a)
        for _ in range(4):
            s.run(train, b)
        np.testing.assert_array_equal(s.run(view, a), np.zeros((1, 2)))  # expired: a view reads zeros
        _, e1 = s.run([train, emb], a)
        np.testing.assert_array_equal(e1, e0)  # the same initial row again
        got = s.run(view, a)
    if opt == "adagrad":  # a fresh accumulator: 0.1 + 1
        want = e0 - 0.5 / np.sqrt(1.1)
    else:  # fresh m and v; the shard's beta powers are at step 6 (lazy Adam)
        alpha = 0.5 * np.sqrt(1 - 0.999 ** 6) / (1 - 0.9 ** 6)
        want = e0 - alpha * 0.1 / (np.sqrt(0.001) + 1e-8)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("eviction,gone", [("lru", [0, 1]), ("lfu", [2, 3])])
def test_hash_max_rows_evicts_by_policy(g, eviction, gone):
    t = sf.embedding.HashEmbeddingTable("h", dim=2, max_rows=32, eviction=eviction, initializer="zeros")
    ids = sf.placeholder(sf.int64, [None, None], name="ids")
    train = sf.train.GradientDescentOptimizer(1.0).minimize(sf.ops.sum(t.lookup(ids)))
    view = t.read_only_view().lookup(ids, combiner="none")
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        # 0 and 1: often but long ago; 2..31 twice, recently.
        s.run(train, {ids: np.concatenate([[0] * 5, [1] * 5, np.arange(2, 32)]).reshape(1, -1)})
        s.run(train, {ids: np.arange(2, 32).reshape(1, -1)})
        s.run(train, {ids: np.array([[100]])})  # full: a sixteenth of max_rows (2 rows) goes
        got = s.run(view, {ids: np.arange(0, 8).reshape(1, -1)})[0, :, 0]
    want = np.array([-5, -5, -2, -2, -2, -2, -2, -2], np.float32)
    want[gone] = 0
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# Variables


def test_assign_ops_and_control_dependency_chains(g):
    w = sf.Variable(np.array([1.0, 2.0], np.float32), name="w")
    a = w.assign(np.array([10.0, 20.0], np.float32))
    with sf.control_dependencies([a]):
        after_assign = w.read_value()
    add = w.assign_add(np.array([1.0, 1.0], np.float32))
    sub = w.assign_sub(np.array([0.5, 0.5], np.float32))
    a1 = w.assign(np.zeros(2, np.float32))
    with sf.control_dependencies([a1]):
        a2 = w.assign_add(np.array([3.0, 4.0], np.float32))
        with sf.control_dependencies([a2]):
            a3 = w.assign_sub(np.array([1.0, 1.0], np.float32))
            with sf.control_dependencies([a3]):
                chain = w.read_value() * 2.0
    p = sf.placeholder(sf.float32, [2], name="p")
    assign_p = w.assign(p)
    with sf.control_dependencies([assign_p]):
        fresh = w.read_value()
    i = sf.Variable(np.array([5], np.int64), name="i")
    inc = i.assign_add(np.array([2], np.int64))
    d = sf.Variable(np.array([1.5]), name="d")
    dinc = d.assign_add(np.array([0.25]))
    dep = sf.Variable(w.initial_value * 3.0, name="dep")
    init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run(dep), [3, 6])
        np.testing.assert_array_equal(s.run(a), [10, 20])
        np.testing.assert_array_equal(s.run(after_assign), [10, 20])
        np.testing.assert_array_equal(s.run(add), [11, 21])
        np.testing.assert_array_equal(s.run(sub), [10.5, 20.5])
        np.testing.assert_array_equal(s.run(chain), [4, 6])
        np.testing.assert_array_equal(s.run(w), [2, 3])
        assert s.run(inc).tolist() == [7] and s.run(inc).tolist() == [9]
        assert s.run(dinc).dtype == np.float64 and s.run(d).tolist() == [1.75]
        for k in range(20):  # read_value after an assign in the same step always sees it
            v = np.full(2, float(k), np.float32)
            np.testing.assert_array_equal(s.run(fresh, {p: v}), v)
        s.run(init)  # re-initialising restores the initial values
        np.testing.assert_array_equal(s.run(w), [1, 2])


def test_variable_from_a_numpy_float64_scalar_is_float64(g):
    assert sf.Variable(np.float64(1.5), name="w").dtype == sf.float64


def test_variable_as_tensor_under_control_dependencies_reads_after_the_assign(g):
    w = sf.Variable(np.zeros(1000, np.float32), name="w")
    p = sf.placeholder(sf.float32, [1000], name="p")
    a = w.assign(p)
    with sf.control_dependencies([a]):
        r = sf.identity(w)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        for k in range(20):
            v = np.full(1000, float(k + 1), np.float32)
            np.testing.assert_array_equal(s.run(r, {p: v}), v)


# ---------------------------------------------------------------------------
# Errors: a clear Python exception naming the problem, never a crash (each case runs in a subprocess)

_ERROR_CASES = {
    "assign_shape": ("""
w = sf.Variable(np.zeros(2, np.float32), name="w"); a = w.assign(np.zeros(3, np.float32))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(a)
""", "InvalidArgumentError", r"shape \[2\].*\[3\]"),
    "assign_add_shape_fed": ("""
w = sf.Variable(np.zeros(2, np.float32), name="w"); p = sf.placeholder(sf.float32, None, name="p"); a = w.assign_add(p)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(a, {p: np.zeros(3, np.float32)})
""", "InvalidArgumentError", r"'w'.*\[2\].*\[3\]"),
    "assign_dtype": ("""
w = sf.Variable(np.zeros(2, np.float32), name="w"); p = sf.placeholder(sf.int32, [2], name="p"); w.assign(p)
""", "InvalidArgumentError", "int32.*float32"),
    "uninitialised": ("""
w = sf.Variable(np.zeros(2, np.float32), name="myvar"); a = w.assign_add(np.ones(2, np.float32))
with sf.Session(g) as s: s.run(a)
""", "FailedPreconditionError", "myvar"),
    "lr_vector": ("""
lr = sf.placeholder(sf.float32, None, name="lr"); w = sf.Variable(np.ones(2, np.float32), name="w")
t = sf.train.GradientDescentOptimizer(lr).minimize(sf.ops.sum(w * w))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(t, {lr: np.array([0.1, 0.2], np.float32)})
""", "InvalidArgumentError", "scalar"),
    "lr_vector_sparse": ("""
lr = sf.placeholder(sf.float32, None, name="lr"); t = sf.embedding.EmbeddingTable("tab", rows=4, dim=2)
tr = sf.train.AdagradOptimizer(lr).minimize(sf.ops.sum(t.lookup(np.array([[1]]))))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(tr, {lr: np.array([0.1, 0.2], np.float32)})
""", "InvalidArgumentError", "scalar"),
    "grad_shape_fed": ("""
w = sf.Variable(np.ones(2, np.float32), name="w"); gr = sf.placeholder(sf.float32, None, name="gr")
t = sf.train.AdamOptimizer(0.1).apply_gradients([(gr, w)])
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(t, {gr: np.ones(3, np.float32)})
""", "InvalidArgumentError", r"'w'.*\[2\].*\[3\]"),
    "grad_dtype": ("""
w = sf.Variable(np.ones(2, np.float32), name="w")
sf.train.MomentumOptimizer(0.1, 0.9).apply_gradients([(sf.constant(np.ones(2, np.float64)), w)])
""", "InvalidArgumentError", "float32.*float64"),
    "ids_float": ("""
t = sf.embedding.EmbeddingTable("tab", rows=4, dim=2); ids = sf.placeholder(sf.float32, [None, 2], name="ids")
e = t.lookup(ids)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.zeros((1, 2), np.float32)})
""", "InvalidArgumentError", "tab.*int32 or int64.*float32"),
    "hash_ids_float": ("""
t = sf.embedding.HashEmbeddingTable("hh", dim=2); ids = sf.placeholder(sf.float64, [None, 2], name="ids")
e = t.lookup(ids)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.zeros((1, 2))})
""", "InvalidArgumentError", "hh.*int32 or int64"),
    "ids_rank3": ("""
t = sf.embedding.EmbeddingTable("tab", rows=4, dim=2); ids = sf.placeholder(sf.int64, None, name="ids")
e = t.lookup(ids)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.zeros((1, 2, 2), np.int64)})
""", "InvalidArgumentError", r"tab.*\[batch, k\]"),
    "bad_offsets": ("""
t = sf.embedding.EmbeddingTable("tab", rows=10, dim=2, num_shards=2)
ids = sf.placeholder(sf.int64, [None], name="ids"); off = sf.placeholder(sf.int64, [None], name="off")
e = t.lookup_bag(ids, off)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.array([1, 2, 3]), off: np.array([0, 2, 1])})
""", "InvalidArgumentError", "tab.*offset"),
    "segment_out_of_range": ("""
t = sf.embedding.EmbeddingTable("tab", rows=10, dim=2, num_shards=2)
ids = sf.placeholder(sf.int64, [None], name="ids"); seg = sf.placeholder(sf.int64, [None], name="seg")
e = t.lookup_segments(ids, seg, 2)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.array([1, 2, 3]), seg: np.array([0, 2, 1])})
""", "InvalidArgumentError", "tab.*segment id 2"),
    "bad_combiner": ("""
sf.embedding.EmbeddingTable("tabc", rows=10, dim=2).lookup(np.array([[1]]), combiner="max")
""", "InvalidArgumentError", "tabc.*max"),
    "momentum_on_table": ("""
t = sf.embedding.EmbeddingTable("tabm", rows=10, dim=2)
sf.train.MomentumOptimizer(0.1, 0.9).minimize(sf.ops.sum(t.lookup(np.array([[1]]))))
""", "UnimplementedError", "Momentum.*tabm"),
    "rmsprop_on_hash_table": ("""
t = sf.embedding.HashEmbeddingTable("hr", dim=2)
sf.train.RMSPropOptimizer(0.1).minimize(sf.ops.sum(t.lookup(np.array([[1]]))))
""", "UnimplementedError", "RMSProp.*hr"),
    "second_optimizer_on_hash_table": ("""
t = sf.embedding.HashEmbeddingTable("hh", dim=2); e = sf.ops.sum(t.lookup(np.array([[1]])))
a = sf.train.AdagradOptimizer(0.1).minimize(e); b = sf.train.AdamOptimizer(0.1).minimize(e)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(a); s.run(b)
""", "FailedPreconditionError", "hh.*Adam.*Adagrad"),
    "not_a_variable": ("""
x = sf.constant(np.ones(2, np.float32)); sf.train.AdamOptimizer(0.1).minimize(sf.ops.sum(x * x), var_list=[x])
""", "InvalidArgumentError", "not a variable"),
    "table_rows_lt_shards": ("""
sf.embedding.EmbeddingTable("t0", rows=1, dim=2, num_shards=2)
""", "InvalidArgumentError", "t0"),
    "hash_bad_option": ("""
sf.embedding.HashEmbeddingTable("h0", dim=2, eviction="fifo")
""", "InvalidArgumentError", "h0"),
}

_OUT_OF_RANGE = [(1, "mod", -1), (1, "mod", 10), (2, "mod", 2 ** 62), (3, "mod", -3), (3, "range", 10),
                 (4, "range", -(2 ** 63))]


@pytest.mark.parametrize("case", sorted(_ERROR_CASES))
def test_errors_are_clear_exceptions(case):
    body, exc, pattern = _ERROR_CASES[case]
    line = run_error_case(body)
    assert line.startswith(f"EXC {exc} "), line
    assert re.search(pattern, line), line


@pytest.mark.parametrize("K,part,bad", _OUT_OF_RANGE)
@pytest.mark.parametrize("train", [False, True])
def test_out_of_range_ids_fail_the_step_naming_table_and_id(K, part, bad, train):
    body = f"""
t = sf.embedding.EmbeddingTable("tab", rows=10, dim=2, num_shards={K}, partition="{part}")
ids = sf.placeholder(sf.int64, [None, 2], name="ids"); e = t.lookup(ids)
op = sf.train.AdagradOptimizer(0.1).minimize(sf.ops.sum(e)) if {train} else e
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(op, {{ids: np.array([[0, {bad}]])}})
"""
    line = run_error_case(body)
    assert line.startswith("EXC InvalidArgumentError ") and "'tab'" in line and f"id {bad} " in line, line


def test_offsets_past_the_end_name_the_bad_offset():
    body = """
t = sf.embedding.EmbeddingTable("tab", rows=10, dim=2)
ids = sf.placeholder(sf.int64, [None], name="ids"); off = sf.placeholder(sf.int64, [None], name="off")
e = t.lookup_bag(ids, off)
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(e, {ids: np.array([1, 2, 3]), off: np.array([0, 5])})
"""
    line = run_error_case(body)
    assert line.startswith("EXC InvalidArgumentError ") and "5" in line.split("ids;")[-1], line


@pytest.mark.parametrize("init_value", [0.0, -1.0])
def test_adagrad_rejects_a_non_positive_initial_accumulator(init_value):
    body = f"""
w = sf.Variable(np.array([1.0, 0.0], np.float32), name="w")
t = sf.train.AdagradOptimizer(0.1, initial_accumulator_value={init_value}).minimize(sf.ops.sum(w * w))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(t); print('VALUE', s.run(w))
"""
    line = run_error_case(body)
    assert line.startswith("EXC InvalidArgumentError ") and "initial_accumulator" in line, line


def test_negative_and_nan_learning_rates_follow_the_formula(g):
    # As TF: no check; a negative rate ascends, NaN poisons the variable (no crash).
    w = sf.Variable(np.array([1.0], np.float32), name="w")
    lr = sf.placeholder(sf.float32, [], name="lr")
    train = sf.train.GradientDescentOptimizer(lr).minimize(sf.ops.sum(w * w))
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train, {lr: -0.1})
        np.testing.assert_allclose(s.run(w), [1.2], rtol=1e-6)
        s.run(train, {lr: float("nan")})
        assert np.isnan(s.run(w)).all()
