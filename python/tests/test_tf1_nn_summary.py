"""TF 1.x's tf.nn.embedding_lookup and tf.nn.in_top_k, as TF 1.x programs use them,
checked against NumPy models of TensorFlow's documented results."""

import numpy as np
import pytest

import shardflow as tf


def np_location(i, rows, strategy):
    """(shard, row) of id i in TensorFlow 1.x's partition strategies, written out in NumPy."""
    n = len(rows)
    if strategy == "mod":
        return i % n, i // n
    total = sum(rows)
    per, extras = total // n, total % n
    p = max(i // (per + 1), (i - extras) // per)
    return p, (i % (per + 1) if p < extras else (i - extras) % per)


def np_lookup(shards, ids, strategy):
    rows = [s.shape[0] for s in shards]
    out = [shards[p][r] for p, r in (np_location(i, rows, strategy) for i in ids.reshape(-1))]
    return np.array(out).reshape(ids.shape + shards[0].shape[1:])


@pytest.mark.parametrize("strategy,rows", [("mod", [4, 4, 3]), ("div", [4, 4, 3]), ("div", [3, 3, 3])])
def test_embedding_lookup_over_shards_matches_tf_partitioning(strategy, rows):
    rng = np.random.RandomState(1)
    shards = [rng.randn(r, 3).astype(np.float32) for r in rows]
    ids = rng.randint(0, sum(rows), size=(4, 5)).astype(np.int32)
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(s, name=f"emb_{k}") for k, s in enumerate(shards)]
        got = tf.nn.embedding_lookup(vs, ids, partition_strategy=strategy)
        assert got.get_shape().as_list() == [4, 5, 3]
        # d(sum(got * w)) / d shard: w's rows added at each looked-up row
        w = rng.randn(4, 5, 3).astype(np.float32)
        grads = tf.gradients(tf.reduce_sum(got * w), vs)
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        values, gvals = sess.run([got, grads])
    np.testing.assert_allclose(values, np_lookup(shards, ids, strategy), rtol=1e-6)
    want = [np.zeros_like(s) for s in shards]
    for i, wrow in zip(ids.reshape(-1), w.reshape(-1, 3)):
        p, r = np_location(i, rows, strategy)
        want[p][r] += wrow
    for gv, wv in zip(gvals, want):
        np.testing.assert_allclose(np.asarray(gv), wv, rtol=1e-5, atol=1e-6)


def test_embedding_lookup_single_variable_trains_only_looked_up_rows():
    g = tf.Graph()
    with g.as_default():
        emb = tf.get_variable("emb", initializer=tf.constant(np.ones((5, 2), np.float32)))
        ids = tf.placeholder(tf.int32, [None])
        loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, ids))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {ids: [1, 3, 3]})
        np.testing.assert_allclose(sess.run(emb), [[1, 1], [0.5, 0.5], [1, 1], [0, 0], [1, 1]])
        with pytest.raises(tf.errors.InvalidArgumentError):
            sess.run(loss, {ids: [7]})  # out of range fails, as TF's CPU gather


def test_embedding_lookup_max_norm_and_bad_strategy():
    table = np.array([[3.0, 4.0], [0.3, 0.4]], np.float32)
    with tf.Graph().as_default():
        got = tf.nn.embedding_lookup(tf.constant(table), [0, 1], max_norm=1.0)
        with pytest.raises(ValueError, match="partition strategy"):
            tf.nn.embedding_lookup([tf.constant(table)] * 2, [0], partition_strategy="hash")
        with tf.Session() as sess:
            np.testing.assert_allclose(sess.run(got), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)


def test_in_top_k_follows_tf_ties_and_invalid_rows():
    preds = np.array([[0.1, 0.8, 0.05, 0.05],
                      [0.3, 0.3, 0.3, 0.1],     # a three-way tie: every tied class is in the top 1
                      [0.5, 0.2, 0.2, 0.1],
                      [0.5, 0.2, np.nan, 0.1],  # a non-finite prediction: False
                      [0.5, 0.2, 0.2, 0.1]], np.float32)
    targets = np.array([1, 2, 2, 0, 4], np.int32)  # the last is out of range: False
    with tf.Graph().as_default():
        p = tf.placeholder(tf.float32, [None, 4])
        t = tf.placeholder(tf.int32, [None])
        k1, k2 = tf.nn.in_top_k(p, t, 1), tf.nn.in_top_k(p, t, 2)
        correct = tf.reduce_mean(tf.cast(tf.nn.in_top_k(p, t, 1), tf.float32))
        with tf.Session() as sess:
            a, b, c = sess.run([k1, k2, correct], {p: preds, t: targets})
    assert a.tolist() == [True, True, False, False, False]
    assert b.tolist() == [True, True, True, False, False]
    assert c == pytest.approx(0.4)
