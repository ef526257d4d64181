"""One embedding table looked up several times by one loss, checked against NumPy.

Minimize trains such a table by ONE sparse update per shard and step, by the
summed gradient of all its lookups (TensorFlow's IndexedSlices aggregation):
Adagrad's accumulator sees (g1 + g2)^2, lazy Adam moves each touched row once
and advances its beta powers once per step. Every expected value comes from an
independent NumPy model of the whole table (float64):

- GradientDescent: E[r] -= lr * G[r]
- Adagrad:         A[r] += G[r]^2; E[r] -= lr * G[r] / sqrt(A[r])      (A starts at initial_accumulator_value)
- Adam (lazy):     t += 1 per step; m[r], v[r] move for touched rows only;
                   E[r] -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m[r] / (sqrt(v[r]) + eps)
- Ftrl, RowwiseAdagrad (the raw sparse ops in segments "rows"; sf.train has no such optimizer):
                   TF's ApplyFtrl; rowwise: R[r] += mean(G[r]^2); E[r] -= lr * G[r] / sqrt(R[r])

where G is the sum over all lookups of each lookup's table gradient and r runs
over the rows any lookup touched. Rows no lookup touched must not move.

Not covered from Python: SyncReplicas (no Python API; the C++ tests cover it)
and Ftrl / RowwiseAdagrad through Minimize (sf.train has neither optimizer).

Tests failing because of a shardflow bug are xfail(strict=True) with the bug as reason.
"""

import re

import numpy as np
import pytest

import shardflow as sf
from reference_support import raw_sparse_apply, ref_combine, ref_sparse_update, ref_table_grad, run_error_case

# ---------------------------------------------------------------------------
# NumPy references


def make_opt(kind, lr, p):
    if kind == "sgd":
        return sf.train.GradientDescentOptimizer(lr)
    if kind == "adagrad":
        return sf.train.AdagradOptimizer(lr, p[0])
    if kind == "adam":
        return sf.train.AdamOptimizer(lr, *p)
    raise ValueError(kind)


OPTS = [("sgd", ()), ("adagrad", (0.1,)), ("adam", (0.9, 0.999, 1e-3)), ("adam", (0.5, 0.8, 1e-2))]


def opt_id(o):
    return f"{o[0]}{'_'.join(str(x) for x in o[1])}"


# ---------------------------------------------------------------------------
# Lookups of one table: how each is built, fed and modelled

# Lookup kinds "mode/combiner": dense ids [batch, k] (sum/mean/sqrtn), combiner none ([batch, k, dim]),
# bags with offsets, segment ids. Each kind has its own id shape.
_DENSE_K = {"sum": 3, "mean": 2, "sqrtn": 4}


class Lookup:
    def __init__(self, t, kind, tag, id_dtype=sf.int64):
        self.kind = kind
        self.mode, self.combiner = kind.split("/")
        self.np_dtype = np.int32 if id_dtype == sf.int32 else np.int64
        if self.mode == "dense":
            self.k = _DENSE_K[self.combiner]
            self.ids = sf.placeholder(id_dtype, [None, self.k], name=f"ids_{tag}")
            self.extra = None
            self.emb = t.lookup(self.ids, combiner=self.combiner)
        elif self.mode == "none":
            self.k = 2
            self.ids = sf.placeholder(id_dtype, [None, self.k], name=f"ids_{tag}")
            self.extra = None
            self.emb = t.lookup(self.ids, combiner="none")
        elif self.mode == "bag":
            self.ids = sf.placeholder(id_dtype, [None], name=f"ids_{tag}")
            self.extra = sf.placeholder(sf.int64, [None], name=f"off_{tag}")
            self.emb = t.lookup_bag(self.ids, self.extra, combiner=self.combiner)
        elif self.mode == "seg":
            self.nseg = 4
            self.ids = sf.placeholder(id_dtype, [None], name=f"ids_{tag}")
            self.extra = sf.placeholder(sf.int64, [None], name=f"seg_{tag}")
            self.emb = t.lookup_segments(self.ids, self.extra, self.nseg, combiner=self.combiner)
        else:
            raise ValueError(kind)
        self.target = sf.placeholder(sf.float32, None, name=f"target_{tag}")
        self.loss = 0.5 * sf.ops.sum(sf.ops.square(self.emb - self.target))

    def batch(self, rng, pool, hot):
        """Positions into `pool` as (feed values, bags of positions, output shape).

        Every batch reads the hot positions (shared with the other lookups) and repeats an id within
        the lookup; positions are drawn from `pool` only (the other rows are never touched)."""
        if self.mode in ("dense", "none"):
            B = 3
            P = rng.choice(pool, (B, self.k))
            P[0, 0] = hot[0]
            P[1, -1] = hot[1]
            P[2, 0] = P[0, 0] if self.k == 1 else P[2, 0]
            P[0, -1] = P[0, 0]  # repeated within one example
            P[2, -1] = hot[0]  # and within the batch
            if self.mode == "dense":
                return (P,), [list(r) for r in P], (B, -1)
            return (P,), [[x] for x in P.ravel()], (B, self.k, -1)
        if self.mode == "bag":
            lens = [2, 0, 3, 1]
            P = rng.choice(pool, sum(lens))
            P[0], P[2], P[4] = hot[0], hot[1], hot[0]
            P[1] = P[0]
            offs = np.cumsum([0] + lens[:-1])
            return (P, offs), [list(P[o:o + n]) for o, n in zip(offs, lens)], (len(lens), -1)
        S = np.array([3, 0, 0, 3, 2, 0, 3])  # segment 1 empty, unsorted
        P = rng.choice(pool, len(S))
        P[0], P[1], P[6] = hot[1], hot[0], hot[1]
        return (P, S), [[P[j] for j in range(len(S)) if S[j] == b] for b in range(self.nseg)], (self.nseg, -1)

    def feeds(self, values, to_id, T):
        ids = np.asarray(to_id(values[0])).astype(self.np_dtype)
        f = {self.ids: ids, self.target: T.astype(np.float32)}
        if self.extra is not None:
            f[self.extra] = values[1]
        return f

    def model(self, E, bags, out_shape, T):
        """The lookup's output, and its table gradient for the loss 0.5 |emb - T|^2."""
        comb = "sum" if self.mode == "none" else self.combiner
        out, w = ref_combine(E, bags, comb)
        if T is None:
            return out.reshape(out_shape[:-1] + (E.shape[1],)), None
        dy = out - T.reshape(out.shape)
        return out.reshape(out_shape[:-1] + (E.shape[1],)), ref_table_grad(E.shape, bags, w, dy)


def _every_row(t, n):
    return t.read_only_view().lookup(sf.constant(np.arange(n).reshape(1, n)), combiner="none")


COMBOS = {
    "dense_sum+bag_mean": ["dense/sum", "bag/mean"],
    "none+seg_sqrtn+dense_mean": ["none/none", "seg/sqrtn", "dense/mean"],
    "seg_sum+bag_sqrtn+dense_sqrtn": ["seg/sum", "bag/sqrtn", "dense/sqrtn"],
    "dense_sum+dense_sum": ["dense/sum", "dense/sum"],
}
SHARDINGS = [(1, "mod"), (2, "mod"), (3, "mod"), (2, "range"), (3, "range")]
ROWS, DIM = 13, 3
COLD = [10, 11, 12]  # never looked up
POOL = np.arange(10)


def _step_batch(lookups, rng, pool, hot, E, id_of):
    """One step's random batch for every lookup: the feeds (ids mapped by id_of, and each output's
    upstream gradient T), the summed table gradient, the touched rows and the expected outputs."""
    feeds, G, touched, wants = {}, np.zeros_like(E), set(), []
    for lk in lookups:
        vals, bags, shape = lk.batch(rng, pool, hot)
        out, _ = lk.model(E, bags, shape, None)
        T = rng.standard_normal(out.shape)
        out, Gi = lk.model(E, bags, shape, T)
        feeds.update(lk.feeds(vals, id_of, T))
        G += Gi
        touched |= {int(x) for b in bags for x in b}
        wants.append(out)
    return feeds, G, touched, wants


def _run_fixed(kind, p, K, part, kinds, steps=4, seed=0, lr=0.1, devices=1, id_dtypes=None):
    """Trains a fixed table through len(kinds) lookups; returns (got table, model table, initial table)."""
    rng = np.random.default_rng(seed)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=ROWS, dim=DIM, num_shards=K, partition=part, seed=3)
        lookups = [Lookup(t, k, i, (id_dtypes or {}).get(i, sf.int64)) for i, k in enumerate(kinds)]
        loss = lookups[0].loss
        for lk in lookups[1:]:
            loss = loss + lk.loss
        train = make_opt(kind, lr, p).minimize(loss)
        every = _every_row(t, ROWS)
        init = sf.global_variables_initializer()
    with sf.Session(g, num_cpu_devices=devices) as s:
        s.run(init)
        E0 = s.run(every)[0].astype(np.float64)
        E, st = E0.copy(), {}
        for _ in range(steps):
            hot = rng.choice(POOL, 2, replace=False)
            feeds, G, touched, wants = _step_batch(lookups, rng, POOL, hot, E, lambda v: v)
            got_out = s.run([lk.emb for lk in lookups], feeds)
            for a, b in zip(got_out, wants):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
            s.run(train, feeds)
            E = ref_sparse_update(kind, E, G, touched, st, lr, p)
        got = s.run(every)[0]
    return got, E, E0


@pytest.mark.parametrize("combo", sorted(COMBOS))
@pytest.mark.parametrize("sharding", SHARDINGS, ids=lambda s: f"{s[0]}{s[1]}")
@pytest.mark.parametrize("opt", OPTS, ids=opt_id)
def test_fixed_table_several_lookups_match_numpy(opt, sharding, combo):
    kind, p = opt
    got, E, E0 = _run_fixed(kind, p, sharding[0], sharding[1], COMBOS[combo])
    np.testing.assert_allclose(got, E, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[COLD], E0[COLD].astype(np.float32))  # lazy: untouched rows stay


@pytest.mark.parametrize("opt", OPTS[1:], ids=opt_id)
def test_summed_update_differs_from_one_update_per_lookup(opt):
    # The model of one update per lookup (what the runtime must NOT do) is far from the result:
    # the comparisons above can tell the two apart.
    kind, p = opt
    rng = np.random.default_rng(0)
    E0 = rng.standard_normal((4, 2))
    g1 = np.zeros((4, 2)); g1[1] = [0.3, -0.2]
    g2 = np.zeros((4, 2)); g2[1] = [0.5, 0.4]
    once = ref_sparse_update(kind, E0, g1 + g2, [1], {}, 0.1, p)
    st = {}
    twice = ref_sparse_update(kind, ref_sparse_update(kind, E0, g1, [1], st, 0.1, p), g2, [1], st, 0.1, p)
    assert np.abs(once - twice).max() > 1e-3


def test_sharded_on_two_devices_and_int32_ids():
    got, E, E0 = _run_fixed("adagrad", (0.1,), 3, "mod", ["dense/sum", "bag/mean", "none/none"], devices=2,
                            id_dtypes={0: sf.int32, 2: sf.int32})
    np.testing.assert_allclose(got, E, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opt", OPTS, ids=opt_id)
def test_the_graph_has_one_sparse_update_per_shard(opt):
    kind, p = opt
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=ROWS, dim=DIM, num_shards=3)
        lks = [Lookup(t, k, i) for i, k in enumerate(["dense/sum", "bag/mean", "seg/sqrtn"])]
        before = len(g.get_operations())
        make_opt(kind, 0.1, p).minimize(lks[0].loss + lks[1].loss + lks[2].loss)
        new = g.get_operations()[before:]
    applies = [op for op in new if op.type.startswith("EmbeddingSparseApply")]
    assert len(applies) == 3, [op.type for op in applies]
    assert sorted(op.node_def["shard"] for op in applies) == [0, 1, 2]
    assert sum(op.type == "EmbeddingSparseGrad" for op in new) == 9
    # Each slot exists once per shard.
    slots = [op for op in g.get_operations() if op.type == "VarHandle" and "/part_0/" in op.node_def["shared_name"]]
    assert len(slots) == {"sgd": 0, "adagrad": 1, "adam": 4}[kind], [op.node_def["shared_name"] for op in slots]


# ---------------------------------------------------------------------------
# Hand-checked cases (small enough to follow with a pencil)


@pytest.mark.parametrize("K,part", [(1, "mod"), (2, "mod"), (2, "range"), (3, "mod")])
def test_adagrad_accumulator_sees_the_square_of_the_sum(K, part):
    # Row 1: lookup a (sum of [1, 1]) gives dy 2 * 1, lookup b (mean of [1, 3]) gives 0.5 * 3:
    # G[1] = 3.5, G[3] = 1.5; A = 0.1 + G^2; row 0, 2, 4, 5 stay at 0.
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=6, dim=1, num_shards=K, partition=part, initializer="zeros")
        a = t.lookup(sf.constant(np.array([[1, 1]])))
        b = t.lookup(sf.constant(np.array([[1, 3]])), combiner="mean")
        train = sf.train.AdagradOptimizer(1.0, 0.1).minimize(sf.ops.sum(a) + 3.0 * sf.ops.sum(b))
        every = _every_row(t, 6)
        init = sf.global_variables_initializer()
    want = np.zeros(6)
    G = np.array([0, 3.5, 0, 1.5, 0, 0])
    A = 0.1 + G ** 2
    want -= np.where(G != 0, G / np.sqrt(A), 0)
    A2 = A + G ** 2
    want2 = want - np.where(G != 0, G / np.sqrt(A2), 0)
    with sf.Session(g) as s:
        s.run(init)
        s.run(train)
        np.testing.assert_allclose(s.run(every)[0, :, 0], want, rtol=1e-6)
        s.run(train)
        np.testing.assert_allclose(s.run(every)[0, :, 0], want2, rtol=1e-6)


@pytest.mark.parametrize("K", [1, 2, 3])
def test_lazy_adam_moves_each_row_once_and_leaves_untouched_rows(K):
    # Step 1: rows 0 and 1 by two lookups; step 2: only row 2 (rows 0, 1 must stay: lazy, even though
    # their m is not zero); the beta powers advance once per step.
    b1, b2, eps, lr = 0.9, 0.99, 1e-3, 0.5
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=6, dim=2, num_shards=K, initializer="zeros")
        ia = sf.placeholder(sf.int64, [None, 2], name="ia")
        ib = sf.placeholder(sf.int64, [None], name="ib")
        ob = sf.placeholder(sf.int64, [None], name="ob")
        la, lb = t.lookup(ia), t.lookup_bag(ib, ob, combiner="sqrtn")
        train = sf.train.AdamOptimizer(lr, b1, b2, eps).minimize(sf.ops.sum(la) + 2.0 * sf.ops.sum(lb))
        every = _every_row(t, 6)
        init = sf.global_variables_initializer()
    E, st = np.zeros((6, 2)), {}
    steps = [({ia: np.array([[0, 1]]), ib: np.array([1, 0, 1, 1]), ob: np.array([0, 1])},
              [0, 1]),
             ({ia: np.array([[2, 2]]), ib: np.array([2]), ob: np.array([0, 1])}, [2])]
    with sf.Session(g) as s:
        s.run(init)
        for f, touched in steps:
            G = np.zeros((6, 2))
            for i in f[ia].ravel():
                G[i] += 1
            off = list(f[ob]) + [len(f[ib])]
            for bag in range(len(f[ob])):
                ids = f[ib][off[bag]:off[bag + 1]]
                for i in ids:
                    G[i] += 2.0 / np.sqrt(len(ids))
            E = ref_sparse_update("adam", E, G, touched, st, lr, (b1, b2, eps))
            s.run(train, f)
            np.testing.assert_allclose(s.run(every)[0], E, rtol=1e-5, atol=1e-7)
    assert np.all(E[3:] == 0)


def test_one_lookup_used_twice_and_one_ids_tensor_looked_up_twice(g):
    # emb used in two terms (one lookup, gradients summed before it) plus a second lookup of the same ids.
    t = sf.embedding.EmbeddingTable("t", rows=5, dim=2, num_shards=2, initializer="zeros")
    ids = sf.constant(np.array([[1, 4]]))
    e1 = t.lookup(ids)
    e2 = t.lookup(ids, combiner="mean")
    loss = sf.ops.sum(e1) + sf.ops.sum(e1 * 2.0) + sf.ops.sum(e2 * 4.0)  # G[1] = G[4] = 3 + 2 = 5
    train = sf.train.AdagradOptimizer(1.0, 1.0).minimize(loss)
    every = _every_row(t, 5)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train)
        want = np.zeros((5, 2))
        want[[1, 4]] = -5 / np.sqrt(26)
        np.testing.assert_allclose(s.run(every)[0], want, rtol=1e-6)


def test_a_lookup_outside_the_loss_is_not_trained(g):
    t = sf.embedding.EmbeddingTable("t", rows=5, dim=1, initializer="zeros")
    used_a = t.lookup(sf.constant(np.array([[1]])))
    unused = t.lookup(sf.constant(np.array([[2]])))  # noqa: F841 - built, not in the loss
    used_b = t.lookup(sf.constant(np.array([[3, 1]])))
    train = sf.train.AdagradOptimizer(1.0, 1.0).minimize(sf.ops.sum(used_a) + sf.ops.sum(used_b))
    every = _every_row(t, 5)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train)
        np.testing.assert_allclose(s.run(every)[0, :, 0], [0, -2 / np.sqrt(5), 0, -1 / np.sqrt(2), 0], rtol=1e-6)


@pytest.mark.parametrize("K", [1, 3])
def test_a_lookup_with_no_ids_beside_one_with_ids(K):
    # The bag lookup gets no ids at all (empty ids, every bag empty): the update is the dense lookup's alone.
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=6, dim=2, num_shards=K, initializer="zeros")
        ia = sf.placeholder(sf.int64, [None, 2], name="ia")
        ib = sf.placeholder(sf.int64, [None], name="ib")
        ob = sf.placeholder(sf.int64, [None], name="ob")
        loss = sf.ops.sum(t.lookup(ia)) + sf.ops.sum(t.lookup_bag(ib, ob, combiner="mean"))
        train = sf.train.AdamOptimizer(0.1, 0.9, 0.999, 1e-3).minimize(loss)
        every = _every_row(t, 6)
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        s.run(train, {ia: np.array([[2, 2]]), ib: np.zeros(0, np.int64), ob: np.array([0, 0])})
        E = ref_sparse_update("adam", np.zeros((6, 2)), np.where(np.arange(6)[:, None] == 2, 2.0, 0.0) * np.ones((6, 2)),
                           [2], {}, 0.1, (0.9, 0.999, 1e-3))
        np.testing.assert_allclose(s.run(every)[0], E, rtol=1e-5, atol=1e-7)


def test_fed_learning_rate_and_var_list_with_two_lookups(g):
    t = sf.embedding.EmbeddingTable("t", rows=4, dim=1, num_shards=2, initializer="zeros")
    u = sf.embedding.EmbeddingTable("u", rows=4, dim=1, num_shards=2, initializer="zeros")
    lr = sf.placeholder(sf.float32, [], name="lr")
    ids = sf.constant(np.array([[0, 1]]))
    loss = sf.ops.sum(t.lookup(ids)) + sf.ops.sum(t.lookup(ids)) + sf.ops.sum(u.lookup(ids))
    train_t = sf.train.AdagradOptimizer(lr, 0.1).minimize(loss, var_list=[t])
    vt, vu = _every_row(t, 4), _every_row(u, 4)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train_t, {lr: 0.5})
        s.run(train_t, {lr: 0.25})
        a1, a2 = 0.1 + 4, 0.1 + 8
        want = -0.5 * 2 / np.sqrt(a1) - 0.25 * 2 / np.sqrt(a2)
        np.testing.assert_allclose(s.run(vt)[0, :, 0], [want, want, 0, 0], rtol=1e-6)
        np.testing.assert_array_equal(s.run(vu)[0], np.zeros((4, 1)))  # not in var_list


# ---------------------------------------------------------------------------
# A table looked up twice and another once, with a dense variable


@pytest.mark.parametrize("opt", OPTS, ids=opt_id)
@pytest.mark.parametrize("Kt,Ku", [(1, 1), (2, 3), (3, 1)])
def test_two_tables_one_looked_up_twice(opt, Kt, Ku):
    kind, p = opt
    rng = np.random.default_rng(11)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=8, dim=2, num_shards=Kt, seed=1)
        u = sf.embedding.EmbeddingTable("u", rows=7, dim=2, num_shards=Ku, partition="range", seed=2)
        w0 = rng.standard_normal((2, 1)).astype(np.float32)
        w = sf.Variable(w0, name="w")
        ia = sf.placeholder(sf.int64, [None, 2], name="ia")
        ib = sf.placeholder(sf.int64, [None], name="ib")
        sb = sf.placeholder(sf.int64, [None], name="sb")
        iu = sf.placeholder(sf.int64, [None, 3], name="iu")
        y = sf.placeholder(sf.float32, [None, 1], name="y")
        h = t.lookup(ia) + t.lookup_segments(ib, sb, 3, combiner="mean") + u.lookup(iu, combiner="sqrtn")
        loss = 0.5 * sf.ops.sum(sf.ops.square(h @ w - y))
        train = make_opt(kind, 0.05, p).minimize(loss)
        vt, vu = _every_row(t, 8), _every_row(u, 7)
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        Et, Eu = s.run(vt)[0].astype(np.float64), s.run(vu)[0].astype(np.float64)
        Et0, Eu0 = Et.copy(), Eu.copy()
        W = w0.astype(np.float64)
        st_t, st_u, st_w = {}, {}, {}
        for _ in range(4):
            A = rng.integers(0, 6, (3, 2))
            A[1, 0] = A[0, 0]
            B = rng.integers(0, 6, 5)
            B[2] = A[0, 0]
            B[3] = B[2]
            S = np.array([2, 0, 0, 2, 1])
            U = rng.integers(0, 5, (3, 3))
            U[0, 1] = U[0, 0]
            Y = rng.standard_normal((3, 1))
            bags_a = [list(r) for r in A]
            bags_b = [[B[j] for j in range(5) if S[j] == k] for k in range(3)]
            bags_u = [list(r) for r in U]
            ea, wa = ref_combine(Et, bags_a, "sum")
            eb, wb = ref_combine(Et, bags_b, "mean")
            eu, wu = ref_combine(Eu, bags_u, "sqrtn")
            H = ea + eb + eu
            r = H @ W - Y
            dh = r @ W.T
            Gt = ref_table_grad(Et.shape, bags_a, wa, dh) + ref_table_grad(Et.shape, bags_b, wb, dh)
            Gu = ref_table_grad(Eu.shape, bags_u, wu, dh)
            gW = H.T @ r
            s.run(train, {ia: A, ib: B, sb: S, iu: U, y: Y.astype(np.float32)})
            Et = ref_sparse_update(kind, Et, Gt, set(A.ravel()) | set(B.ravel()), st_t, 0.05, p)
            Eu = ref_sparse_update(kind, Eu, Gu, set(U.ravel()), st_u, 0.05, p)
            if kind == "sgd":
                W = W - 0.05 * gW
            elif kind == "adagrad":
                st_w["a"] = st_w.get("a", np.full_like(W, p[0])) + gW ** 2
                W = W - 0.05 * gW / np.sqrt(st_w["a"])
            else:
                W = ref_sparse_update("adam", W, gW, [0, 1], st_w, 0.05, p)
        got_t, got_u, got_w = s.run(vt)[0], s.run(vu)[0], s.run(w)
    np.testing.assert_allclose(got_t, Et, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_u, Eu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_w, W, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_t[6:], Et0[6:].astype(np.float32))  # never looked up
    np.testing.assert_array_equal(got_u[5:], Eu0[5:].astype(np.float32))


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("opt", OPTS[:3], ids=opt_id)
def test_large_batches_of_two_lookups_on_the_parallel_paths(K, opt):
    # Many unique rows (>= 4096) and ids: the split sparse gradients and the merge of the rows use the pool.
    kind, p = opt
    rows, dim = 30000, 8
    rng = np.random.default_rng(4)
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("t", rows=rows, dim=dim, num_shards=K, seed=3)
        ids = sf.placeholder(sf.int64, [None], name="ids")
        off = sf.placeholder(sf.int64, [None], name="off")
        ids2 = sf.placeholder(sf.int64, [None, 2], name="ids2")
        c = sf.placeholder(sf.float32, [None, dim], name="c")
        c2 = sf.placeholder(sf.float32, [None, dim], name="c2")
        loss = sf.ops.sum(t.lookup_bag(ids, off, combiner="mean") * c) + sf.ops.sum(t.lookup(ids2) * c2)
        train = make_opt(kind, 0.1, p).minimize(loss)
        every = _every_row(t, rows)
        init = sf.global_variables_initializer()
    with sf.Session(g, compute_threads=2) as s:
        s.run(init)
        E = s.run(every)[0].astype(np.float64)
        E0, st = E.copy(), {}
        for _ in range(2):
            n = 16000
            I, O = rng.integers(0, rows - 100, n), np.arange(0, n, 4)
            I2 = rng.integers(0, rows - 100, (6000, 2))
            C, C2 = rng.standard_normal((n // 4, dim)), rng.standard_normal((6000, dim))
            G = np.zeros_like(E)
            np.add.at(G, I, np.repeat(C, 4, axis=0) / 4)
            np.add.at(G, I2[:, 0], C2)
            np.add.at(G, I2[:, 1], C2)
            E = ref_sparse_update(kind, E, G, np.union1d(I, I2.ravel()), st, 0.1, p)
            s.run(train, {ids: I, off: O, ids2: I2, c: C.astype(np.float32), c2: C2.astype(np.float32)})
        got = s.run(every)[0]
    np.testing.assert_allclose(got, E, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[-100:], E0[-100:].astype(np.float32))


def test_var_list_of_one_shard_float64_rate_and_a_second_optimizer(g):
    t = sf.embedding.EmbeddingTable("t", rows=4, dim=1, num_shards=2, initializer="zeros")
    ids = sf.constant(np.array([[0, 1, 2, 3]]))
    lr = sf.placeholder(sf.float64, [], name="lr")
    loss = sf.ops.sum(t.lookup(ids)) + sf.ops.sum(t.lookup(ids, combiner="mean"))  # G = 1.25 per row
    only_shard_1 = sf.train.AdamOptimizer(lr, 0.9, 0.999, 1e-8).minimize(loss, var_list=[t.shards[1]])
    ada = sf.train.AdagradOptimizer(1.0, 1.0).minimize(loss)
    ada_other = sf.train.AdagradOptimizer(1.0, 1.0).minimize(2.0 * loss)  # its own accumulator
    every = _every_row(t, 4)
    init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        s.run(only_shard_1, {lr: 0.5})  # mod: rows 1 and 3 live in shard 1; Adam's first step moves lr
        np.testing.assert_allclose(s.run(every)[0, :, 0], [0, -0.5, 0, -0.5], rtol=1e-5)
        s.run(init)
        s.run(ada)
        x1 = -1.25 / np.sqrt(1 + 1.25 ** 2)
        np.testing.assert_allclose(s.run(every)[0, :, 0], [x1] * 4, rtol=1e-6)
        s.run(ada_other)
        x2 = x1 - 2.5 / np.sqrt(1 + 2.5 ** 2)
        np.testing.assert_allclose(s.run(every)[0, :, 0], [x2] * 4, rtol=1e-6)


# ---------------------------------------------------------------------------
# Hash tables

HASH_POOL = np.array([0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 62 + 7, -(2 ** 61), 123456789012345, -5, 42], np.int64)
HASH_COLD = np.array([7, -7, 10 ** 15], np.int64)  # never looked up: never made


def _hash_initial_rows(K, seed, ids, dim):
    """A hash row's first value depends on the seed and id only: made in a graph of its own."""
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=dim, num_shards=K, seed=seed)
        v = t.lookup(sf.constant(ids.reshape(1, -1)), combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        return s.run(v)[0].astype(np.float64)


@pytest.mark.parametrize("combo", ["dense_sum+bag_mean", "none+seg_sqrtn+dense_mean"])
@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("opt", OPTS, ids=opt_id)
def test_hash_table_several_lookups_match_numpy(opt, K, combo):
    # The rows are made by the training lookups themselves (first sighting in the step that trains them,
    # possibly by two lookups at once).
    kind, p = opt
    dim = 3
    rng = np.random.default_rng(4)
    every_ids = np.concatenate([HASH_POOL, HASH_COLD])
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=dim, num_shards=K, seed=9)
        lookups = [Lookup(t, k, i) for i, k in enumerate(COMBOS[combo])]
        loss = lookups[0].loss
        for lk in lookups[1:]:
            loss = loss + lk.loss
        train = make_opt(kind, 0.1, p).minimize(loss)
        view = t.read_only_view().lookup(sf.constant(every_ids.reshape(1, -1)), combiner="none")
        init = sf.global_variables_initializer()
    E = _hash_initial_rows(K, 9, every_ids, dim)
    made = np.zeros(len(every_ids), bool)
    pool = np.arange(len(HASH_POOL))
    with sf.Session(g) as s:
        s.run(init)
        st = {}
        for _ in range(4):
            hot = rng.choice(pool, 2, replace=False)
            feeds, G, touched, wants = _step_batch(lookups, rng, pool, hot, E, lambda v: every_ids[v])
            res = s.run([lk.emb for lk in lookups] + [train], feeds)
            for a, b in zip(res, wants):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
            E = ref_sparse_update(kind, E, G, touched, st, 0.1, p)
            made[list(touched)] = True
        got = s.run(view)[0]
    want = np.where(made[:, None], E, 0.0)  # a view reads rows never made as zeros
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[len(HASH_POOL):], 0)


@pytest.mark.parametrize("opt", OPTS, ids=opt_id)
def test_hash_row_made_by_two_lookups_in_one_step(opt):
    # Id 5 is new; both lookups read it in the step that makes it: one row, one update by G = 1 + 2.
    kind, p = opt
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=2, num_shards=2, seed=4)
        a = t.lookup(sf.constant(np.array([[5]], np.int64)))
        b = t.lookup_bag(sf.constant(np.array([5, -3], np.int64)), sf.constant(np.array([0, 1])))
        train = make_opt(kind, 0.3, p).minimize(sf.ops.sum(a) + 2.0 * sf.ops.sum(b))
        view = t.read_only_view().lookup(sf.constant(np.array([[5, -3, 6]], np.int64)), combiner="none")
        init = sf.global_variables_initializer()
    E0 = _hash_initial_rows(2, 4, np.array([5, -3, 6], np.int64), 2)
    G = np.array([[3.0, 3.0], [2.0, 2.0], [0, 0]])
    st = {}
    E1 = ref_sparse_update(kind, E0, G, [0, 1], st, 0.3, p)
    E2 = ref_sparse_update(kind, E1, G, [0, 1], st, 0.3, p)
    with sf.Session(g) as s:
        s.run(init)
        s.run(train)
        got1 = s.run(view)[0]
        s.run(train)
        got2 = s.run(view)[0]
    # atol: float32 beta powers (1 - 0.999^t cancels) as in TF's float32 Adam.
    np.testing.assert_allclose(got1[:2], E1[:2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got2[:2], E2[:2], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got2[2], [0, 0])  # never looked up


def test_hash_ttl_remakes_a_row_read_by_two_lookups_with_fresh_slots(g):
    t = sf.embedding.HashEmbeddingTable("h", dim=2, ttl_steps=2, seed=1, num_shards=2)
    a = sf.placeholder(sf.int64, [None, None], name="a")
    b = sf.placeholder(sf.int64, [None], name="b")
    ea = t.lookup(a)
    eb = t.lookup_segments(b, b * 0, 1, combiner="sqrtn")
    train = sf.train.AdagradOptimizer(0.5).minimize(sf.ops.sum(ea) + sf.ops.sum(eb))
    view = t.read_only_view().lookup(sf.constant(np.array([[5]], np.int64)))
    init = sf.global_variables_initializer()
    five = {a: np.array([[5]]), b: np.array([5, 5, 5, 5])}  # G = 1 + 4 / sqrt(4) = 3
    other = {a: np.array([[6]]), b: np.array([7])}
    with sf.Session(g) as s:
        s.run(init)
        e0 = s.run([ea, train], five)[0]
        want = e0 - 0.5 * 3 / np.sqrt(0.1 + 9)
        np.testing.assert_allclose(s.run(view), want, rtol=1e-6)
        for _ in range(4):
            s.run(train, other)
        np.testing.assert_array_equal(s.run(view), np.zeros((1, 2)))  # expired
        e1 = s.run([ea, train], five)[0]
        np.testing.assert_array_equal(e1, e0)  # the same first row again
        np.testing.assert_allclose(s.run(view), want, rtol=1e-6)  # a fresh accumulator: 0.1 + 9


def test_hash_admission_is_one_decision_per_id_and_step(g):
    # min_count=2 and id 77 read once by each of two lookups of one step:
    # the first lookup to run turns it away, and it stays out for the other,
    # so both read zeros and no gradient reaches a row (before, the other
    # lookup made the row, which lookup read zeros varied from run to run,
    # and the update applied both lookups' gradients). Both sightings count:
    # the next step admits it, and both lookups read the new row.
    t = sf.embedding.HashEmbeddingTable("h", dim=1, min_count=2, seed=3)
    a = sf.placeholder(sf.int64, [None, None], name="a")
    b = sf.placeholder(sf.int64, [None, None], name="b")
    ea, eb = t.lookup(a), t.lookup(b)
    train = sf.train.GradientDescentOptimizer(1.0).minimize(sf.ops.sum(ea) + 10.0 * sf.ops.sum(eb))
    view = t.read_only_view().lookup(sf.constant(np.array([[77]])))
    init = sf.global_variables_initializer()
    feeds = {a: np.array([[77]]), b: np.array([[77]])}
    for _ in range(5):  # either order of the two lookups
        with sf.Session(g) as s:
            s.run(init)
            va, vb, _ = s.run([ea, eb, train], feeds)
            np.testing.assert_array_equal(va, np.zeros((1, 1)))
            np.testing.assert_array_equal(vb, np.zeros((1, 1)))
            np.testing.assert_array_equal(s.run(view), np.zeros((1, 1)))  # no row made
            va, vb, _ = s.run([ea, eb, train], feeds)
            np.testing.assert_array_equal(va, vb)
            assert np.all(va != 0)
            np.testing.assert_allclose(s.run(view), va - 11.0, rtol=1e-6)  # d loss / d row = 1 + 10


# ---------------------------------------------------------------------------
# Ftrl and RowwiseAdagrad: not in sf.train; their sparse ops in segments "rows", fed two lookups'
# EmbeddingSparseGrad rows concatenated (what Minimize builds for them in C++)


def _ref_ftrl(w, acc, lin, g, lr, l1, l2, lr_power):
    acc_new = acc + g * g
    lin = lin + g - (acc_new ** (-lr_power) - acc ** (-lr_power)) / lr * w
    quad = acc_new ** (-lr_power) / lr + 2 * l2
    w = np.where(np.abs(lin) > l1, (np.sign(lin) * l1 - lin) / quad, 0.0)
    return w, acc_new, lin


@pytest.mark.parametrize("hashed", [False, True], ids=["fixed", "hash"])
@pytest.mark.parametrize("kind", ["ftrl", "rowwise_adagrad"])
def test_ftrl_and_rowwise_adagrad_on_the_rows_of_two_lookups(hashed, kind):
    rows, dim = 7, 3
    rng = np.random.default_rng(6)
    g = sf.Graph()
    with g.as_default():
        t = (sf.embedding.HashEmbeddingTable("t", dim=dim, seed=2) if hashed else
             sf.embedding.EmbeddingTable("t", rows=rows, dim=dim, seed=2))
        ia = sf.placeholder(sf.int64, [None, 2], name="ia")
        ib = sf.placeholder(sf.int64, [None], name="ib")
        ob = sf.placeholder(sf.int64, [None], name="ob")
        t.lookup(ia)
        t.lookup_bag(ib, ob, combiner="mean")
        la, lb = [op for op in g.get_operations() if op.type == "EmbeddingShardLookup"]
        keep = ("table", "table_rows", "num_shards", "shard", "partition")
        attrs = {k: v for k, v in la.node_def.items() if k in keep}
        da = sf.placeholder(sf.float32, [None, dim], name="da")
        db = sf.placeholder(sf.float32, [None, dim], name="db")
        sh = t.shards[0]
        ga = sf.ops.embedding_sparse_grad(sh, ia, da, combiner="sum", segments="dense", **attrs)
        gb = sf.ops.embedding_sparse_grad(sh, ib, ob, db, combiner="mean", segments="offsets", **attrs)
        r = sf.ops.concat(ga[0], gb[0], axis=0)
        v = sf.ops.concat(ga[1], gb[1], axis=0)
        rattrs = dict(attrs, segments="rows", combiner="sum")
        op = raw_sparse_apply(kind, hashed, sh, rows, dim, [r, v], rattrs)
        every = sf.constant(np.arange(rows).reshape(1, -1))
        make_rows = t.lookup(every, combiner="none")
        view = t.read_only_view().lookup(every, combiner="none")
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        E = s.run(make_rows)[0].astype(np.float64)
        A, L, R = np.full((rows, dim), 0.1), np.zeros((rows, dim)), np.full((rows, 1), 0.1)
        for _ in range(3):
            I = rng.integers(0, rows - 2, (2, 2))
            I[1, 1] = I[0, 0]
            B = np.array([I[0, 0], I[0, 0], rng.integers(0, rows - 2), I[1, 0]])
            O = np.array([0, 3])
            Da = rng.standard_normal((2, dim)).astype(np.float32)
            Db = rng.standard_normal((2, dim)).astype(np.float32)
            G = ref_table_grad(E.shape, [list(x) for x in I], [1.0, 1.0], Da.astype(np.float64))
            G += ref_table_grad(E.shape, [list(B[:3]), list(B[3:])], [1 / 3, 1.0], Db.astype(np.float64))
            tch = sorted(set(I.ravel()) | set(B))
            if kind == "ftrl":
                E[tch], A[tch], L[tch] = _ref_ftrl(E[tch], A[tch], L[tch], G[tch], 0.1, 0.02, 0.01, -0.5)
            else:
                R[tch] += np.mean(G[tch] ** 2, axis=1, keepdims=True)
                E[tch] -= 0.2 * G[tch] / np.sqrt(R[tch])
            s.run(op, {ia: I, ib: B, ob: O, da: Da, db: Db})
        got = s.run(view)[0]
    np.testing.assert_allclose(got, E, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Errors: clear exceptions, never a crash (each case in a subprocess)

_ERROR_CASES = {
    "view_and_table_in_one_loss": ("""
t = sf.embedding.EmbeddingTable("tabv", rows=4, dim=2, num_shards=2); ids = sf.constant(np.array([[1]]))
loss = sf.ops.sum(t.lookup(ids)) + sf.ops.sum(t.read_only_view().lookup(ids))
sf.train.AdagradOptimizer(0.1).minimize(loss)
""", "InvalidArgumentError", r"'tabv'.*read-only view"),
    "view_twice_in_loss_hash": ("""
t = sf.embedding.HashEmbeddingTable("hv", dim=2); v = t.read_only_view(); ids = sf.constant(np.array([[1]]))
sf.train.AdamOptimizer(0.1).minimize(sf.ops.sum(v.lookup(ids)) + sf.ops.sum(v.lookup(ids)))
""", "InvalidArgumentError", r"'hv'.*read-only view"),
    "momentum_two_lookups": ("""
t = sf.embedding.EmbeddingTable("tabm", rows=4, dim=2); ids = sf.constant(np.array([[1]]))
sf.train.MomentumOptimizer(0.1, 0.9).minimize(sf.ops.sum(t.lookup(ids)) + sf.ops.sum(t.lookup(ids)))
""", "UnimplementedError", "Momentum.*tabm"),
    "rmsprop_two_lookups_hash": ("""
t = sf.embedding.HashEmbeddingTable("hr", dim=2, num_shards=2); ids = sf.constant(np.array([[1]]))
sf.train.RMSPropOptimizer(0.1).minimize(sf.ops.sum(t.lookup(ids)) + sf.ops.sum(t.lookup_bag(np.array([1]), np.array([0]))))
""", "UnimplementedError", "RMSProp.*hr"),
    "second_lookup_out_of_range": ("""
t = sf.embedding.EmbeddingTable("tabo", rows=6, dim=2, num_shards=2)
a = sf.placeholder(sf.int64, [None, 2], name="a"); b = sf.placeholder(sf.int64, [None], name="b")
tr = sf.train.AdagradOptimizer(0.1).minimize(sf.ops.sum(t.lookup(a)) + sf.ops.sum(t.lookup_segments(b, b * 0, 1)))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(tr, {a: np.array([[0, 1]]), b: np.array([2, 6])})
""", "InvalidArgumentError", r"'tabo'.*id 6"),
    "second_lookup_bad_offsets": ("""
t = sf.embedding.EmbeddingTable("tabb", rows=6, dim=2, num_shards=3)
a = sf.placeholder(sf.int64, [None, 2], name="a"); b = sf.placeholder(sf.int64, [None], name="b"); o = sf.placeholder(sf.int64, [None], name="o")
tr = sf.train.AdamOptimizer(0.1).minimize(sf.ops.sum(t.lookup(a)) + sf.ops.sum(t.lookup_bag(b, o)))
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(tr, {a: np.array([[0, 1]]), b: np.array([1, 2]), o: np.array([1, 0])})
""", "InvalidArgumentError", "tabb.*offset"),
    "rows_update_int32_rows": ("""
t = sf.embedding.EmbeddingTable("tabr", rows=4, dim=2)
op = sf.ops.embedding_sparse_apply_gradient_descent(t.shards[0], sf.constant(np.float32(0.1)), sf.constant(np.array([1], np.int32)),
    sf.constant(np.ones((1, 2), np.float32)), table="tabr", table_rows=4, num_shards=1, shard=0, segments="rows")
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(op)
""", "InvalidArgumentError", "tabr.*int64"),
    "sparse_grad_of_rows": ("""
t = sf.embedding.EmbeddingTable("tabs", rows=4, dim=2)
op = sf.ops.embedding_sparse_grad(t.shards[0], sf.constant(np.array([1], np.int64)), sf.constant(np.ones((1, 2), np.float32)),
    table="tabs", table_rows=4, num_shards=1, shard=0, segments="rows")
with sf.Session(g) as s: s.run(sf.global_variables_initializer()); s.run(op)
""", "InvalidArgumentError", "tabs.*segments"),
}


@pytest.mark.parametrize("case", sorted(_ERROR_CASES))
def test_errors_are_clear(case):
    body, exc, pattern = _ERROR_CASES[case]
    line = run_error_case(body)
    assert line.startswith(f"EXC {exc} "), line
    assert re.search(pattern, line), line


def test_refused_minimize_adds_no_update_or_slot(g):
    # The read-only refusal comes before any update or slot is added: the graph is usable afterwards.
    t = sf.embedding.EmbeddingTable("t", rows=4, dim=1, initializer="zeros")
    ids = sf.constant(np.array([[1]]))
    a = t.lookup(ids)
    bad = sf.ops.sum(a) + sf.ops.sum(t.read_only_view().lookup(ids))
    n = len(g.get_operations())
    with pytest.raises(sf.errors.InvalidArgumentError, match="read-only view"):
        sf.train.AdamOptimizer(0.1).minimize(bad)
    new = g.get_operations()[n:]
    assert not [op for op in new if op.type == "VarHandle" or op.type.startswith("EmbeddingSparseApply")], \
        [op.type for op in new]
    train = sf.train.AdagradOptimizer(1.0, 1.0).minimize(sf.ops.sum(a) + sf.ops.sum(t.lookup(ids)))
    every = _every_row(t, 4)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train)
        np.testing.assert_allclose(s.run(every)[0, :, 0], [0, -2 / np.sqrt(5), 0, 0], rtol=1e-6)
