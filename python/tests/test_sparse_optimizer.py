"""Optimizer.set_sparse_optimizer (the C++ Optimizer::SetSparseOptimizer): one minimize, one backward pass, the
tables' sparse updates by the sparse optimizer and the rest by this one, as two minimize calls would train."""

import numpy as np
import pytest

import shardflow as sf


def build(split):
    """A table (zeros: both builds start equal) feeding a dense layer; Adam on the layer, Adagrad on the table (one or two minimize calls)."""
    g = sf.Graph()
    with g.as_default():
        table = sf.embedding.EmbeddingTable("emb", rows=40, dim=4, num_shards=2, initializer="zeros")
        ids = sf.placeholder(sf.int64, [None, 2], name="ids")
        w = sf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        loss = sf.reduce_sum(sf.ops.square(sf.matmul(table.lookup(ids, combiner="sum"), w) - 1.0))
        adam, adagrad = sf.train.AdamOptimizer(0.01), sf.train.AdagradOptimizer(0.1)
        if split:
            assert adam.set_sparse_optimizer(adagrad) is adam
            train = adam.minimize(loss)
        else:
            train = sf.group(adagrad.minimize(loss, var_list=[table]), adam.minimize(loss, var_list=[w]))
        init = sf.global_variables_initializer()
    return g, ids, loss, train, init, table, w


def ops_of(g, kind):
    return sum(op.type == kind for op in g.get_operations())


def test_one_backward_pass_with_the_tables_by_the_sparse_optimizer():
    g1, *_ = build(split=True)
    g2, *_ = build(split=False)
    assert ops_of(g1, "EmbeddingSparseApplyAdagrad") == 2
    assert ops_of(g1, "EmbeddingSparseApplyAdam") == 0
    assert ops_of(g1, "ApplyAdam") == 1
    # Two minimize calls build the backward twice; the split optimizer once.
    assert ops_of(g1, "MatMul") < ops_of(g2, "MatMul")


def test_trains_as_two_minimize_calls():
    feeds = np.array([[1, 2], [3, 3], [39, 0]], np.int64)
    results = []
    for split in (True, False):
        g, ids, loss, train, init, table, w = build(split)
        with sf.Session(g, num_cpu_devices=2) as s:
            s.run(init)
            first = s.run(loss, {ids: feeds})
            for _ in range(5):
                s.run(train, {ids: feeds})
            results.append((first, s.run(loss, {ids: feeds}), s.run(w), s.run(table.lookup(np.arange(40)[:, None]))))
    (first, last, w1, t1), (_, last2, w2, t2) = results
    assert last < first
    np.testing.assert_allclose(last, last2, rtol=1e-5)
    np.testing.assert_allclose(w1, w2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t1, t2, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_refused():
    adam = sf.train.AdamOptimizer(0.01)
    with pytest.raises(sf.errors.InvalidArgumentError, match="set_sparse_optimizer takes an Optimizer"):
        adam.set_sparse_optimizer("adagrad")
    with pytest.raises(sf.errors.InvalidArgumentError, match="its own sparse optimizer"):
        adam.set_sparse_optimizer(adam)
    assert adam.set_sparse_optimizer(None) is adam
