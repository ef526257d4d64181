"""TF 1.x's tf.data (in-memory Datasets and their iterators) and tf.case, in the idioms TF 1.x programs use;
expected values follow TensorFlow 1.x's documented behaviour."""

import numpy as np
import pytest

import shardflow as tf


def drain(sess, t, limit=1000):
    out = []
    for _ in range(limit):
        try:
            out.append(sess.run(t))
        except tf.errors.OutOfRangeError:
            return out
    raise AssertionError("the iterator did not end")


def test_one_shot_iterator_gives_rows_in_order_then_out_of_range_for_good():
    xs = np.arange(10, dtype=np.float32).reshape(5, 2)
    ys = np.arange(5, dtype=np.int32)
    with tf.Graph().as_default():
        x, y = tf.data.Dataset.from_tensor_slices((xs, ys)).make_one_shot_iterator().get_next()
        assert x.get_shape().as_list() == [2] and y.get_shape().as_list() == []
        with tf.Session() as sess:  # no initializer needed
            got = drain(sess, [x, y])
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(x)
        with tf.Session() as sess:  # each session has its own iterator
            assert sess.run(y) == 0
    assert [int(b) for _, b in got] == [0, 1, 2, 3, 4]
    for a, b in got:
        np.testing.assert_array_equal(a, xs[b])


def test_batch_repeat_orders_and_drop_remainder():
    data = np.arange(5, dtype=np.int32)
    with tf.Graph().as_default():
        ds = tf.data.Dataset.from_tensor_slices(data)
        a = ds.batch(2).make_one_shot_iterator().get_next()
        b = ds.repeat(2).batch(3).make_one_shot_iterator().get_next()
        c = ds.batch(3).repeat(2).make_one_shot_iterator().get_next()
        d = ds.batch(2, drop_remainder=True).make_one_shot_iterator().get_next()
        e = ds.repeat().take(7).make_one_shot_iterator().get_next()
        f = ds.batch(2).shuffle(3, seed=4).make_one_shot_iterator().get_next()  # batches shuffled whole
        assert a.get_shape().as_list() == [None] and d.get_shape().as_list() == [2]
        with tf.Session() as sess:
            assert [v.tolist() for v in drain(sess, a)] == [[0, 1], [2, 3], [4]]
            assert [v.tolist() for v in drain(sess, b)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]
            assert [v.tolist() for v in drain(sess, c)] == [[0, 1, 2], [3, 4], [0, 1, 2], [3, 4]]
            assert [v.tolist() for v in drain(sess, d)] == [[0, 1], [2, 3]]
            assert [int(v) for v in drain(sess, e)] == [0, 1, 2, 3, 4, 0, 1]
            batches = [v.tolist() for v in drain(sess, f)]
            assert sorted(batches) == [[0, 1], [2, 3], [4]]


def test_shuffle_is_tfs_buffered_shuffle():
    n, buf = 20, 4
    with tf.Graph().as_default():
        ds = tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.int32))
        one = ds.shuffle(1).make_one_shot_iterator().get_next()
        nexts = [ds.shuffle(buf, seed=s).repeat(2).make_one_shot_iterator().get_next() for s in range(1, 6)]
        full = ds.shuffle(n, seed=9).make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            assert [int(v) for v in drain(sess, one)] == list(range(n))  # a buffer of one keeps the order
            orders = [[int(v) for v in drain(sess, t)] for t in nexts]
            whole = [int(v) for v in drain(sess, full)]
    for order in orders:
        first, second = order[:n], order[n:]
        assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))  # epochs kept apart
        assert first != second  # each epoch reshuffled
        for pos, v in enumerate(first):  # the element at pos came from the buffer: at most pos + buf - 1
            assert v <= pos + buf - 1
    assert len({tuple(o[:n]) for o in orders}) == len(orders)
    assert sorted(whole) == list(range(n)) and whole != list(range(n))


def test_shuffle_buffer_picks_uniformly():
    # With the buffer as large as the data, the first element is uniform over all of them.
    n, trials = 4, 400
    counts = np.zeros(n)
    with tf.Graph().as_default():
        first = tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.int32)).shuffle(n).repeat()
        nxt = first.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            for _ in range(trials):
                epoch = [int(sess.run(nxt)) for _ in range(n)]
                counts[epoch[0]] += 1
    assert counts.min() > trials / n * 0.6, counts


def test_map_is_graph_mode_and_runs_per_element_before_batch():
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    with tf.Graph().as_default():
        calls = []

        def per_example(x, y):
            calls.append(x.get_shape().as_list())  # built once, with one element's static shape
            return tf.reduce_sum(x) * 10.0, {"label": y + 1}

        ds = tf.data.Dataset.from_tensor_slices((xs, np.array([5, 6, 7], np.int32))).map(per_example).batch(2)
        ds = ds.map(lambda s, d: (s, d["label"] * 2))  # after batch: the function sees the batch
        total, label = ds.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            got = drain(sess, [total, label])
    assert all(c == [2] for c in calls)
    assert [t.tolist() for t, _ in got] == [[10.0, 50.0], [90.0]]
    assert [lb.tolist() for _, lb in got] == [[12, 14], [16]]


def test_initializable_iterator_captures_fed_placeholders_and_restarts():
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [None, 2])
        labels = tf.placeholder(tf.int32, [None])
        ds = tf.data.Dataset.from_tensor_slices({"f": features, "l": labels}).batch(2)
        with pytest.raises(ValueError, match="placeholder"):
            ds.make_one_shot_iterator()
        it = ds.make_initializable_iterator()
        nxt = it.get_next()
        assert nxt["f"].get_shape().as_list() == [None, 2]
        with tf.Session() as sess:
            with pytest.raises(tf.errors.UnavailableError, match="before_the_iterator_initializer"):
                sess.run(nxt)
            sess.run(it.initializer, {features: np.ones((3, 2)), labels: [1, 2, 3]})
            first = sess.run(nxt)  # the placeholders are not fed again: the initializer captured them
            assert first["l"].tolist() == [1, 2]
            assert sess.run(nxt)["l"].tolist() == [3]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(nxt)
            sess.run(it.initializer, {features: np.zeros((1, 2)), labels: [9]})
            assert sess.run(nxt)["l"].tolist() == [9]


def test_a_model_trains_on_get_next_directly():
    rng = np.random.RandomState(0)
    xs = rng.rand(256, 3).astype(np.float32)
    ys = xs @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    with tf.Graph().as_default():
        x, y = (tf.data.Dataset.from_tensor_slices((xs, ys)).shuffle(256, seed=2).repeat(30).batch(32)
                .make_one_shot_iterator().get_next())
        pred = tf.layers.dense(x, 1)
        loss = tf.reduce_mean(tf.square(pred - y))
        train = tf.train.AdamOptimizer(0.05).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            losses, steps = [], 0
            while True:
                try:
                    losses.append(sess.run([loss, train])[0])
                except tf.errors.OutOfRangeError:
                    break
                steps += 1
    assert steps == 30 * 256 // 32
    assert np.mean(losses[-8:]) < 0.01 * np.mean(losses[:8])


def test_data_refuses_what_it_does_not_do():
    ds = None
    with tf.Graph().as_default():
        ds = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype=np.int32))
        with pytest.raises(tf.errors.UnimplementedError):
            ds.shuffle(2, reshuffle_each_iteration=False)
        with pytest.raises(tf.errors.UnimplementedError, match="output_shapes"):
            tf.data.Dataset.from_generator(lambda: iter([1]), tf.int32).batch(2)  # batch needs the rank
        with pytest.raises(TypeError, match="must return a tf.data.Dataset"):
            ds.flat_map(lambda x: x)
        with pytest.raises(TypeError):
            iter(ds)
        with pytest.raises(ValueError, match="not equal"):
            tf.data.Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))


def test_case_takes_the_first_true_predicate_and_runs_only_it():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.int32, [])
        q = tf.FIFOQueue([tf.int32], shapes=[[]])
        r = tf.case([(x < 0, lambda: tf.constant(-1)), (x < 10, lambda: tf.constant(1)),
                     (x < 5, lambda: tf.constant(5))],
                    default=lambda: q.dequeue())  # would wait forever if it ran
        d = tf.case({x > 100: lambda: tf.constant(7)}, default=lambda: tf.constant(8))
        with tf.Session() as sess:
            assert sess.run(r, {x: -3}) == -1
            assert sess.run(r, {x: 3}) == 1  # the first true pair wins (x < 5 holds too)
            assert sess.run(d, {x: 0}) == 8 and sess.run(d, {x: 101}) == 7


def test_case_without_default_and_exclusive_assert_at_run_time_as_tf1():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.int32, [])
        # No default: the last pair is the default, and the step fails when no predicate holds.
        r = tf.case([(x < 0, lambda: tf.constant(-1)), (tf.equal(x, 0), lambda: tf.constant(0))])
        # exclusive=True: the step fails when more than one predicate holds.
        e = tf.case([(x < 10, lambda: tf.constant(1)), (x < 5, lambda: tf.constant(5))],
                    default=lambda: tf.constant(9), exclusive=True)
        with pytest.raises(ValueError, match="at least one"):
            tf.case([])
        with pytest.raises(TypeError, match="bool"):
            tf.case([(x, lambda: x)], default=lambda: x)
        with tf.Session() as sess:
            assert sess.run(r, {x: -2}) == -1 and sess.run(r, {x: 0}) == 0
            with pytest.raises(tf.errors.InvalidArgumentError, match="None of conditions evaluated as True"):
                sess.run(r, {x: 3})
            assert sess.run(e, {x: 7}) == 1 and sess.run(e, {x: 20}) == 9
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=r"Input error: exclusive=True: more than 1 conditions .* \[1 1\]"):
                sess.run(e, {x: 3})


def _all(next_element, sess):
    out = []
    while True:
        try:
            out.append(sess.run(next_element))
        except tf.errors.OutOfRangeError:
            return out


def test_filter_and_range_as_tf1():
    with tf.Graph().as_default():
        evens = tf.data.Dataset.range(10).filter(lambda x: tf.equal(tf.floormod(x, 2), 0))
        squares = tf.data.Dataset.range(3, 12, 2).map(lambda x: x * x).filter(lambda x: x > 30)  # maps before count
        pairs = tf.data.Dataset.from_tensor_slices((np.arange(8, dtype=np.int32), np.arange(8, dtype=np.float32) / 2))
        kept = pairs.filter(lambda i, f: f >= 1.5).map(lambda i, f: (i * 10, f)).batch(2)
        nothing = tf.data.Dataset.range(5).filter(lambda x: x > 100).repeat(3)
        empty = tf.data.Dataset.range(0)
        its = [d.make_one_shot_iterator().get_next() for d in (evens, squares, kept, nothing, empty)]
        with tf.Session() as sess:
            assert [int(v) for v in _all(its[0], sess)] == [0, 2, 4, 6, 8]
            assert [int(v) for v in _all(its[1], sess)] == [49, 81, 121]
            batches = _all(its[2], sess)
            assert [list(b[0]) for b in batches] == [[30, 40], [50, 60], [70]]
            np.testing.assert_allclose(batches[0][1], [1.5, 2.0])
            assert _all(its[3], sess) == [] and _all(its[4], sess) == []
        assert its[0].dtype == tf.int64
        with pytest.raises(ValueError, match="scalar boolean"):
            tf.data.Dataset.range(3).filter(lambda x: x).make_one_shot_iterator().get_next()
        # filter after batch, batch after batch
        big = tf.data.Dataset.range(6).batch(2).filter(lambda b: tf.reduce_sum(b) > 2).make_one_shot_iterator()
        twice = tf.data.Dataset.range(5).batch(2).batch(2).make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            assert [b.tolist() for b in _all(big.get_next(), sess)] == [[2, 3], [4, 5]]
            assert [b.tolist() for b in _all(twice, sess)] == [[[0, 1], [2, 3]], [[4]]]


def test_dataset_methods_refuse_what_they_cannot_do_by_name():
    with tf.Graph().as_default():
        d = tf.data.Dataset.range(4)
        for call, what in ((lambda: tf.data.Dataset.from_generator(lambda: iter([1]), tf.int64).shuffle(2),
                            "output_shapes"),
                           (lambda: tf.data.Dataset.from_generator(lambda: iter([1]), tf.int64, None).batch(3),
                            "output_shapes"),
                           (lambda: d.flat_map(lambda x: tf.data.Dataset.from_generator(
                               lambda: iter([1]), tf.int64, [])), "from_generator")):
            with pytest.raises(tf.errors.UnimplementedError, match=what):
                call()
