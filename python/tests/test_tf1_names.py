"""TF 1.x names a migrating program uses, with TF 1.x's meanings (issue 39, first part)."""

import numpy as np
import pytest

import shardflow as tf


def _run(fetches, feed=None):
    with tf.Session(tf.get_default_graph()) as s:
        s.run(tf.global_variables_initializer())
        return s.run(fetches, feed or {})


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def test_binary_and_comparison_names():
    a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    b = tf.constant([2.0, 2.0])
    outs = _run([tf.add(a, b), tf.subtract(a, 1), tf.multiply(2, a), tf.equal(a, b), tf.not_equal(a, b),
                 tf.less(a, b), tf.less_equal(a, b), tf.greater(a, b), tf.greater_equal(a, b),
                 tf.logical_and(tf.less(a, 4.0), tf.greater(a, 1.0)), tf.logical_or(tf.less(a, 2.0), tf.equal(a, 4.0)),
                 tf.logical_not(tf.less(a, b))])
    x, y = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([2.0, 2.0], np.float32)
    want = [x + y, x - 1, 2 * x, x == y, x != y, x < y, x <= y, x > y, x >= y, (x < 4) & (x > 1), (x < 2) | (x == 4),
            ~(x < y)]
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(got, w)
    assert outs[0].dtype == np.float32 and outs[3].dtype == np.bool_


def test_reductions_take_tf1_keywords():
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    s1, m1, p1 = _run([tf.reduce_sum(x, reduction_indices=[1]), tf.reduce_mean(x, reduction_indices=0, keep_dims=True),
                       tf.reduce_prod(x, 1, keep_dims=True)])
    np.testing.assert_array_equal(s1, [3, 12])
    np.testing.assert_array_equal(m1, [[1.5, 2.5, 3.5]])
    np.testing.assert_array_equal(p1, [[0], [60]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="reduction_indices"):
        tf.reduce_sum(x, axis=0, reduction_indices=0)


def test_arg_max_and_initialize_all_variables():
    x = tf.constant([[1.0, 9.0, 3.0], [7.0, 2.0, 8.0]])
    v = tf.Variable(np.float32(5.0))
    with tf.Session(tf.get_default_graph()) as s:
        s.run(tf.initialize_all_variables())
        am, an, val = s.run([tf.arg_max(x, 1), tf.arg_min(x, 0), v])
    np.testing.assert_array_equal(am, [1, 2])
    np.testing.assert_array_equal(an, [0, 1, 0])
    assert val == 5.0


def test_random_names_with_constant_and_fed_parameters():
    std = tf.placeholder(tf.float32, [])
    n = tf.random_normal([20000], mean=3.0, stddev=2.0, seed=1)
    nf = tf.random_normal([20000], stddev=std, seed=2)  # stddev fed, as TF 1.x allows
    t = tf.truncated_normal([20000], stddev=0.5, seed=3)
    u = tf.random_uniform([20000], minval=-1, maxval=3, seed=4)
    u1 = tf.random_uniform([20000], seed=5)
    with tf.Session(tf.get_default_graph()) as s:
        a, b, c, d, e = s.run([n, nf, t, u, u1], {std: 4.0})
    assert abs(a.mean() - 3.0) < 0.1 and abs(a.std() - 2.0) < 0.1
    assert abs(b.std() - 4.0) < 0.15
    assert np.all(np.abs(c) <= 1.0) and 0.3 < c.std() < 0.5  # within 2 stddev, so narrower than 0.5
    assert d.min() >= -1 and d.max() < 3 and abs(d.mean() - 1.0) < 0.05
    assert e.min() >= 0 and e.max() < 1
    with pytest.raises(tf.errors.UnimplementedError, match="int32"):
        tf.random_uniform([3], maxval=10, dtype=tf.int32)


def test_nn_conv2d_and_pools_with_tf1_signatures():
    x_np = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3) / 10
    f_np = np.linspace(-1, 1, 2 * 2 * 3 * 5, dtype=np.float32).reshape(2, 2, 3, 5)
    x = tf.placeholder(tf.float32, [None, 4, 4, 3])
    conv = tf.nn.conv2d(x, f_np, strides=[1, 2, 2, 1], padding="VALID")
    mp = tf.nn.max_pool(x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    ap = tf.nn.avg_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
    c, m, a = _run([conv, mp, ap], {x: x_np})
    # References in NumPy.
    want_c = np.zeros((2, 2, 2, 5), np.float32)
    for i in range(2):
        for j in range(2):
            patch = x_np[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :]
            want_c[:, i, j, :] = np.tensordot(patch, f_np, axes=([1, 2, 3], [0, 1, 2]))
    np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m, x_np.reshape(2, 2, 2, 2, 2, 3).max(axis=(2, 4)))
    want_a = np.stack([np.stack([x_np[:, i:i + 2, j:j + 2, :].mean(axis=(1, 2)) for j in range(3)], 1)
                       for i in range(3)], 1)
    np.testing.assert_allclose(a, want_a, rtol=1e-6)
    with pytest.raises(tf.errors.UnimplementedError, match="NCHW"):
        tf.nn.conv2d(x, f_np, strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW")
    with pytest.raises(tf.errors.UnimplementedError, match="dilations"):
        tf.nn.conv2d(x, f_np, strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 2, 2, 1])


def test_placeholder_shape_as_an_int():
    p = tf.placeholder(tf.float32, shape=100)
    assert p.shape.as_list() == [100]
    np.testing.assert_array_equal(_run(p * 2, {p: np.ones(100, np.float32)}), np.full(100, 2, np.float32))


def test_clip_by_norm_global_norm_and_clip_by_global_norm_as_tf1():
    a_np = np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)
    b_np = np.array([12.0], np.float32)
    a, b = tf.constant(a_np), tf.constant(b_np)
    clipped, norm = tf.clip_by_global_norm([a, None, b], 6.5)
    assert clipped[1] is None
    small, _ = tf.clip_by_global_norm([a], 100.0)
    inf_clip, _ = tf.clip_by_global_norm([tf.constant([np.inf, 1.0])], 1.0)
    rows = tf.clip_by_norm(a, 2.5, axes=[1])
    whole = tf.clip_by_norm(a, 2.5)
    got = _run([clipped[0], clipped[2], norm, small[0], inf_clip[0], rows, whole, tf.global_norm([a, b])])
    g = np.sqrt(25 + 144)  # 13
    np.testing.assert_allclose(got[0], a_np * 6.5 / g, rtol=1e-6)
    np.testing.assert_allclose(got[1], b_np * 6.5 / g, rtol=1e-6)
    assert got[2] == pytest.approx(13.0) and got[7] == pytest.approx(13.0)
    np.testing.assert_allclose(got[3], a_np)  # under the limit: unchanged
    assert np.all(np.isnan(got[4]))  # a non-finite norm gives NaN, as TF
    np.testing.assert_allclose(got[5], [[1.5, 2.0], [0.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(got[6], a_np * 2.5 / 5.0, rtol=1e-6)
    x = tf.placeholder(tf.float32, [2])
    (gx,) = tf.gradients(tf.reduce_sum(tf.clip_by_norm(x, 1.0)), [x])
    with tf.Session() as sess:
        assert np.all(np.isfinite(sess.run(gx, {x: [0.0, 0.0]})))
    with pytest.raises(TypeError, match="sequence"):
        tf.clip_by_global_norm(a, 1.0)
