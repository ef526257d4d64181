"""TF 1.x's tf.layers classes, tf.layers.batch_normalization and tf.contrib.layers, in TF 1.x idioms,
checked against NumPy references."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _values(fetches, feed=None, init=True):
    with tf.Session() as sess:
        if init:
            sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed or {})


def test_layer_objects_make_variables_once_and_share_them_across_calls():
    x1 = tf.placeholder(tf.float32, [None, 4])
    x2 = tf.placeholder(tf.float32, [None, 6, 4])
    layer = tf.layers.Dense(3, activation=tf.nn.relu)
    with pytest.raises(ValueError, match="has not been used yet"):
        layer.scope_name
    y1, y2 = layer(x1), layer.apply(x2)
    assert layer.built and layer.name == "dense" and layer.scope_name == "dense"
    assert [v.name for v in tf.trainable_variables()] == ["dense/kernel", "dense/bias"]
    assert layer.kernel.name == "dense/kernel" and layer.bias.name == "dense/bias"
    assert [v.name for v in layer.trainable_variables] == ["dense/kernel", "dense/bias"] == \
        [v.name for v in layer.weights]
    other = tf.layers.Dense(2, use_bias=False, name="head")
    other(x1)
    third = tf.layers.Dense(2)
    third(x1)
    assert other.scope_name == "head" and third.scope_name == "dense_1"
    a = np.random.RandomState(0).randn(5, 4).astype(np.float32)
    b = np.random.RandomState(1).randn(2, 6, 4).astype(np.float32)
    k, bias, v1, v2 = _values([layer.kernel, layer.bias, y1, y2], {x1: a, x2: b})
    np.testing.assert_allclose(v1, np.maximum(a @ k + bias, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v2, np.maximum(b @ k + bias, 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="incompatible"):
        layer(tf.placeholder(tf.float32, [None, 5]))


def test_conv_pool_flatten_dropout_classes_match_the_functions():
    rs = np.random.RandomState(3)
    x_np = rs.randn(2, 6, 6, 3).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 6, 6, 3])
    conv = tf.layers.Conv2D(4, 3, padding="same", activation=tf.nn.relu, name="c1")
    pool = tf.layers.MaxPooling2D(2, 2)
    avg = tf.layers.AveragePooling2D(2, 2)
    flat = tf.layers.Flatten()
    drop = tf.layers.Dropout(0.5)
    h = conv(x)
    p, a = pool(h), avg(h)
    f = flat(p)
    d_eval, d_train = drop(f), drop(f, training=True)
    assert conv.kernel.get_shape().as_list() == [3, 3, 3, 4] and conv.scope_name == "c1"
    assert f.get_shape().as_list() == [None, 36] and pool.variables == []
    hv, pv, av, fv, dev, dtv = _values([h, p, a, f, d_eval, d_train], {x: x_np})
    ref_p = hv.reshape(2, 3, 2, 3, 2, 4).max(axis=(2, 4))
    ref_a = hv.reshape(2, 3, 2, 3, 2, 4).mean(axis=(2, 4))
    np.testing.assert_allclose(pv, ref_p)
    np.testing.assert_allclose(av, ref_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fv, pv.reshape(2, -1))
    np.testing.assert_array_equal(dev, fv)
    kept = dtv != 0
    np.testing.assert_allclose(dtv[kept], fv[kept] * 2, rtol=1e-6)


def test_named_function_layers_need_reuse_to_share_as_tf1():
    x = tf.placeholder(tf.float32, [None, 2])
    tf.layers.dense(x, 3, name="fc")
    with pytest.raises(ValueError, match="fc/kernel already exists"):
        tf.layers.dense(x, 3, name="fc")
    tf.layers.dense(x, 3, name="fc", reuse=True)
    assert [v.name for v in tf.trainable_variables()] == ["fc/kernel", "fc/bias"]


def _bn_ref(x, axis, gamma, beta, eps):
    axes = tuple(i for i in range(x.ndim) if i != axis)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape), mean.ravel(), var.ravel()


def test_batch_normalization_trains_updates_moving_averages_and_infers_as_tf1():
    rs = np.random.RandomState(4)
    x_np = (rs.randn(8, 5) * 3 + 2).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 5])
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, momentum=0.9, training=training,
                                      gamma_initializer=tf.constant_initializer(1.5),
                                      beta_initializer=tf.constant_initializer(0.25))
    names = sorted(v.name for v in tf.global_variables())
    assert names == ["batch_normalization/beta", "batch_normalization/gamma", "batch_normalization/moving_mean",
                     "batch_normalization/moving_variance"]
    assert sorted(v.name for v in tf.trainable_variables()) == ["batch_normalization/beta",
                                                                "batch_normalization/gamma"]
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert len(update_ops) == 2
    with tf.variable_scope("batch_normalization", reuse=True):
        mm, mv = tf.get_variable("moving_mean"), tf.get_variable("moving_variance")
    gamma, beta = np.full(5, 1.5, np.float32), np.full(5, 0.25, np.float32)
    want, mean, var = _bn_ref(x_np.astype(np.float64), 1, gamma, beta, 1e-3)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run(y, {x: x_np, training: True})  # the update ops not run: moving averages unchanged
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(sess.run(mm), np.zeros(5))
        sess.run(update_ops, {x: x_np, training: True})
        np.testing.assert_allclose(sess.run(mm), 0.1 * mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(sess.run(mv), 0.9 + 0.1 * var, rtol=1e-5)  # rank 2: biased variance
        before = sess.run([mm, mv])
        sess.run(update_ops, {x: x_np, training: False})  # not training: the averages stay
        np.testing.assert_allclose(sess.run([mm, mv]), before)
        inferred = sess.run(y, {x: x_np, training: False})
        m, v = before
        np.testing.assert_allclose(inferred, (x_np - m) / np.sqrt(v + 1e-3) * 1.5 + 0.25, rtol=1e-4, atol=1e-4)


def test_batch_normalization_of_images_takes_bessels_correction_as_tf1s_fused_kernel():
    rs = np.random.RandomState(5)
    x_np = rs.randn(2, 3, 3, 4).astype(np.float32)
    x = tf.constant(x_np)
    bn = tf.layers.BatchNormalization(momentum=0.5, name="bn")
    y = bn(x, training=True)
    bn2 = tf.layers.BatchNormalization(momentum=0.5, fused=False, name="bn_unfused")
    y2 = bn2(x, training=True)
    assert len(bn.updates) == 2 and bn.moving_variance.name == "bn/moving_variance"
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got, got2 = sess.run([y, y2])
        sess.run(bn.updates + bn2.updates)
        mv, mv2 = sess.run([bn.moving_variance, bn2.moving_variance])
    want, _, var = _bn_ref(x_np.astype(np.float64), 3, np.ones(4), np.zeros(4), 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got2, want, rtol=1e-4, atol=1e-4)
    n = 2 * 3 * 3
    np.testing.assert_allclose(mv, 0.5 + 0.5 * var * n / (n - 1), rtol=1e-5)
    np.testing.assert_allclose(mv2, 0.5 + 0.5 * var, rtol=1e-5)


def test_batch_normalization_gradients_match_central_differences():
    rs = np.random.RandomState(6)
    x_np = rs.randn(6, 3)
    x = tf.placeholder(tf.float64, [6, 3])
    w = tf.constant(rs.randn(6, 3))
    y = tf.layers.batch_normalization(x, training=True, axis=1)
    loss = tf.reduce_sum(y * w)
    (g,) = tf.gradients(loss, [x])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        gv = sess.run(g, {x: x_np})
        eps = 1e-6
        num = np.zeros_like(x_np)
        for i in range(6):
            for j in range(3):
                d = np.zeros_like(x_np)
                d[i, j] = eps
                num[i, j] = (sess.run(loss, {x: x_np + d}) - sess.run(loss, {x: x_np - d})) / (2 * eps)
    np.testing.assert_allclose(gv, num, rtol=1e-5, atol=1e-6)


def test_a_network_with_batch_norm_learns_with_update_ops_as_tf1():
    rs = np.random.RandomState(7)
    data = rs.randn(256, 4).astype(np.float32) * 5 + 3
    labels = (data[:, 0] - 3 + (data[:, 1] - 3) > 0).astype(np.int32)
    x = tf.placeholder(tf.float32, [None, 4])
    y_ = tf.placeholder(tf.int32, [None])
    is_training = tf.placeholder(tf.bool, [])
    h = tf.layers.dense(x, 16)
    h = tf.nn.relu(tf.layers.batch_normalization(h, momentum=0.9, training=is_training))
    logits = tf.layers.dense(h, 2)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y_), tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(150):
            sess.run(train_op, {x: data, y_: labels, is_training: True})
        test_acc = sess.run(acc, {x: data, y_: labels, is_training: False})
    assert test_acc > 0.95  # the moving averages serve inference


def test_contrib_layers_names_defaults_and_values():
    rs = np.random.RandomState(8)
    x_np = rs.randn(3, 4).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 4])
    h = tf.contrib.layers.fully_connected(x, 5, biases_initializer=tf.constant_initializer(0.5))
    lin = tf.contrib.layers.linear(h, 2, weights_regularizer=tf.contrib.layers.l2_regularizer(0.1))
    names = [v.name for v in tf.trainable_variables()]
    assert names == ["fully_connected/weights", "fully_connected/biases", "fully_connected_1/weights",
                     "fully_connected_1/biases"]
    reg = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    assert len(reg) == 1
    img = tf.placeholder(tf.float32, [None, 6, 6, 2])
    c = tf.contrib.layers.conv2d(img, 3, 3)  # SAME, relu, scope Conv
    p = tf.contrib.layers.max_pool2d(c, 2)   # stride 2, VALID
    f = tf.contrib.layers.flatten(p)
    assert [v.name for v in tf.trainable_variables()][4:] == ["Conv/weights", "Conv/biases"]
    assert p.get_shape().as_list() == [None, 3, 3, 3] and f.get_shape().as_list() == [None, 27]
    img_np = rs.randn(2, 6, 6, 2).astype(np.float32)
    with tf.variable_scope("fully_connected_1", reuse=True):
        w1 = tf.get_variable("weights")
    hv, lv, w1v, rv = _values([h, lin, w1, reg[0]], {x: x_np, img: img_np})
    with tf.variable_scope("fully_connected", reuse=True):
        w0 = tf.get_variable("weights")
    w0v = _values(w0)
    assert np.all(hv >= 0)
    assert rv == pytest.approx(0.1 * np.sum(w1v.astype(np.float64) ** 2) / 2, rel=1e-5)
    with pytest.raises(ValueError, match="integer"):
        tf.contrib.layers.l2_regularizer(1)
    assert tf.contrib.layers.l1_regularizer(0.0)(w0) is None
    del w0v


def test_contrib_dropout_keeps_and_batch_norm_defaults():
    x = tf.ones([20000])
    d = tf.contrib.layers.dropout(x, keep_prob=0.8)  # is_training=True by default in contrib
    off = tf.contrib.layers.dropout(x, keep_prob=0.8, is_training=False)
    dv, ov = _values([d, off])
    assert abs(np.count_nonzero(dv) / dv.size - 0.8) < 0.02 and np.all(ov == 1)
    tf.reset_default_graph()
    rs = np.random.RandomState(9)
    x_np = rs.randn(10, 3).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.contrib.layers.batch_norm(x, updates_collections=None)  # updates run with the output
    names = sorted(v.name for v in tf.global_variables())
    assert names == ["BatchNorm/beta", "BatchNorm/moving_mean", "BatchNorm/moving_variance"]  # scale=False
    with tf.variable_scope("BatchNorm", reuse=True):
        mm, mv = tf.get_variable("moving_mean"), tf.get_variable("moving_variance")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run(y, {x: x_np})
        mmv, mvv = sess.run([mm, mv])
    want, mean, var = _bn_ref(x_np.astype(np.float64), 1, np.ones(3), np.zeros(3), 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mmv, 0.001 * mean, rtol=1e-4, atol=1e-7)  # decay 0.999
    np.testing.assert_allclose(mvv, 0.999 + 0.001 * var * 10 / 9, rtol=1e-5)  # contrib fuses rank 2
    with pytest.raises(AttributeError, match="tf.contrib.learn"):
        tf.contrib.learn


def test_contrib_variance_scaling_initializer_draws_contribs_distribution():
    v = tf.get_variable("w", [400, 300], initializer=tf.contrib.layers.variance_scaling_initializer())
    u = tf.get_variable("u", [400, 300],
                        initializer=tf.contrib.layers.variance_scaling_initializer(1.0, "FAN_AVG", uniform=True))
    vv, uv = _values([v, u])
    assert np.abs(vv).max() <= 2 * np.sqrt(1.3 * 2.0 / 400) + 1e-6  # truncated at two stddevs
    assert abs(vv.std() - np.sqrt(1.3 * 2.0 / 400) * 0.88) < 0.005
    lim = np.sqrt(3.0 / 350)
    assert np.abs(uv).max() <= lim and abs(uv.std() - lim / np.sqrt(3)) < 0.003
