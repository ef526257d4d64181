"""TF 1.x's RNN cells, static_rnn and dynamic_rnn against NumPy references of TensorFlow 1.x's equations
(rnn_cell_impl.py), forward and backward, and a tiny sequence task that trains."""

import numpy as np
import pytest

import shardflow as tf

T, B, D, U = 5, 3, 2, 4


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def np_basic_rnn(p, x, s):
    h = np.tanh(np.concatenate([x, s], 1) @ p["kernel"] + p["bias"])
    return h, h


def np_basic_lstm(p, x, s, forget_bias=1.0):
    c, h = s
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ p["kernel"] + p["bias"], 4, axis=1)
    c2 = c * sigmoid(f + forget_bias) + sigmoid(i) * np.tanh(j)
    h2 = np.tanh(c2) * sigmoid(o)
    return h2, (c2, h2)


def np_lstm(p, x, s, cell_clip, proj_clip):
    """LSTMCell with peepholes, cell_clip and num_proj/proj_clip."""
    c, m = s
    i, j, f, o = np.split(np.concatenate([x, m], 1) @ p["kernel"] + p["bias"], 4, axis=1)
    c2 = sigmoid(f + 1.0 + p["w_f_diag"] * c) * c + sigmoid(i + p["w_i_diag"] * c) * np.tanh(j)
    c2 = np.clip(c2, -cell_clip, cell_clip)
    m2 = sigmoid(o + p["w_o_diag"] * c2) * np.tanh(c2)
    m2 = np.clip(m2 @ p["projection/kernel"], -proj_clip, proj_clip)
    return m2, (c2, m2)


def np_gru(p, x, s):
    r, u = np.split(sigmoid(np.concatenate([x, s], 1) @ p["gates/kernel"] + p["gates/bias"]), 2, axis=1)
    c = np.tanh(np.concatenate([x, r * s], 1) @ p["candidate/kernel"] + p["candidate/bias"])
    h = u * s + (1 - u) * c
    return h, h


def np_rnn(step, p, xs, s0, lengths):
    """TF's dynamic_rnn/static_rnn rule: zeros after a sequence's length, its state copied through."""
    outs, s = [], s0
    for t in range(xs.shape[0]):
        out, s2 = step(p, xs[t], s)
        valid = (lengths > t)[:, None]
        outs.append(np.where(valid, out, 0.0))
        if isinstance(s, tuple):
            s = tuple(np.where(valid, a, b) for a, b in zip(s2, s))
        else:
            s = np.where(valid, s2, s)
    return np.stack(outs), s


CELLS = {
    "basic_rnn": (lambda: tf.contrib.rnn.BasicRNNCell(U), "basic_rnn_cell", np_basic_rnn, U),
    "basic_lstm": (lambda: tf.contrib.rnn.BasicLSTMCell(U), "basic_lstm_cell", np_basic_lstm, U),
    "lstm_peephole_proj": (lambda: tf.nn.rnn_cell.LSTMCell(U, use_peepholes=True, cell_clip=0.5, num_proj=3,
                                                           proj_clip=0.3, initializer=tf.random_uniform_initializer(
                                                               -1.0, 1.0, seed=3)),
                           "lstm_cell", lambda p, x, s: np_lstm(p, x, s, 0.5, 0.3), 3),
    "gru": (lambda: tf.contrib.rnn.GRUCell(U), "gru_cell", np_gru, U),
}


def params_of(sess, prefix):
    out = {}
    for v in tf.trainable_variables():
        name = v.name
        if name.startswith(prefix + "/"):
            out[name[len(prefix) + 1:]] = np.array(sess.run(v))  # a writable copy
    return out


def zero_state(kind, n_out):
    if "lstm" in kind:
        return (np.zeros((B, U)), np.zeros((B, n_out)))
    return np.zeros((B, U))


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_dynamic_and_static_rnn_match_numpy(kind):
    make, cell_name, step, n_out = CELLS[kind]
    rng = np.random.RandomState(0)
    xs = rng.randn(B, T, D)
    lengths = np.array([5, 2, 0], np.int32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, T, D])
        lens = tf.placeholder(tf.int32, [None])
        cell = make()
        out, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lens, dtype=tf.float64)
        assert out.get_shape().as_list() == [None, T, n_out]
        s_outs, s_state = tf.contrib.rnn.static_rnn(cell, tf.unstack(x, axis=1), sequence_length=lens,
                                                    dtype=tf.float64, scope="static")
        # The same cell object keeps its variables: static_rnn made none.
        assert sorted({v.name.split("/")[0] for v in tf.trainable_variables()}) == ["rnn"]
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        p = params_of(sess, f"rnn/{cell_name}")
        got, got_state, s_got, s_got_state = sess.run([out, state, s_outs, s_state], {x: xs, lens: lengths})
    want, want_state = np_rnn(step, p, np.transpose(xs, (1, 0, 2)), zero_state(kind, n_out), lengths)
    np.testing.assert_allclose(got, np.transpose(want, (1, 0, 2)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.stack(s_got), want, rtol=1e-10, atol=1e-12)
    def parts(st):
        return list(st) if isinstance(st, tuple) else [st]

    for a, b, c in zip(parts(got_state), parts(want_state), parts(s_got_state)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(c, b, rtol=1e-10, atol=1e-12)
    assert not got[2].any()  # a length-0 sequence gives zeros


def test_variable_names_and_shapes_are_tfs():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, T, D])
        cells = [tf.nn.rnn_cell.BasicLSTMCell(U), tf.nn.rnn_cell.GRUCell(U)]
        tf.nn.dynamic_rnn(tf.nn.rnn_cell.MultiRNNCell(cells), x, dtype=tf.float32)
        shapes = {v.name: v.get_shape().as_list() for v in tf.trainable_variables()}
    assert shapes == {
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel": [D + U, 4 * U],
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias": [4 * U],
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel": [U + U, 2 * U],
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias": [2 * U],
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel": [U + U, U],
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias": [U],
    }


def test_time_major_initial_state_and_multi_cell_match_numpy():
    rng = np.random.RandomState(1)
    xs = rng.randn(T, B, D)
    c0, h0 = rng.randn(B, U), rng.randn(B, U)
    g0 = rng.randn(B, U)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [T, None, D])
        cell = tf.nn.rnn_cell.MultiRNNCell([tf.nn.rnn_cell.BasicLSTMCell(U), tf.nn.rnn_cell.GRUCell(U)])
        init = (tf.nn.rnn_cell.LSTMStateTuple(tf.constant(c0), tf.constant(h0)), tf.constant(g0))
        out, state = tf.nn.dynamic_rnn(cell, x, initial_state=init, time_major=True)
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        p0 = params_of(sess, "rnn/multi_rnn_cell/cell_0/basic_lstm_cell")
        p1 = params_of(sess, "rnn/multi_rnn_cell/cell_1/gru_cell")
        got, (got_lstm, got_gru) = sess.run([out, state], {x: xs})

    def stacked(p, x, s):
        h1, s1 = np_basic_lstm(p0, x, s[0])
        h2, s2 = np_gru(p1, h1, s[1])
        return h2, (s1, s2)

    s, outs = ((c0, h0), g0), []
    for t in range(T):
        o, s = stacked(None, xs[t], s)
        outs.append(o)
    np.testing.assert_allclose(got, np.stack(outs), rtol=1e-10)
    np.testing.assert_allclose(got_lstm.c, s[0][0], rtol=1e-10)
    np.testing.assert_allclose(got_gru, s[1], rtol=1e-10)


@pytest.mark.parametrize("kind", ["basic_lstm", "gru", "lstm_peephole_proj"])
def test_dynamic_rnn_gradients_match_numeric_ones(kind):
    make, cell_name, step, n_out = CELLS[kind]
    rng = np.random.RandomState(2)
    xs = rng.randn(B, T, D)
    lengths = np.array([5, 3, 1], np.int32)
    w_out = rng.randn(B, T, n_out)
    w_state = rng.randn(B, n_out)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, T, D])
        cell = make()
        out, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float64)
        h = state.h if "lstm" in kind else state
        loss = tf.reduce_sum(out * w_out) + tf.reduce_sum(h * w_state)
        variables = tf.trainable_variables()
        grads = tf.gradients(loss, variables + [x])
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        p = params_of(sess, f"rnn/{cell_name}")
        got = sess.run(grads, {x: xs})
    names = [v.name[len(f"rnn/{cell_name}/"):] for v in variables]

    def np_loss(p, xs):
        o, s = np_rnn(step, p, np.transpose(xs, (1, 0, 2)), zero_state(kind, n_out), lengths)
        hs = s[1] if "lstm" in kind else s
        return np.sum(np.transpose(o, (1, 0, 2)) * w_out) + np.sum(hs * w_state)

    def numeric(f, a, eps=1e-6):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            keep = a[idx]
            a[idx] = keep + eps
            up = f()
            a[idx] = keep - eps
            down = f()
            a[idx] = keep
            g[idx] = (up - down) / (2 * eps)
        return g

    for name, gv in zip(names, got[:-1]):
        want = numeric(lambda: np_loss(p, xs), p[name])
        np.testing.assert_allclose(gv, want, rtol=1e-5, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(got[-1], numeric(lambda: np_loss(p, xs), xs), rtol=1e-5, atol=1e-7)


def test_lstm_learns_a_sequence_task():
    """Is the first of a sequence's values larger than its last? An LSTM over dynamic_rnn learns it."""
    rng = np.random.RandomState(4)

    def data(n):
        xs = rng.rand(n, 6, 1).astype(np.float32)
        return xs, (xs[:, 0, 0] > xs[:, -1, 0]).astype(np.int32)

    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6, 1])
        y = tf.placeholder(tf.int32, [None])
        _, state = tf.nn.dynamic_rnn(tf.contrib.rnn.BasicLSTMCell(16), x, dtype=tf.float32)
        logits = tf.layers.dense(state.h, 2)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.nn.in_top_k(logits, y, 1), tf.float32))
        train = tf.train.AdamOptimizer(0.02).minimize(loss)
    test_x, test_y = data(500)
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: test_x, y: test_y})
        for _ in range(300):
            bx, by = data(64)
            sess.run(train, {x: bx, y: by})
        last, acc = sess.run([loss, accuracy], {x: test_x, y: test_y})
    assert last < 0.5 * first, (first, last)
    assert acc > 0.9, acc


def test_dropout_wrapper_keeps_everything_at_keep_prob_one_and_refuses_variational():
    with tf.Graph().as_default():
        x = tf.constant(np.ones((B, T, D), np.float32))
        base = tf.nn.rnn_cell.GRUCell(U)
        plain, _ = tf.nn.dynamic_rnn(base, x, dtype=tf.float32)
        wrapped, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.DropoutWrapper(base, output_keep_prob=1.0), x,
                                       dtype=tf.float32, scope="rnn")
        with pytest.raises(tf.errors.UnimplementedError):
            tf.nn.rnn_cell.DropoutWrapper(base, variational_recurrent=True)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            a, b = sess.run([plain, wrapped])
    np.testing.assert_array_equal(a, b)
