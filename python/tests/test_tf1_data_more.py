"""tf.data's zip, padded_batch, flat_map, interleave and from_generator, written as TF 1.x programs use
them; each checked against the elements TF 1.x gives (worked out by hand from TF's definitions)."""


import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def drain(next_element, sess=None, limit=1000):
    out = []
    sess = sess or tf.get_default_session()
    for _ in range(limit):
        try:
            out.append(sess.run(next_element))
        except tf.errors.OutOfRangeError:
            return out
    raise AssertionError("the iterator did not end")


def test_zip_pairs_elements_and_ends_with_the_shortest():
    a = tf.data.Dataset.range(5)
    b = tf.data.Dataset.from_tensor_slices(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32))
    c = tf.data.Dataset.from_tensor_slices({"id": np.array([7, 8, 9, 10], np.int32)}).map(lambda d: d["id"] * 2)
    zipped = tf.data.Dataset.zip((a, (b, c)))
    x, (y, z) = zipped.make_one_shot_iterator().get_next()
    assert x.dtype == tf.int64 and y.shape.as_list() == [2] and z.dtype == tf.int32
    with tf.Session():
        got = drain((x, y, z))
    assert [int(v[0]) for v in got] == [0, 1, 2]
    np.testing.assert_array_equal(np.stack([v[1] for v in got]), [[1, 2], [3, 4], [5, 6]])
    assert [int(v[2]) for v in got] == [14, 16, 18]


def test_zip_of_dicts_then_shuffle_batch_repeat():
    a = tf.data.Dataset.range(6)
    b = tf.data.Dataset.range(100, 106)
    ds = tf.data.Dataset.zip({"a": a, "b": b}).shuffle(6, seed=3).batch(4).repeat(2)
    nxt = ds.make_one_shot_iterator().get_next()
    with tf.Session():
        got = drain(nxt)
    assert [len(g["a"]) for g in got] == [4, 2, 4, 2]
    for g in got:  # the pairs stay together through the shuffle
        np.testing.assert_array_equal(g["b"], g["a"] + 100)
    for epoch in (got[:2], got[2:]):
        assert sorted(np.concatenate([g["a"] for g in epoch]).tolist()) == list(range(6))


def test_padded_batch_pads_to_the_longest_or_to_the_given_shape():
    # TF's example: range(1..) mapped to fill([x], x), padded_batch(2, [None])
    ds = tf.data.Dataset.range(1, 6).map(lambda x: tf.fill(tf.cast(tf.reshape(x, [1]), tf.int32), x))
    nxt = ds.padded_batch(2, padded_shapes=[None]).make_one_shot_iterator().get_next()
    fixed = ds.padded_batch(3, padded_shapes=[6], padding_values=tf.constant(-1, tf.int64))
    fnxt = fixed.make_one_shot_iterator().get_next()
    assert fnxt.shape.as_list() == [None, 6]
    with tf.Session():
        got = drain(nxt)
        fgot = drain(fnxt)
    np.testing.assert_array_equal(got[0], [[1, 0], [2, 2]])
    np.testing.assert_array_equal(got[1], [[3, 3, 3, 0], [4, 4, 4, 4]])
    np.testing.assert_array_equal(got[2], [[5, 5, 5, 5, 5]])
    np.testing.assert_array_equal(fgot[0], [[1, -1, -1, -1, -1, -1], [2, 2, -1, -1, -1, -1],
                                            [3, 3, 3, -1, -1, -1]])
    np.testing.assert_array_equal(fgot[1], [[4, 4, 4, 4, -1, -1], [5, 5, 5, 5, 5, -1]])


def test_padded_batch_of_tuples_with_drop_remainder_and_a_too_small_shape():
    lengths = np.array([3, 1, 2, 4, 2], np.int32)
    ds = tf.data.Dataset.from_tensor_slices(lengths).map(
        lambda n: (tf.range(n), tf.cast(n, tf.float32) * tf.ones([n, 2])))
    batched = ds.padded_batch(2, padded_shapes=([None], [None, 2]), padding_values=(-1, 0.5), drop_remainder=True)
    ids, feats = batched.make_one_shot_iterator().get_next()
    assert ids.shape.as_list() == [2, None] and feats.shape.as_list() == [2, None, 2]
    small = ds.padded_batch(2, padded_shapes=([2], [None, 2])).make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        got = drain((ids, feats))
        with pytest.raises(tf.errors.InvalidArgumentError, match="smaller size"):
            sess.run(small)
    assert len(got) == 2  # the fifth element is dropped
    np.testing.assert_array_equal(got[0][0], [[0, 1, 2], [0, -1, -1]])
    np.testing.assert_array_equal(got[0][1][1], [[1, 1], [0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_array_equal(got[1][0], [[0, 1, -1, -1], [0, 1, 2, 3]])
    with pytest.raises(ValueError, match="not compatible"):
        tf.data.Dataset.from_tensor_slices(np.zeros((3, 4), np.float32)).padded_batch(2, [2])


def test_flat_map_gives_each_elements_dataset_in_turn():
    rows = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.int32)
    ds = tf.data.Dataset.from_tensor_slices(rows).flat_map(
        lambda r: tf.data.Dataset.from_tensor_slices(r).filter(lambda v: v % 2 > 0))
    nxt = ds.make_one_shot_iterator().get_next()
    # flat_map of datasets of different lengths, then batch across their borders
    lens = tf.data.Dataset.from_tensor_slices(np.array([2, 0, 3], np.int64))
    rep = lens.flat_map(lambda n: tf.data.Dataset.from_tensors(n).repeat(n)).batch(2)
    rnxt = rep.make_one_shot_iterator().get_next()
    with tf.Session():
        assert [int(v) for v in drain(nxt)] == [1, 3, 5, 7, 9]
        assert [v.tolist() for v in drain(rnxt)] == [[2, 2], [3, 3], [3]]


def test_interleave_cycles_blocks_and_refills_as_tf1():
    # TF's docstring example: range(1, 6) interleaved into from_tensors(x).repeat(6), cycle 2, block 4
    ds = tf.data.Dataset.range(1, 6).interleave(lambda x: tf.data.Dataset.from_tensors(x).repeat(6),
                                                cycle_length=2, block_length=4)
    nxt = ds.make_one_shot_iterator().get_next()
    # uneven lengths: a dataset that ends gives its slot to the next input element
    uneven = tf.data.Dataset.from_tensor_slices(np.array([1, 3, 2], np.int64)).interleave(
        lambda n: tf.data.Dataset.range(n).map(lambda v: v + 10 * n), cycle_length=2, block_length=1)
    unxt = uneven.make_one_shot_iterator().get_next()
    with tf.Session():
        got = [int(v) for v in drain(nxt)]
        ugot = [int(v) for v in drain(unxt)]
    assert got == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]
    # TF's InterleaveDataset: slot 0 opens [10], slot 1 [30 31 32]; 10, 30; slot 0 ends and the turn moves
    # on (31); slot 0 then opens [20 21]: 20, 32, 21
    assert ugot == [10, 30, 31, 20, 32, 21]


def test_from_generator_feeds_the_graph_from_the_host():
    def gen():
        for i in range(1, 6):
            yield np.arange(i, dtype=np.int64), float(i)

    ds = tf.data.Dataset.from_generator(gen, (tf.int64, tf.float32), ([None], []))
    seq, value = ds.make_one_shot_iterator().get_next()
    assert seq.shape.as_list() == [None] and value.shape.as_list() == []
    padded = tf.data.Dataset.from_generator(gen, (tf.int64, tf.float32), (tf.TensorShape([None]), tf.TensorShape([])))
    pseq, pval = padded.map(lambda s, v: (s * 2, v)).padded_batch(2, ([None], [])).make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        got = drain((seq, value))
        pgot = drain((pseq, pval))
    assert [g[0].tolist() for g in got] == [list(range(i)) for i in range(1, 6)]
    assert [float(g[1]) for g in got] == [1.0, 2.0, 3.0, 4.0, 5.0]
    np.testing.assert_array_equal(pgot[0][0], [[0, 0], [0, 2]])
    np.testing.assert_array_equal(pgot[2][0], [[0, 2, 4, 6, 8]])
    np.testing.assert_array_equal(pgot[1][1], [3.0, 4.0])
    # each session runs the generator anew, from the start
    with tf.Session() as sess:
        assert float(sess.run(value)) == 1.0


def test_from_generator_with_args_shuffle_batch_and_errors():
    def count(n):
        for i in range(n):
            yield i

    ds = tf.data.Dataset.from_generator(count, tf.int32, [], args=(10,)).shuffle(4, seed=1).batch(3)
    nxt = ds.make_one_shot_iterator().get_next()

    def bad():
        yield [1, 2]
        yield [1, 2, 3]  # not the declared shape

    bnxt = tf.data.Dataset.from_generator(bad, tf.int32, [2]).make_one_shot_iterator().get_next()

    def raises():
        yield 1
        raise RuntimeError("broken input")

    rnxt = tf.data.Dataset.from_generator(raises, tf.int32, []).make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        got = drain(nxt)
        assert [len(b) for b in got] == [3, 3, 3, 1]
        assert sorted(np.concatenate(got).tolist()) == list(range(10))
        assert sess.run(bnxt).tolist() == [1, 2]
        with pytest.raises(tf.errors.InvalidArgumentError, match="from_generator"):
            sess.run(bnxt)
        assert sess.run(rnxt) == 1
        with pytest.raises(tf.errors.InvalidArgumentError, match="from_generator"):
            sess.run(rnxt)


def test_from_generator_in_a_training_loop_with_tf1_idioms():
    rng = np.random.RandomState(0)
    w_true = np.array([[2.0], [-1.0]], np.float32)

    def batches():
        for _ in range(200):
            x = rng.randn(16, 2).astype(np.float32)
            yield x, x @ w_true

    ds = tf.data.Dataset.from_generator(batches, (tf.float32, tf.float32), ([None, 2], [None, 1]))
    x, y = ds.make_one_shot_iterator().get_next()
    w = tf.Variable(tf.zeros([2, 1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    steps = 0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        try:
            while True:
                sess.run(train)
                steps += 1
        except tf.errors.OutOfRangeError:
            pass
        np.testing.assert_allclose(sess.run(w), w_true, atol=1e-3)
    assert steps == 200


def test_from_generator_with_an_initializable_iterator_runs_the_generator_at_each_initializer():
    calls = []

    def gen():
        calls.append(1)
        for i in range(5):
            yield i

    it = tf.data.Dataset.from_generator(gen, tf.int64, []).map(lambda x: x * 10).make_initializable_iterator()
    nxt = it.get_next()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert calls == []  # nothing runs the generator before its initializer
        for _ in range(2):  # two epochs, TF 1.x's way
            sess.run(it.initializer)
            assert [int(v) for v in drain(nxt)] == [0, 10, 20, 30, 40]
        # an initializer in the middle of an epoch starts from the beginning again
        sess.run(it.initializer)
        assert [int(sess.run(nxt)) for _ in range(2)] == [0, 10]
        sess.run(it.initializer)
        assert [int(v) for v in drain(nxt)] == [0, 10, 20, 30, 40]
        # a callable of the session feeds the generation too
        sess.run(it.initializer)
        step = sess.make_callable(nxt)
        assert [int(step()) for _ in range(3)] == [0, 10, 20]
    assert len(calls) == 5


def test_from_generator_repeat_calls_the_generator_again_each_epoch():
    calls = []

    def gen():
        calls.append(1)
        for i in range(4):
            yield i, [float(i)] * (i + 1)  # vectors of growing length

    ds = tf.data.Dataset.from_generator(gen, (tf.int32, tf.float32), ([], [None]))
    nxt = ds.repeat(3).make_one_shot_iterator().get_next()
    batched = tf.data.Dataset.from_generator(lambda: iter(range(5)), tf.int64, []).repeat(2).batch(4)
    bnxt = batched.make_one_shot_iterator().get_next()
    shuffled = tf.data.Dataset.from_generator(lambda: iter(range(6)), tf.int64, []).shuffle(3, seed=2).repeat(2)
    snxt = shuffled.make_one_shot_iterator().get_next()
    with tf.Session():  # the default session drain() uses
        got = drain(nxt)
        assert [int(i) for i, _ in got] == [0, 1, 2, 3] * 3
        assert [v.tolist() for _, v in got[:2]] == [[0.0], [1.0, 1.0]]
        assert [b.tolist() for b in drain(bnxt)] == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4]]
        s = [int(v) for v in drain(snxt)]
        assert sorted(s[:6]) == list(range(6)) and sorted(s[6:]) == list(range(6))  # each epoch whole
    assert len(calls) == 3


def test_from_generator_repeat_forever_and_with_a_fed_count():
    forever = tf.data.Dataset.from_generator(lambda: iter([1, 2]), tf.int32, []).repeat()
    fnxt = forever.make_one_shot_iterator().get_next()
    count = tf.constant(2, tf.int64) + 0  # a count known only at run time
    it = tf.data.Dataset.from_generator(lambda: iter([5, 6]), tf.int32, []).repeat(count).make_initializable_iterator()
    inxt = it.get_next()
    zero = tf.data.Dataset.from_generator(lambda: iter([7]), tf.int32, []).repeat(0)
    znxt = zero.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        assert [int(sess.run(fnxt)) for _ in range(7)] == [1, 2, 1, 2, 1, 2, 1]
        sess.run(it.initializer)
        assert [int(v) for v in drain(inxt)] == [5, 6, 5, 6]
        assert drain(znxt) == []


def test_from_generator_without_output_shapes_gives_unknown_shapes():
    def gen():
        yield np.arange(3, dtype=np.float32), 1
        yield np.ones((2, 2), np.float32), 2  # another rank: allowed without output_shapes, as TF

    ds = tf.data.Dataset.from_generator(gen, (tf.float32, tf.int64)).map(lambda x, n: (x * 2.0, n + 1))
    x, n = ds.make_one_shot_iterator().get_next()
    assert x.shape.rank is None and n.shape.rank is None
    with tf.Session() as sess:
        a, an = sess.run([x, n])
        b, bn = sess.run([x, n])
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(x)
    np.testing.assert_array_equal(a, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(b, np.full((2, 2), 2.0))
    assert (int(an), int(bn)) == (2, 3)
    plain = tf.data.Dataset.from_generator(gen, (tf.float32, tf.int64))
    for make, what in [(lambda: plain.batch(2), "batch"), (lambda: plain.shuffle(2), "shuffle"),
                       (lambda: plain.padded_batch(2, ([None], [])), "padded_batch")]:
        with pytest.raises(tf.errors.UnimplementedError, match=f"{what} needs elements of known rank.*output_shapes"):
            make()
