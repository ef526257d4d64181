"""More TF 1.x names programs use (tf.logging, tf.gfile, tf.set_random_seed, tf.to_float and friends, tf.assign,
tf.variables_initializer, tf.nn.moments and the activations, the learning-rate schedules, tf.losses), checked
against NumPy written from TF's documented formulas."""

import logging

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _run(fetches, feed=None):
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        return s.run(fetches, feed or {})


def test_logging_as_tf1(caplog):
    tf.logging.set_verbosity(tf.logging.INFO)
    assert tf.logging.get_verbosity() == tf.logging.INFO == logging.INFO
    logger = logging.getLogger("tensorflow")
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="tensorflow"):
            tf.logging.info("step %d: loss %.2f", 3, 0.5)
            tf.logging.debug("hidden")
            for i in range(5):
                tf.logging.log_every_n(tf.logging.WARN, "every %d", 2, i)
        messages = [r.getMessage() for r in caplog.records]
        assert messages == ["step 3: loss 0.50", "every 0", "every 2", "every 4"]
    finally:
        logger.propagate = False
        tf.logging.set_verbosity(tf.logging.WARN)


def test_gfile_as_tf1(tmp_path):
    d = str(tmp_path / "a" / "b")
    assert not tf.gfile.Exists(d)
    tf.gfile.MakeDirs(d)
    assert tf.gfile.IsDirectory(d)
    with tf.gfile.GFile(d + "/x.txt", "w") as f:
        f.write("hello\nworld\n")
    with tf.gfile.Open(d + "/x.txt") as f:
        assert f.readlines() == ["hello\n", "world\n"]
    assert tf.gfile.ListDirectory(d) == ["x.txt"] and tf.gfile.Glob(d + "/*.txt") == [d + "/x.txt"]
    assert tf.gfile.Stat(d + "/x.txt").length == 12
    tf.gfile.Copy(d + "/x.txt", d + "/y.txt")
    with pytest.raises(tf.errors.FailedPreconditionError, match="exists"):
        tf.gfile.Rename(d + "/x.txt", d + "/y.txt")
    tf.gfile.Rename(d + "/x.txt", d + "/y.txt", overwrite=True)
    tf.gfile.Remove(d + "/y.txt")
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.Remove(d + "/y.txt")
    tf.gfile.DeleteRecursively(str(tmp_path / "a"))
    assert not tf.gfile.Exists(str(tmp_path / "a"))
    with pytest.raises(tf.errors.UnimplementedError, match="local"):
        tf.gfile.Exists("gs://bucket/x")


def test_set_random_seed_makes_programs_repeat_and_differ_by_seed():
    def program(seed):
        tf.reset_default_graph()
        if seed is not None:
            tf.set_random_seed(seed)
        a = tf.random_normal([4])
        b = tf.random_uniform([4])
        c = tf.nn.dropout(tf.ones([8]), 0.5)
        return [a, b, c]

    first = _run(program(1))
    again = _run(program(1))
    other = _run(program(2))
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(first[0], other[0]) and not np.array_equal(first[1], other[1])
    assert not np.array_equal(first[0][:2], first[0][2:])  # ops in one graph differ


def test_casts_reductions_and_array_names():
    x_np = np.array([[1.5, -2.0, 0.0], [3.0, 0.0, 4.0]], np.float32)
    x = tf.constant(x_np)
    got = _run([tf.to_float(tf.constant([1, 2])), tf.to_int32(x), tf.to_int64(x), tf.to_double(x),
                tf.reduce_logsumexp(x, 1), tf.reduce_logsumexp(x, keepdims=True), tf.count_nonzero(x, 1),
                tf.count_nonzero(x > 1), tf.cumsum(x, 1), tf.cumsum(x, 1, exclusive=True, reverse=True),
                tf.cumprod(x, 0), tf.pad(x, [[1, 0], [0, 2]]), tf.pad(x, [[0, 0], [1, 1]], "REFLECT"),
                tf.slice(x, [0, 1], [2, -1]), tf.eye(2, 3), tf.sequence_mask([1, 3, 0], 4),
                tf.sequence_mask(tf.constant([2, 1])), tf.boolean_mask(x, [True, False]),
                tf.boolean_mask(x, x > 0), tf.is_nan(x), tf.is_finite(x / 0.0)])
    lse = np.log(np.exp(x_np).sum(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        finite = np.isfinite(x_np / 0.0)
    want = [np.array([1.0, 2.0]), x_np.astype(np.int32), x_np.astype(np.int64), x_np.astype(np.float64), lse,
            np.log(np.exp(x_np).sum()).reshape(1, 1), (x_np != 0).sum(1), (x_np > 1).sum(),
            np.cumsum(x_np, 1), np.cumsum(x_np[:, ::-1], 1)[:, ::-1] - x_np, np.cumprod(x_np, 0),
            np.pad(x_np, [[1, 0], [0, 2]]), np.pad(x_np, [[0, 0], [1, 1]], "reflect"), x_np[:, 1:], np.eye(2, 3),
            np.arange(4) < np.array([1, 3, 0])[:, None], np.arange(2) < np.array([2, 1])[:, None], x_np[[0]],
            x_np[x_np > 0], np.isnan(x_np), finite]
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=str(i))
    assert got[2].dtype == np.int64 and got[6].dtype == np.int64
    with pytest.raises(tf.errors.UnimplementedError, match="constant_values"):
        tf.pad(x, [[0, 0], [1, 1]], constant_values=1)


def test_assign_functions_and_variables_initializer_as_tf1():
    v = tf.Variable([1.0, 2.0], name="v")
    w = tf.get_variable("w", initializer=tf.constant([5.0]))
    read = [t for t in tf.global_variables() if t.name == "w"][0]
    a = tf.assign(v, [3.0, 4.0])
    b = tf.assign_add(read, [1.0])
    c = tf.assign_sub(v, tf.constant([1.0, 1.0]))
    init_v = tf.variables_initializer([v])
    with tf.Session() as sess:
        sess.run(init_v)
        np.testing.assert_array_equal(sess.run(v), [1.0, 2.0])
        with pytest.raises(tf.errors.FailedPreconditionError):
            sess.run(w)  # not initialized by init_v
        sess.run(tf.variables_initializer(tf.global_variables()))
        np.testing.assert_array_equal(sess.run(a), [3.0, 4.0])
        np.testing.assert_array_equal(sess.run(c), [2.0, 3.0])
        np.testing.assert_array_equal(sess.run(b), [6.0])
    assert tf.variables_initializer([]).type == "NoOp"
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a variable"):
        tf.assign(tf.constant(1.0), 2.0)


def test_nn_moments_normalization_and_activations_match_numpy():
    rs = np.random.RandomState(0)
    x_np = rs.randn(4, 3).astype(np.float32)
    x = tf.constant(x_np)
    mean, var = tf.nn.moments(x, [0])
    mk, vk = tf.nn.moments(x, [1], keep_dims=True)
    labels = np.eye(3, dtype=np.float32)[[0, 2, 1, 1]]
    got = _run([mean, var, mk, vk, tf.nn.batch_normalization(x, mean, var, 0.5, 2.0, 1e-3),
                tf.nn.batch_normalization(x, mean, var, None, None, 1e-3), tf.nn.l2_normalize(x, 1),
                tf.nn.l2_normalize(x, dim=0), tf.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=x),
                tf.nn.relu6(x * 5), tf.nn.elu(x), tf.nn.selu(x), tf.nn.softplus(x),
                tf.nn.xw_plus_b(x, tf.ones([3, 2]), tf.constant([1.0, -1.0]))])
    m, v = x_np.mean(0), x_np.var(0)
    z = x_np - x_np.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    want = [m, v, x_np.mean(1, keepdims=True), x_np.var(1, keepdims=True), (x_np - m) / np.sqrt(v + 1e-3) * 2 + 0.5,
            (x_np - m) / np.sqrt(v + 1e-3), x_np / np.linalg.norm(x_np, axis=1, keepdims=True),
            x_np / np.linalg.norm(x_np, axis=0, keepdims=True), -(labels * logp).sum(1),
            np.clip(x_np * 5, 0, 6), np.where(x_np > 0, x_np, np.expm1(x_np)),
            scale * np.where(x_np > 0, x_np, alpha * np.expm1(x_np)), np.log1p(np.exp(x_np)),
            x_np @ np.ones((3, 2)) + [1.0, -1.0]]
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=str(i))
    # v2 differs from v1 in that gradients reach the labels
    lab = tf.constant(labels)
    (gl,) = tf.gradients(tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits_v2(labels=lab, logits=x)), [lab])
    np.testing.assert_allclose(_run(gl), -logp, rtol=1e-5)


def test_learning_rate_schedules_as_tf1():
    step = tf.placeholder(tf.int64, [])
    scheds = [tf.train.exponential_decay(0.1, step, 100, 0.96), tf.train.exponential_decay(0.1, step, 100, 0.96, True),
              tf.train.inverse_time_decay(0.1, step, 10, 0.5), tf.train.natural_exp_decay(0.1, step, 10, 0.5, True),
              tf.train.polynomial_decay(0.1, step, 100, 0.01, power=2.0),
              tf.train.polynomial_decay(0.1, step, 100, 0.01, cycle=True),
              tf.train.piecewise_constant(step, [10, 20], [1.0, 0.5, 0.1])]
    with tf.Session() as sess:
        for s in (0, 10, 150, 250):
            got = sess.run(scheds, {step: s})
            p = min(s, 100) / 100
            cyc = 100 * max(1, np.ceil(s / 100))
            want = [0.1 * 0.96 ** (s / 100), 0.1 * 0.96 ** (s // 100), 0.1 / (1 + 0.5 * s / 10),
                    0.1 * np.exp(-0.5 * (s // 10)), (0.1 - 0.01) * (1 - p) ** 2 + 0.01,
                    (0.1 - 0.01) * (1 - s / cyc) + 0.01, 1.0 if s <= 10 else 0.5 if s <= 20 else 0.1]
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=str(s))
    with pytest.raises(ValueError, match="global_step is required"):
        tf.train.exponential_decay(0.1, None, 10, 0.5)
    # the schedule feeds an optimizer, as in TF 1.x programs
    gs = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(1.0, gs, 1, 0.5, staircase=True)
    v = tf.Variable(0.0)
    train = tf.train.GradientDescentOptimizer(lr).minimize(-v, global_step=gs)  # gradient -1: v += lr
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            sess.run(train)
        assert sess.run(v) == pytest.approx(1.0 + 0.5 + 0.25)


def test_losses_as_tf1():
    logits_np = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], np.float32)
    labels_idx = np.array([0, 2])
    onehot = np.eye(3, dtype=np.float32)[labels_idx]
    logits = tf.constant(logits_np)
    z = logits_np - logits_np.max(1, keepdims=True)
    per = -(z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(2), labels_idx]
    preds, targets = tf.constant([1.0, 2.0, 4.0]), tf.constant([1.5, 2.0, 1.0])
    w = tf.constant([1.0, 0.0, 2.0])
    losses = [tf.losses.sparse_softmax_cross_entropy(labels_idx, logits),
              tf.losses.softmax_cross_entropy(onehot, logits),
              tf.losses.mean_squared_error(targets, preds),
              tf.losses.mean_squared_error(targets, preds, weights=w),
              tf.losses.absolute_difference(targets, preds, reduction=tf.losses.Reduction.SUM),
              tf.losses.huber_loss(targets, preds),
              tf.losses.sigmoid_cross_entropy(tf.constant([1.0, 0.0]), tf.constant([0.5, -0.5])),
              tf.losses.mean_squared_error(targets, preds, reduction=tf.losses.Reduction.NONE, loss_collection=None)]
    assert len(tf.losses.get_losses()) == 7
    tf.get_variable("r", [2], initializer=tf.ones_initializer(), regularizer=lambda t: tf.reduce_sum(t) * 0.1)
    total = tf.losses.get_total_loss()
    reg = tf.losses.get_regularization_loss()
    got = _run(losses + [total, reg])
    e = np.array([1.0, 2.0, 4.0]) - np.array([1.5, 2.0, 1.0])
    huber = np.where(np.abs(e) <= 1, 0.5 * e ** 2, np.abs(e) - 0.5)
    x = np.array([0.5, -0.5])
    want = [per.mean(), per.mean(), (e ** 2).mean(), (e ** 2 * [1, 0, 2]).sum() / 2, np.abs(e).sum(), huber.mean(),
            (np.maximum(x, 0) - x * [1, 0] + np.log1p(np.exp(-np.abs(x)))).mean(), e ** 2]
    for i, (g, w_) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w_, rtol=1e-5, err_msg=str(i))
    assert got[-1] == pytest.approx(0.2)
    assert got[-2] == pytest.approx(sum(float(v) for v in got[:7]) + 0.2, rel=1e-5)
    with pytest.raises(AttributeError, match="tf.losses.cosine_distance"):
        tf.losses.cosine_distance
