"""tf.SparseTensor with tf.sparse_tensor_dense_matmul, tf.sparse.to_dense, tf.sparse_to_dense and
tf.nn.embedding_lookup_sparse, written as TF 1.x programs use them, checked against NumPy; and the TF 1.x
names shardflow refuses (tf.py_func, tf.sparse_placeholder) with what to use instead."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _dense(indices, values, shape, default=0):
    out = np.full(shape, default, np.asarray(values).dtype)
    for i, v in zip(indices, values):
        out[tuple(i)] = v
    return out


def test_sparse_tensor_dense_matmul_and_to_dense_match_numpy():
    rng = np.random.RandomState(0)
    indices = np.array([[2, 1], [0, 3], [0, 0], [3, 2]], np.int64)  # not in row-major order
    values = rng.randn(4).astype(np.float32)
    sp = tf.SparseTensor(indices=indices, values=values, dense_shape=[5, 4])
    assert sp.dtype == tf.float32 and sp.get_shape().as_list() == [5, 4]
    b = rng.randn(4, 3).astype(np.float32)
    bt = rng.randn(3, 5).astype(np.float32)
    a = _dense(indices, values, (5, 4))
    y = tf.sparse_tensor_dense_matmul(sp, b)
    ya = tf.sparse_tensor_dense_matmul(sp, bt, adjoint_a=True, adjoint_b=True)  # (A^T)(B^T): [4, 3]
    d = tf.sparse.to_dense(sp)
    d7 = tf.sparse_tensor_to_dense(sp, default_value=7.0)
    with tf.Session() as sess:
        got_y, got_ya, got_d, got_d7, val = sess.run([y, ya, d, d7, sp])
        assert d.eval() is not None
    np.testing.assert_allclose(got_y, a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_ya, a.T @ bt.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_d, a)
    np.testing.assert_array_equal(got_d7, _dense(indices, values, (5, 4), 7.0))
    assert isinstance(val, tf.SparseTensorValue)
    np.testing.assert_array_equal(val.indices, indices)
    np.testing.assert_array_equal(val.values, values)
    np.testing.assert_array_equal(val.dense_shape, [5, 4])


def test_sparse_matmul_gradients_and_fed_parts():
    idx = tf.placeholder(tf.int64, [None, 2])
    vals = tf.placeholder(tf.float32, [None])
    shape = tf.placeholder(tf.int64, [2])
    sp = tf.SparseTensor(idx, vals, shape)
    assert sp.shape.as_list() == [None, None]
    w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
    loss = tf.reduce_sum(tf.sparse_tensor_dense_matmul(sp, w) * tf.constant([[1.0, 2.0]]))
    gw, gv = tf.gradients(loss, [w, vals])
    feed = {idx: [[0, 2], [1, 0], [1, 2]], vals: [1.0, 2.0, 3.0], shape: [2, 3]}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        l, g_w, g_v = sess.run([loss, gw, gv], feed)
    a = _dense(feed[idx], np.float32(feed[vals]), (2, 3))
    wn = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(l, ((a @ wn) * [[1.0, 2.0]]).sum())
    np.testing.assert_allclose(g_w, a.T @ np.array([[1.0, 2.0], [1.0, 2.0]]))
    np.testing.assert_allclose(g_v, [wn[2] @ [1, 2], wn[0] @ [1, 2], wn[2] @ [1, 2]])


def test_sparse_to_dense_of_tf1_and_repeated_indices():
    d = tf.sparse_to_dense([[0, 1], [2, 2]], [3, 3], [5, 6], default_value=-1)
    v = tf.sparse_to_dense([4, 1], [6], 1.0)  # rank-1 indices, one value for all
    rep = tf.sparse.to_dense(tf.SparseTensor([[0, 0], [0, 0]], [1.0, 2.0], [2, 2]))
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(d), [[-1, 5, -1], [-1, -1, -1], [-1, -1, 6]])
        np.testing.assert_array_equal(sess.run(v), [0, 1, 0, 0, 1, 0])
        with pytest.raises(tf.errors.InvalidArgumentError, match="indices repeat"):
            sess.run(rep)
        with pytest.raises(tf.errors.InvalidArgumentError, match="out of bounds"):
            sess.run(tf.sparse.to_dense(tf.SparseTensor([[0, 4]], [1.0], [3, 3])))  # would land on [1, 1]
        with pytest.raises(tf.errors.InvalidArgumentError, match="inner dimensions differ"):
            sess.run(tf.sparse_tensor_dense_matmul(tf.SparseTensor([[0, 0]], [1.0], [2, 3]), tf.ones([4, 2])))


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_embedding_lookup_sparse_matches_numpy(combiner):
    rng = np.random.RandomState(1)
    params = rng.randn(10, 4).astype(np.float32)
    # batch of 3: row 0 has ids 3, 7 (weights 1, 2); row 1 none; row 2 has 3 three times
    ind = [[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]]
    ids = tf.SparseTensor(ind, tf.constant([3, 7, 3, 3, 3], tf.int64), [3, 3])
    wts = tf.SparseTensor(ind, [1.0, 2.0, 0.5, 1.0, 1.5], [3, 3])
    shards = [tf.constant(params[0::2]), tf.constant(params[1::2])]  # "mod" over two shards
    out = tf.nn.embedding_lookup_sparse(shards, ids, wts, combiner=combiner)
    unweighted = tf.nn.embedding_lookup_sparse(tf.constant(params), ids, None, combiner=combiner)
    with tf.Session() as sess:
        got, got_u = sess.run([out, unweighted])
    for result, weights in ((got, [1.0, 2.0, 0.5, 1.0, 1.5]), (got_u, [1.0] * 5)):
        want = np.zeros((3, 4), np.float32)
        for row, members in ((0, [(3, 0), (7, 1)]), (2, [(3, 2), (3, 3), (3, 4)])):
            w = np.array([weights[k] for _, k in members], np.float32)
            total = sum(params[i] * weights[k] for i, k in members)
            scale = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w * w).sum())}[combiner]
            want[row] = total / scale
        if result is got and combiner != "sum":
            want[1] = np.nan  # TF 1.x divides an empty row's zeros by its zero weight sum
        np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="combiner"):
        tf.nn.embedding_lookup_sparse(tf.constant(params), ids, None, combiner="max")


def test_embedding_lookup_sparse_has_tf1s_rows_for_rows_without_ids():
    # TF 1.x's sparse_segment ops: rows up to the last one with an id (dense_shape[0] is 4 here, the result has
    # 2 rows), an empty row in between is 0 without weights and 0 / 0 with them
    params = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))
    ids = tf.SparseTensor([[1, 0], [1, 1]], tf.constant([2, 3], tf.int64), [4, 2])
    wts = tf.SparseTensor([[1, 0], [1, 1]], [1.0, 3.0], [4, 2])
    plain = tf.nn.embedding_lookup_sparse(params, ids, None)
    weighted = tf.nn.embedding_lookup_sparse(params, ids, wts, combiner="mean")
    summed = tf.nn.embedding_lookup_sparse(params, ids, wts, combiner="sum")
    with tf.Session() as sess:
        p, w, s = sess.run([plain, weighted, summed])
    np.testing.assert_array_equal(p, [[0, 0], [5, 6]])
    assert np.isnan(w[0]).all()
    np.testing.assert_array_equal(w[1], [(4 + 18) / 4.0, (5 + 21) / 4.0])
    np.testing.assert_array_equal(s, [[0, 0], [22, 26]])


def test_refused_names_say_what_to_use():
    with pytest.raises(tf.errors.UnimplementedError, match="tf.py_func .*tf.placeholder.*from_generator"):
        tf.py_func(np.sin, [tf.constant(1.0)], tf.float32)
    with pytest.raises(tf.errors.UnimplementedError, match="tf.py_func"):
        tf.py_function(np.sin, [tf.constant(1.0)], tf.float32)
    with pytest.raises(tf.errors.UnimplementedError, match="tf.sparse_placeholder .*tf.SparseTensor"):
        tf.sparse_placeholder(tf.float32)
    with pytest.raises(AttributeError, match="tf.sparse.reorder is not in shardflow"):
        tf.sparse.reorder
    with pytest.raises(TypeError, match="needs a tf.SparseTensor"):
        tf.sparse.to_dense(tf.constant([1.0]))
    with pytest.raises(ValueError, match="rank-2"):
        tf.sparse_tensor_dense_matmul(tf.SparseTensor([[0, 0, 0]], [1.0], [1, 1, 1]), tf.ones([1, 1]))
