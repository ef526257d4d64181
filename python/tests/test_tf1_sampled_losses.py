"""TF 1.x's candidate samplers, tf.nn.nce_loss and tf.nn.sampled_softmax_loss (word2vec's losses), checked
against NumPy written from TF's formulas, and a skip-gram model that learns with each."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _p(c, range_max):
    return np.log((c + 2.0) / (c + 1.0)) / np.log(range_max + 1.0)


def test_log_uniform_candidate_sampler_as_tf1():
    labels = tf.constant(np.array([[1], [7], [300]], np.int64))
    sampled, true_exp, sampled_exp = tf.nn.log_uniform_candidate_sampler(
        true_classes=labels, num_true=1, num_sampled=50, unique=True, range_max=1000, seed=3)
    assert sampled.dtype == tf.int64 and true_exp.get_shape().as_list() == [3, 1]
    with tf.Session() as sess:
        s, t, e = sess.run([sampled, true_exp, sampled_exp])
        s2 = sess.run(sampled)  # each run draws anew
    assert len(set(s)) == 50 and s.min() >= 0 and s.max() < 1000 and list(s) != list(s2)
    tries = np.log1p(-e[0]) / np.log1p(-_p(s[0], 1000))
    np.testing.assert_allclose(e, -np.expm1(tries * np.log1p(-_p(s, 1000))), rtol=1e-4)
    np.testing.assert_allclose(t[:, 0], -np.expm1(tries * np.log1p(-_p(np.array([1, 7, 300]), 1000))), rtol=1e-4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="int64"):
        tf.nn.log_uniform_candidate_sampler(tf.constant([[1]]), 1, 2, True, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be <= range_max"):
        tf.nn.uniform_candidate_sampler(labels, 1, 20, True, 10)


def _np_sampled_logits(w, b, labels, x, sampled, true_exp, sampled_exp, remove_hits):
    true_logits = np.einsum("bd,btd->bt", x, w[labels]) + b[labels] - np.log(true_exp)
    sampled_logits = x @ w[sampled].T + b[sampled] - np.log(sampled_exp)
    if remove_hits:
        hits = (labels[:, :, None] == sampled[None, None, :]).any(axis=1)
        sampled_logits = np.where(hits, sampled_logits - 3.4028234663852886e38, sampled_logits)
    num_true = labels.shape[1]
    logits = np.concatenate([true_logits, sampled_logits], 1)
    targets = np.concatenate([np.full(true_logits.shape, 1.0 / num_true), np.zeros(sampled_logits.shape)], 1)
    return logits, targets


def _fixed_case(num_true):
    rs = np.random.RandomState(0)
    w, b, x = rs.randn(20, 4), rs.randn(20) * 0.1, rs.randn(3, 4)
    labels = rs.randint(0, 20, size=(3, num_true)).astype(np.int64)
    sampled = np.array([2, labels[0, 0], 11, 17], np.int64)  # one accidental hit in row 0
    true_exp = rs.uniform(0.1, 0.9, size=(3, num_true))
    sampled_exp = rs.uniform(0.1, 0.9, size=4)
    return w, b, x, labels, sampled, true_exp, sampled_exp


@pytest.mark.parametrize("num_true", [1, 2])
def test_nce_and_sampled_softmax_losses_match_tf1s_formulas(num_true):
    w, b, x, labels, sampled, true_exp, sampled_exp = _fixed_case(num_true)
    values = (tf.constant(sampled), tf.constant(true_exp.astype(np.float32)), tf.constant(sampled_exp.astype(np.float32)))
    wt, bt, xt = tf.constant(w.astype(np.float32)), tf.constant(b.astype(np.float32)), tf.constant(x.astype(np.float32))
    nce = tf.nn.nce_loss(wt, bt, tf.constant(labels), xt, num_sampled=4, num_classes=20, num_true=num_true,
                         sampled_values=values)
    ssm = tf.nn.sampled_softmax_loss(wt, bt, tf.constant(labels), xt, num_sampled=4, num_classes=20,
                                     num_true=num_true, sampled_values=values)
    with tf.Session() as sess:
        got_nce, got_ssm = sess.run([nce, ssm])
    logits, targets = _np_sampled_logits(w, b, labels, x, sampled, true_exp, sampled_exp, False)
    want_nce = (np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))).sum(1)
    np.testing.assert_allclose(got_nce, want_nce, rtol=1e-5)
    logits, targets = _np_sampled_logits(w, b, labels, x, sampled, true_exp, sampled_exp, True)
    z = logits - logits.max(1, keepdims=True)
    want_ssm = -(targets * (z - np.log(np.exp(z).sum(1, keepdims=True)))).sum(1)
    np.testing.assert_allclose(got_ssm, want_ssm, rtol=1e-5)


def test_sampled_loss_gradients_match_central_differences():
    w, b, x, labels, sampled, true_exp, sampled_exp = _fixed_case(1)
    values = (tf.constant(sampled), tf.constant(true_exp), tf.constant(sampled_exp))
    wp = tf.placeholder(tf.float64, [20, 4])
    xp = tf.placeholder(tf.float64, [3, 4])
    for fn in (tf.nn.nce_loss, tf.nn.sampled_softmax_loss):
        loss = tf.reduce_sum(fn(wp, tf.constant(b), tf.constant(labels), xp, 4, 20, sampled_values=values))
        gw, gx = tf.gradients(loss, [wp, xp])
        with tf.Session() as sess:
            feed = {wp: w, xp: x}
            got_w, got_x = sess.run([gw, gx], feed)
            for got, arr, key in ((got_w, w, wp), (got_x, x, xp)):
                num = np.zeros_like(arr)
                for idx in np.ndindex(arr.shape):
                    d = np.zeros_like(arr)
                    d[idx] = 1e-6
                    hi = sess.run(loss, {**feed, key: arr + d})
                    lo = sess.run(loss, {**feed, key: arr - d})
                    num[idx] = (hi - lo) / 2e-6
                np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss_fn", ["nce_loss", "sampled_softmax_loss"])
def test_skip_gram_learns_word_pairs_with_a_sampled_loss(loss_fn):
    # word2vec's shape: embeddings, a sampled loss over the vocabulary, SGD. Each word's context is its partner
    # (2k <-> 2k+1), so after training the partner must be a word's nearest neighbour by output score.
    vocab, dim, batch = 200, 16, 64
    rs = np.random.RandomState(1)
    train_inputs = tf.placeholder(tf.int32, [batch])
    train_labels = tf.placeholder(tf.int32, [batch, 1])
    embeddings = tf.Variable(tf.random_uniform([vocab, dim], -1.0, 1.0, seed=1))
    embed = tf.nn.embedding_lookup(embeddings, train_inputs)
    nce_weights = tf.Variable(tf.truncated_normal([vocab, dim], stddev=1.0 / np.sqrt(dim), seed=2))
    nce_biases = tf.Variable(tf.zeros([vocab]))
    loss = tf.reduce_mean(getattr(tf.nn, loss_fn)(weights=nce_weights, biases=nce_biases, labels=train_labels,
                                                  inputs=embed, num_sampled=16, num_classes=vocab))
    optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    scores = tf.matmul(embed, nce_weights, transpose_b=True) + nce_biases
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = None
        for step in range(1500):
            words = rs.randint(0, vocab, size=batch)
            _, l = sess.run([optimizer, loss], {train_inputs: words, train_labels: (words ^ 1)[:, None]})
            first = l if first is None else first
        words = np.arange(batch)
        top = sess.run(scores, {train_inputs: words}).argmax(1)
    assert l < first / 2
    assert np.mean(top == (words ^ 1)) > 0.9
