"""TF 1.x's int8, int16 and uint8 (MNIST's labels are uint8): placeholders, feeds, fetches, constants,
Cast, comparisons, one_hot, and the label idioms of TF 1.x programs, checked against NumPy."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _run(fetches, feed=None):
    with tf.Session() as s:
        return s.run(fetches, feed or {})


SMALL = [(tf.int8, np.int8), (tf.int16, np.int16), (tf.uint8, np.uint8)]


@pytest.mark.parametrize("dt,npd", SMALL)
def test_dtype_objects_match_numpy(dt, npd):
    assert dt == npd and tf.as_dtype(npd) is dt and tf.as_dtype(dt.name) is dt
    assert dt.as_numpy_dtype == np.dtype(npd) and dt.size == np.dtype(npd).itemsize
    assert dt.is_integer and not dt.is_floating
    assert (dt.min, dt.max) == (np.iinfo(npd).min, np.iinfo(npd).max)
    assert dt.is_unsigned == (npd is np.uint8)
    assert tf.float32.max == float(np.finfo(np.float32).max)


@pytest.mark.parametrize("dt,npd", SMALL)
def test_placeholder_feed_fetch_keeps_dtype_and_values(dt, npd):
    info = np.iinfo(npd)
    v = np.array([[info.min, 0, 1], [7, info.max - 1, info.max]], npd)
    x = tf.placeholder(dt, [None, 3])
    y = tf.identity(x)
    got = _run(y, {x: v})
    assert got.dtype == npd
    np.testing.assert_array_equal(got, v)
    # A Python list feeds when every value fits; one that does not is refused by name.
    np.testing.assert_array_equal(_run(y, {x: [[1, 2, 3]]}), [[1, 2, 3]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not fit"):
        _run(y, {x: [[info.max + 1, 0, 0]]})
    # Wider NumPy integers do not narrow silently (same-kind casting refuses int64 -> int8 only by range).
    with pytest.raises(tf.errors.InvalidArgumentError):
        _run(y, {x: np.array([[0.5, 1, 2]])})


def test_constants_from_numpy_keep_their_small_dtype():
    labels = np.array([5, 0, 4, 1, 9], np.uint8)
    c = tf.constant(labels)
    assert c.dtype == tf.uint8
    d = tf.constant([1, 2, 300], dtype=tf.int16)
    assert d.dtype == tf.int16
    got_c, got_d = _run([c, d])
    assert got_c.dtype == np.uint8 and got_d.dtype == np.int16
    np.testing.assert_array_equal(got_c, labels)
    np.testing.assert_array_equal(got_d, [1, 2, 300])


def test_cast_to_and_from_every_dtype_as_numpy():
    x = np.array([-3.7, -1.0, 0.0, 1.5, 100.25, 127.0], np.float32)
    f = tf.constant(x)
    outs = _run([tf.cast(f, tf.int8), tf.cast(f, tf.int16), tf.cast(tf.abs(f), tf.uint8)])
    np.testing.assert_array_equal(outs[0], x.astype(np.int8))
    np.testing.assert_array_equal(outs[1], x.astype(np.int16))
    np.testing.assert_array_equal(outs[2], np.abs(x).astype(np.uint8))
    assert [o.dtype for o in outs] == [np.int8, np.int16, np.uint8]
    u = tf.constant(np.array([0, 1, 200, 255], np.uint8))
    i8 = tf.constant(np.array([-128, -1, 0, 127], np.int8))
    got = _run([tf.cast(u, tf.float32), tf.cast(u, tf.int64), tf.cast(u, tf.int8), tf.cast(i8, tf.uint8),
                tf.cast(i8, tf.int16), tf.cast(u, tf.bool), tf.cast(tf.constant([True, False]), tf.uint8)])
    un, i8n = np.array([0, 1, 200, 255], np.uint8), np.array([-128, -1, 0, 127], np.int8)
    want = [un.astype(np.float32), un.astype(np.int64), un.astype(np.int8), i8n.astype(np.uint8),
            i8n.astype(np.int16), un.astype(bool), np.array([1, 0], np.uint8)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dt,npd", SMALL)
def test_comparisons_broadcast(dt, npd):
    a = np.array([[0, 5, 9], [3, 3, 1]], npd)
    b = np.array([3, 5, 0], npd)
    x, y = tf.constant(a), tf.constant(b)
    got = _run([tf.equal(x, y), tf.not_equal(x, y), tf.less(x, y), tf.less_equal(x, y), tf.greater(x, y),
                tf.greater_equal(x, y), tf.equal(x, 3)])
    want = [a == b, a != b, a < b, a <= b, a > b, a >= b, a == 3]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_one_hot_of_uint8_labels_and_refusals():
    labels = np.array([3, 0, 9, 255], np.uint8)
    y = tf.placeholder(tf.uint8, [None])
    oh = tf.one_hot(y, 10)
    oh8 = tf.one_hot(y, 4, dtype=tf.uint8)
    got, got8 = _run([oh, oh8], {y: labels})
    np.testing.assert_array_equal(got, np.vstack([np.eye(10)[[3, 0, 9]], np.zeros(10)]))  # 255: a zero row, as TF
    assert got8.dtype == np.uint8
    np.testing.assert_array_equal(got8, [[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    # TensorFlow's one_hot takes uint8, int32 and int64 indices; int8 is refused by name.
    with pytest.raises(tf.errors.InvalidArgumentError, match="indices must be uint8, int32 or int64, got int8"):
        tf.one_hot(tf.constant(np.array([1], np.int8)), 3)


def test_mnist_label_idioms_accuracy_from_uint8_labels():
    # The TF 1.x tutorial's accuracy with uint8 labels: argmax compared to the labels cast to int64,
    # and the one-hot path through softmax cross-entropy.
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 10, size=64).astype(np.uint8)
    logits_v = rng.randn(64, 10).astype(np.float32)
    logits_v[np.arange(40), labels[:40]] += 10.0  # the first 40 right
    x = tf.placeholder(tf.float32, [None, 10])
    y_ = tf.placeholder(tf.uint8, [None])
    correct = tf.equal(tf.argmax(x, 1), tf.cast(y_, tf.int64))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    xent = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf.one_hot(y_, 10), logits=x))
    acc, loss = _run([accuracy, xent], {x: logits_v, y_: labels})
    want_acc = np.mean(np.argmax(logits_v, 1) == labels)
    assert acc == pytest.approx(want_acc)
    z = logits_v - logits_v.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert loss == pytest.approx(-np.mean(logp[np.arange(64), labels]), rel=1e-5)


def test_small_ints_move_through_data_ops_queues_and_datasets():
    v = np.arange(24, dtype=np.uint8).reshape(4, 6)
    c = tf.constant(v)
    outs = _run([tf.reshape(c, [6, 4]), tf.transpose(c), tf.gather(c, [3, 0]), c[1:3, ::2],
                 tf.concat([c, c], 0), tf.stack([c[0], c[1]])])
    want = [v.reshape(6, 4), v.T, v[[3, 0]], v[1:3, ::2], np.concatenate([v, v]), np.stack([v[0], v[1]])]
    for g, w in zip(outs, want):
        assert g.dtype == np.uint8
        np.testing.assert_array_equal(g, w)
    q = tf.FIFOQueue(4, [tf.int8], shapes=[[2]])
    enq = q.enqueue([tf.constant(np.array([-5, 6], np.int8))])
    with tf.Session() as s:
        s.run(enq)
        got = s.run(q.dequeue())
    assert got.dtype == np.int8 and list(got) == [-5, 6]
    labels = np.array([9, 8, 7, 6, 5], np.uint8)
    it = tf.data.Dataset.from_tensor_slices(labels).batch(2).make_one_shot_iterator().get_next()
    with tf.Session() as s:
        first = s.run(it)
    assert first.dtype == np.uint8 and list(first) == [9, 8]


def test_variables_of_small_ints_assign_and_save(tmp_path):
    v = tf.Variable(np.array([1, 2, 3], np.int16), name="counts")
    inc = v.assign_add(tf.constant(np.array([10, 20, 30], np.int16)))
    saver = tf.train.Saver()
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        s.run(inc)
        path = saver.save(s, str(tmp_path / "model"))
    with tf.Session() as s:
        saver.restore(s, path)
        got = s.run(v)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, [11, 22, 33])


@pytest.mark.parametrize("dt,npd", SMALL)
def test_arithmetic_and_reductions_wrap_as_numpy_and_tf(dt, npd):
    a_np = np.array([[7, 100, 3], [0, 120, 9]], npd)
    b_np = np.array([2, 100, 5], npd)
    a, b = tf.constant(a_np), tf.constant(b_np)
    got = _run([a + b, a - b, a * b, tf.maximum(a, b), tf.minimum(a, b), a + 1, tf.reduce_sum(a, 1),
                tf.reduce_max(a, 0), tf.reduce_min(a), tf.argmax(a, 1), tf.zeros_like(a), tf.ones_like(b)])
    with np.errstate(over="ignore"):
        want = [a_np + b_np, a_np - b_np, a_np * b_np, np.maximum(a_np, b_np), np.minimum(a_np, b_np),
                a_np + npd(1), a_np.sum(1, dtype=npd), a_np.max(0), a_np.min(), a_np.argmax(1),
                np.zeros_like(a_np), np.ones_like(b_np)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[0].dtype == npd and got[6].dtype == npd


@pytest.mark.parametrize("dt,npd", SMALL)
def test_division_and_unary_math_as_tf1(dt, npd):
    # TF 1.x: / on integers is truediv (int8, int16, uint8 give float32), // floor division, % floor modulo;
    # tf.div is Python 2's (floor for integers), tf.truncatediv / truncatemod round toward zero (C's).
    signed = dt != tf.uint8
    x_np = np.array([7, -7, 9, -128, 0, 5] if signed else [7, 200, 9, 255, 0, 5], npd)
    y_np = np.array([2, 2, -4, 3, 3, -1] if signed else [2, 7, 4, 16, 3, 1], npd)
    x, y = tf.placeholder(dt, [None]), tf.constant(y_np)
    got = _run([x / y, x // y, x % y, tf.div(x, y), tf.floordiv(x, y), tf.floor_div(x, y), tf.mod(x, y),
                tf.floormod(x, y), tf.truncatediv(x, y), tf.truncatemod(x, y), tf.truediv(x, y), x // 3, 100 // y,
                -x, abs(x), tf.abs(x), tf.square(x), tf.sign(x), tf.negative(x)], {x: x_np})
    xi, yi = x_np.astype(np.int64), y_np.astype(np.int64)
    trunc = np.trunc(xi / yi).astype(np.int64)
    with np.errstate(over="ignore"):
        want = [x_np.astype(np.float32) / y_np.astype(np.float32)] + [(xi // yi).astype(npd)] + \
               [(xi % yi).astype(npd)] + [(xi // yi).astype(npd)] * 3 + [(xi % yi).astype(npd)] * 2 + \
               [trunc.astype(npd), (xi - trunc * yi).astype(npd), x_np.astype(np.float32) / y_np.astype(np.float32),
                (xi // 3).astype(npd), (100 // yi).astype(npd), -x_np, np.abs(x_np), np.abs(x_np),
                np.square(x_np), np.sign(x_np), -x_np]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, i
        np.testing.assert_array_equal(g, w, err_msg=str(i))
    assert got[0].dtype == np.float32  # TF's truediv of 8- and 16-bit integers is float32


def test_division_names_refuse_what_tf_refuses():
    i, f = tf.constant(np.array([7, -7], np.int8)), tf.constant([7.0, -7.0])
    xs = np.array([1.0, -1.0, 0.3, -5.5, 7.25, 1e30], np.float64)
    ys = np.array([0.1, 0.1, -0.1, 2.0, -0.5, 3.0], np.float64)
    got = _run([tf.div(f, 2.0), tf.realdiv(f, 2.0), tf.div_no_nan(f, tf.constant([0.0, 2.0])),
                tf.truncatemod(f, 2.0), tf.math.truncatediv(i, tf.constant(np.int8(2))),
                tf.math.divide_no_nan(f, tf.constant([2.0, 0.0])), tf.truncatemod(tf.constant(xs), tf.constant(ys))])
    np.testing.assert_array_equal(got[0], [3.5, -3.5])
    np.testing.assert_array_equal(got[1], [3.5, -3.5])
    np.testing.assert_array_equal(got[2], [0.0, -3.5])
    np.testing.assert_array_equal(got[3], np.fmod([7.0, -7.0], 2.0))
    np.testing.assert_array_equal(got[4], [3, -3])
    np.testing.assert_array_equal(got[5], [3.5, 0.0])
    np.testing.assert_array_equal(got[6], np.fmod(xs, ys))  # exactly C's fmod (1.0 fmod 0.1 is not 0)
    with pytest.raises(TypeError, match="tf.realdiv is for floats"):
        tf.realdiv(i, i)
    with pytest.raises(TypeError, match="tf.truncatediv is for integers"):
        tf.truncatediv(f, f)
    with pytest.raises(TypeError, match="tf.div_no_nan is for floats"):
        tf.div_no_nan(i, i)
    with pytest.raises(TypeError, match="x is int8 but y is float32"):
        tf.div(i, f)


def test_ops_without_small_int_kernels_say_so():
    a = tf.constant(np.array([1, 2], np.uint8))  # TF has no uint8 Pow kernel either
    with pytest.raises(tf.errors.NotFoundError, match="no CPU kernel for op Pow.*uint8"):
        _run(tf.pow(a, a))


def test_dtypes_shardflow_lacks_are_refused_by_name():
    for name in ("uint16", "uint32", "complex64", "string"):
        with pytest.raises(AttributeError, match=f"no {name} dtype"):
            getattr(tf, name)


def test_bitcast_as_tf():
    f = tf.constant(np.array([1.0, -2.5], np.float32))
    b = tf.bitcast(f, tf.uint8)
    back = tf.bitcast(b, tf.float32)
    i = tf.bitcast(tf.constant(np.array([1.5], np.float64)), tf.int64)
    assert b.get_shape().as_list() == [2, 4] and back.get_shape().as_list() == [2]
    got_b, got_back, got_i = _run([b, back, i])
    np.testing.assert_array_equal(got_b, np.array([1.0, -2.5], np.float32).view(np.uint8).reshape(2, 4))
    np.testing.assert_array_equal(got_back, [1.0, -2.5])
    assert got_i[0] == np.array([1.5]).view(np.int64)[0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="last dimension of 4"):
        tf.bitcast(tf.constant(np.zeros(3, np.uint8)), tf.float32)
