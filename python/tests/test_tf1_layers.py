"""TF 1.x's variable_scope/get_variable, initializers and tf.layers, against NumPy (issue 39)."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _values(fetches, feed=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed or {})


def test_get_variable_shares_by_scope_name_with_tf1s_reuse_rules():
    with tf.variable_scope("layer1"):
        w = tf.get_variable("w", [3, 4])
        with tf.name_scope("ignored"):  # name scopes do not name get_variable's variables
            b = tf.get_variable("b", [4], initializer=tf.zeros_initializer())
        y = tf.add(w, b)
    assert w.shared_name == "layer1/w" and b.shared_name == "layer1/b"
    assert y.name == "layer1/Add"  # a variable scope opens a name scope of its name
    with pytest.raises(ValueError, match="Variable layer1/w already exists, disallowed"):
        with tf.variable_scope("layer1"):
            tf.get_variable("w", [3, 4])
    with tf.variable_scope("layer1", reuse=True):
        assert tf.get_variable("w") is w and tf.get_variable("w", [3, 4]) is w
        with pytest.raises(ValueError, match="Variable layer1/nope does not exist"):
            tf.get_variable("nope", [1])
        with pytest.raises(ValueError, match="specified shape \\(3, 5\\) and found shape \\(3, 4\\)"):
            tf.get_variable("w", [3, 5])
        with tf.variable_scope("inner", reuse=False):  # False inherits, as in TF 1.x
            assert tf.get_variable_scope().reuse is True
    for _ in range(2):
        with tf.variable_scope("auto", reuse=tf.AUTO_REUSE):
            a = tf.get_variable("a", [2], initializer=tf.ones_initializer())
    assert [v.name for v in tf.trainable_variables()] == ["layer1/w", "layer1/b", "auto/a"]
    with tf.variable_scope("gan") as scope:
        first = tf.get_variable("d", [1])
        scope.reuse_variables()
        assert tf.get_variable("d") is first
    with tf.variable_scope(scope, reuse=True):  # a VariableScope object re-enters it
        assert tf.get_variable("d") is first
    with pytest.raises(ValueError, match="must be fully defined"):
        tf.get_variable("noshape")
    with pytest.raises(ValueError, match="do not specify shape"):
        tf.get_variable("c", [2], initializer=tf.constant([1.0, 2.0]))
    c = tf.get_variable("c", initializer=tf.constant([1.0, 2.0]))
    i = tf.get_variable("i", [2], dtype=tf.int32)  # integers default to zeros
    wv, bv, av, cv, iv = _values([w, b, a, c, i])
    limit = np.sqrt(6.0 / (3 + 4))  # the default: glorot_uniform
    assert np.all(np.abs(wv) <= limit) and np.ptp(wv) > 0
    np.testing.assert_array_equal(bv, np.zeros(4))
    np.testing.assert_array_equal(av, [1, 1])
    np.testing.assert_array_equal(cv, [1, 2])
    np.testing.assert_array_equal(iv, [0, 0])


def test_initializers_draw_tf1s_distributions():
    n = [200, 300]
    vs = {
        "normal": tf.get_variable("normal", n, initializer=tf.random_normal_initializer(mean=1.0, stddev=0.5)),
        "trunc": tf.get_variable("trunc", n, initializer=tf.truncated_normal_initializer(stddev=0.1)),
        "unif": tf.get_variable("unif", n, initializer=tf.random_uniform_initializer(-2.0, 2.0)),
        "glorot": tf.get_variable("glorot", n, initializer=tf.glorot_uniform_initializer()),
        "gnormal": tf.get_variable("gnormal", n, initializer=tf.glorot_normal_initializer()),
        "vs_in": tf.get_variable("vs_in", n, initializer=tf.variance_scaling_initializer(2.0, "fan_in", "uniform")),
        "const": tf.get_variable("const", [2, 3], initializer=tf.constant_initializer([1, 2, 3, 4])),
        "xavier": tf.get_variable("xavier", n, initializer=tf.contrib.layers.xavier_initializer()),
    }
    v = _values(vs)
    assert abs(v["normal"].mean() - 1.0) < 0.01 and abs(v["normal"].std() - 0.5) < 0.01
    assert np.abs(v["trunc"]).max() <= 0.2 and 0.08 < v["trunc"].std() < 0.09  # truncated at 2 stddev
    assert v["unif"].min() >= -2 and v["unif"].max() < 2 and abs(v["unif"].std() - 4 / np.sqrt(12)) < 0.01
    lim = np.sqrt(6.0 / 500)
    assert np.abs(v["glorot"]).max() <= lim and abs(v["glorot"].std() - lim / np.sqrt(3)) < 0.002
    assert abs(v["gnormal"].std() - np.sqrt(2.0 / 500)) < 0.002  # TF corrects the truncation's narrowing
    assert abs(v["vs_in"].std() - np.sqrt(2.0 / 200)) < 0.002
    np.testing.assert_array_equal(v["const"], [[1, 2, 3], [4, 4, 4]])  # TF 1.x repeats the last value
    assert np.abs(v["xavier"]).max() <= lim


def test_dense_matches_numpy_and_names_like_tf1():
    x_np = np.random.RandomState(0).randn(5, 4).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 4])
    h = tf.layers.dense(x, 3, activation=tf.nn.relu)
    y = tf.layers.dense(h, 2, use_bias=False, kernel_initializer=tf.ones_initializer())
    seq = tf.placeholder(tf.float32, [None, 6, 4])
    z = tf.layers.dense(seq, 3, name="dense", reuse=True)  # the first layer's variables, on every step
    names = [v.name for v in tf.trainable_variables()]
    assert names == ["dense/kernel", "dense/bias", "dense_1/kernel"]
    seq_np = np.random.RandomState(1).randn(2, 6, 4).astype(np.float32)
    k, b, hv, yv, zv = _values([tf.trainable_variables()[0], tf.trainable_variables()[1], h, y, z],
                               {x: x_np, seq: seq_np})
    np.testing.assert_allclose(hv, np.maximum(x_np @ k + b, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yv, hv @ np.ones((3, 2)), rtol=1e-5)
    np.testing.assert_allclose(zv, seq_np @ k + b, rtol=1e-5, atol=1e-6)
    assert z.get_shape().as_list() == [None, 6, 3] or z.get_shape().ndims == 3


def test_layers_in_a_function_called_twice_share_under_reuse():
    def discriminator(x, reuse=False):
        with tf.variable_scope("disc", reuse=reuse):
            h = tf.layers.dense(x, 4, activation=tf.nn.relu)
            return tf.layers.dense(h, 1)
    a = tf.placeholder(tf.float32, [None, 2])
    b = tf.placeholder(tf.float32, [None, 2])
    da = discriminator(a)
    db = discriminator(b, reuse=True)
    assert [v.name for v in tf.trainable_variables()] == ["disc/dense/kernel", "disc/dense/bias",
                                                          "disc/dense_1/kernel", "disc/dense_1/bias"]
    assert [v.name for v in tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="disc")][:1] == ["disc/dense/kernel"]
    pa, pb = _values([da, db], {a: [[1.0, 2.0]], b: [[1.0, 2.0]]})
    np.testing.assert_array_equal(pa, pb)
    with pytest.raises(ValueError, match="already exists"):
        discriminator(b)


def _conv_ref(x, k, stride, padding):
    n, h, w, c = x.shape
    kh, kw, _, f = k.shape
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-w // stride)
        ph = max((oh - 1) * stride + kh - h, 0)
        pw = max((ow - 1) * stride + kw - w, 0)
        x = np.pad(x, [(0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)])
    else:
        oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, oh, ow, f), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
    return out


def test_conv2d_pooling_flatten_match_numpy():
    rs = np.random.RandomState(2)
    x_np = rs.randn(2, 7, 7, 3).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 7, 7, 3])
    c1 = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu,
                          bias_initializer=tf.constant_initializer(0.1))
    c2 = tf.layers.conv2d(x, 2, (2, 3), strides=2)
    p = tf.layers.max_pooling2d(c1, pool_size=2, strides=2)
    ap = tf.layers.average_pooling2d(c1, 3, 1, padding="same")
    flat = tf.layers.flatten(p)
    with tf.variable_scope("conv2d", reuse=True):
        k1, b1 = tf.get_variable("kernel"), tf.get_variable("bias")
    with tf.variable_scope("conv2d_1", reuse=True):
        k2 = tf.get_variable("kernel")
    with pytest.raises(ValueError, match="already exists"):  # reuse was not asked for
        tf.get_variable_scope().get_variable("conv2d/kernel", [3, 3, 3, 4])
    c1v, c2v, pv, apv, fv, k1v, b1v, k2v = _values([c1, c2, p, ap, flat, k1, b1, k2], {x: x_np})
    assert k1v.shape == (3, 3, 3, 4) and k2v.shape == (2, 3, 3, 2)
    np.testing.assert_allclose(b1v, np.full(4, 0.1, np.float32))
    np.testing.assert_allclose(c1v, np.maximum(_conv_ref(x_np, k1v, 1, "SAME") + 0.1, 0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c2v, _conv_ref(x_np, k2v, 2, "VALID"), rtol=1e-4, atol=1e-5)
    ref_pool = c1v[:, :6, :6, :].reshape(2, 3, 2, 3, 2, 4).max(axis=(2, 4))
    np.testing.assert_allclose(pv, ref_pool)
    padded = np.pad(c1v, [(0, 0), (1, 1), (1, 1), (0, 0)])
    ones = np.pad(np.ones_like(c1v), [(0, 0), (1, 1), (1, 1), (0, 0)])
    s = sum(padded[:, i:i + 7, j:j + 7] for i in range(3) for j in range(3))
    cnt = sum(ones[:, i:i + 7, j:j + 7] for i in range(3) for j in range(3))
    np.testing.assert_allclose(apv, s / cnt, rtol=1e-5, atol=1e-6)  # padding excluded, as TF
    np.testing.assert_array_equal(fv, pv.reshape(2, -1))
    assert flat.get_shape().as_list() == [None, 36]


def test_layers_dropout_takes_a_drop_rate_and_a_training_switch():
    x = tf.ones([100000])
    training = tf.placeholder(tf.bool, [])
    d = tf.layers.dropout(x, rate=0.25, training=training)
    off = tf.layers.dropout(x, rate=0.25)  # training=False: unchanged
    on = tf.layers.dropout(x, 0.25, training=True)
    with tf.Session() as sess:
        train_v, off_v, on_v = sess.run([d, off, on], {training: True})
        test_v = sess.run(d, {training: False})
    kept = np.count_nonzero(train_v) / train_v.size
    assert abs(kept - 0.75) < 0.01  # rate 0.25 drops a quarter (tf.nn.dropout's second argument keeps)
    np.testing.assert_allclose(train_v[train_v != 0], 1 / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(test_v, np.ones(100000))
    np.testing.assert_array_equal(off_v, np.ones(100000))
    assert abs(np.count_nonzero(on_v) / on_v.size - 0.75) < 0.01


def test_layers_refuse_what_they_do_not_support():
    x = tf.placeholder(tf.float32, [None, 4, 4, 3])
    with pytest.raises(tf.errors.UnimplementedError, match="channels_first"):
        tf.layers.conv2d(x, 2, 3, data_format="channels_first")
    with pytest.raises(tf.errors.UnimplementedError, match="dilation_rate"):
        tf.layers.conv2d(x, 2, 3, dilation_rate=2)
    with pytest.raises(ValueError, match="last dimension"):
        tf.layers.dense(tf.placeholder(tf.float32, [None, None]), 3)


def test_name_scope_yields_tf1s_full_prefix():
    with tf.name_scope("outer"):
        with tf.name_scope("hidden1") as scope:
            assert scope == "outer/hidden1/"
            y = tf.add(tf.constant(1.0), 2.0)
        with tf.name_scope(None, default_name="loss"):
            z = tf.identity(y, name="z")
    assert y.name == "outer/hidden1/Add" and z.name == "outer/loss/z"
