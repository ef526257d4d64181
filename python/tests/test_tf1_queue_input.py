"""TF 1.x's queue input, in the idioms TF 1.x programs use: tf.train.Coordinator, QueueRunner(queue,
enqueue_ops), start_queue_runners, slice_input_producer, batch, shuffle_batch.

Expected values follow TensorFlow 1.x's documented behaviour: every row once per epoch, epochs kept
apart, OutOfRangeError after the last batch, the Coordinator's stop and join rules.
"""

import threading

import numpy as np
import pytest

import shardflow as tf
from shardflow import _core

BACKSTOP_S = 20


def drain(sess, fetches):
    out = []
    while True:
        try:
            out.append(sess.run(fetches))
        except tf.errors.OutOfRangeError:
            return out


def test_queue_runner_has_tf_signature_and_closes_after_input_ends():
    g = tf.Graph()
    with g.as_default():
        src = tf.FIFOQueue([tf.int32], shapes=[[]], capacity=100)
        fill = src.enqueue_many([tf.range(10)])
        close_src = src.close()
        dst = tf.FIFOQueue([tf.int32], shapes=[[]], capacity=3)
        qr = tf.train.QueueRunner(dst, [dst.enqueue([src.dequeue() * 2])] * 2)
        assert qr.queue is dst and len(qr.enqueue_ops) == 2
        tf.train.add_queue_runner(qr)
        assert tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS) == [qr]
        out = dst.dequeue()
    with tf.Session(graph=g) as sess:
        sess.run(fill)
        sess.run(close_src)  # the runner's enqueues raise OutOfRangeError once src is empty
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        assert len(threads) == 3  # two enqueue threads and the one that cancels on stop
        assert tf.train.start_queue_runners(sess=sess, coord=coord) == []  # already running in sess
        got = [int(v) for v in drain(sess, out)]  # ends: the last runner thread closed dst
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert sorted(got) == [2 * i for i in range(10)]


def test_coordinator_stop_cancels_enqueues_blocked_on_a_full_queue():
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue([tf.float32], shapes=[[]], capacity=2)
        tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue([tf.constant(1.0)])]))
        size = q.size()
    with tf.Session(graph=g) as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        assert all(t.daemon for t in threads)
        assert sess.run(q.dequeue_many(2)).tolist() == [1.0, 1.0]
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)  # no RuntimeError: every thread ended
        assert not any(t.is_alive() for t in threads)
        assert sess.run(size) <= 2


def test_coordinator_reraises_a_runner_error_and_treats_out_of_range_as_clean():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2])
        q = tf.FIFOQueue([tf.float32], shapes=[[2]])
        tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue([x])]))  # x never fed: a real error
    with tf.Session(graph=g) as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        assert coord.wait_for_stop(BACKSTOP_S)
        with pytest.raises(tf.errors.InvalidArgumentError):
            coord.join(threads)
        assert coord.joined

    coord = tf.train.Coordinator()
    with coord.stop_on_exception():
        raise tf.errors.OutOfRangeError("end of input")
    assert coord.should_stop()
    coord.join([])  # a clean stop: nothing raised
    coord.clear_stop()
    assert not coord.should_stop()
    with coord.stop_on_exception():
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        coord.join()


def test_coordinator_join_names_threads_that_do_not_stop():
    coord = tf.train.Coordinator()
    release = threading.Event()
    t = threading.Thread(target=release.wait, args=(BACKSTOP_S,), name="stubborn")
    t.start()
    coord.register_thread(t)
    coord.request_stop()
    with pytest.raises(RuntimeError, match="stubborn"):
        coord.join(stop_grace_period_secs=0.05)
    release.set()
    t.join()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # TF re-raises it in the thread
def test_queue_runner_without_coordinator_records_its_error():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2])
        q = tf.FIFOQueue([tf.float32], shapes=[[2]])
        qr = tf.train.queue_runner.QueueRunner(q, [q.enqueue([x])])
    with tf.Session(graph=g) as sess:
        threads = qr.create_threads(sess, start=True)
        assert len(threads) == 1  # no coordinator, no cancel thread
        threads[0].join(BACKSTOP_S)
    assert len(qr.exceptions_raised) == 1
    assert isinstance(qr.exceptions_raised[0], tf.errors.InvalidArgumentError)


def test_slice_input_producer_gives_every_row_once_per_epoch_then_out_of_range():
    images = np.arange(12, dtype=np.float32).reshape(6, 2)
    labels = np.arange(6, dtype=np.int32) * 10
    g = tf.Graph()
    with g.as_default():
        image, label = tf.train.slice_input_producer([images, labels], num_epochs=3, shuffle=True, seed=7)
        assert image.get_shape().as_list() == [2] and label.get_shape().as_list() == []
        init = tf.local_variables_initializer()  # the epoch counter is a local variable, as in TF
    with tf.Session(graph=g) as sess:
        sess.run(init)
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        rows = drain(sess, [image, label])
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert len(rows) == 18
    for im, lb in rows:
        np.testing.assert_array_equal(im, images[lb // 10])  # the same row of both tensors
    order = [int(lb) // 10 for _, lb in rows]
    for e in range(3):  # each epoch is a permutation of the rows, kept apart from the next
        assert sorted(order[6 * e:6 * e + 6]) == list(range(6))
    assert order != list(range(6)) * 3  # shuffled (seeded: the order is repeatable)


def test_slice_input_producer_unshuffled_cycles_in_order():
    g = tf.Graph()
    with g.as_default():
        (v,) = tf.train.slice_input_producer([tf.constant([5, 6, 7])], shuffle=False)
    with tf.Session(graph=g) as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        got = [int(sess.run(v)) for _ in range(7)]
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert got == [5, 6, 7, 5, 6, 7, 5]


def test_batch_and_final_smaller_batch():
    data = np.arange(10, dtype=np.int32)
    g = tf.Graph()
    with g.as_default():
        (x,) = tf.train.slice_input_producer([data], num_epochs=1, shuffle=False)
        xs = tf.train.batch([x], batch_size=4)  # one tensor in a list: TF gives one Tensor back
        assert xs.get_shape().as_list() == [4]
    with tf.Session(graph=g) as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        got = drain(sess, xs)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert [b.tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the last 2 are dropped, as in TF

    g = tf.Graph()
    with g.as_default():
        (x,) = tf.train.slice_input_producer([data], num_epochs=1, shuffle=False)
        d = tf.train.batch({"x": x, "y": x * 2}, batch_size=4, allow_smaller_final_batch=True)
        assert d["x"].get_shape().as_list() == [None]
    with tf.Session(graph=g) as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        got = drain(sess, d)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert [b["x"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all((b["y"] == 2 * b["x"]).all() for b in got)


def test_batch_refuses_unknown_shapes_and_enqueue_many_splits_rows():
    g = tf.Graph()
    with g.as_default():
        p = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="fully defined"):
            tf.train.batch([p], batch_size=2)
        rows = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
        b = tf.train.batch([rows], batch_size=2, enqueue_many=True, capacity=6)
        assert b.get_shape().as_list() == [2, 2]
    with tf.Session(graph=g) as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        first = sess.run(b)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    np.testing.assert_array_equal(first, [[0, 1], [2, 3]])


def test_shuffle_batch_mixes_and_keeps_pairs():
    n = 40
    feats = np.arange(n, dtype=np.float32)
    g = tf.Graph()
    with g.as_default():
        f, lab = tf.train.slice_input_producer([feats, np.arange(n, dtype=np.int32)], num_epochs=1, shuffle=False)
        fb, lb = tf.train.shuffle_batch([f, lab], batch_size=8, capacity=30, min_after_dequeue=10, num_threads=2,
                                        seed=3)
    with tf.Session(graph=g) as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        got = drain(sess, [fb, lb])
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert len(got) == n // 8
    seen = np.concatenate([b[1] for b in got])
    assert sorted(seen.tolist()) == list(range(n))  # every element once
    assert seen.tolist() != list(range(n))
    for fv, lv in got:
        np.testing.assert_array_equal(fv, lv.astype(np.float32))


def test_start_queue_runners_needs_a_session():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="No default session"):
            tf.train.start_queue_runners()


def test_control_dependencies_order_queue_ops():
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue([tf.int32], shapes=[[]])
        enq = q.enqueue_many([tf.constant([4, 5])])
        with tf.control_dependencies([enq]):
            got = q.dequeue_many(2)
    with tf.Session(graph=g) as sess:
        assert sess.run(got).tolist() == [4, 5]  # the enqueue ran first, without being fetched


def test_feed_runner_is_shardflows_old_runner():
    assert tf.train.FeedRunner is not tf.train.QueueRunner
    with pytest.raises(ValueError, match="queue and enqueue_ops"):
        tf.train.QueueRunner(None, [])


class _MovingSession:
    """A session whose enqueue_op fails as a cluster move makes it fail (the errors in `fails`, one per run,
    before it passes again), and which counts restart_op's runs."""

    def __init__(self, sess, enqueue_op, restart_op, fails, restart_fails=()):
        self._sess, self._enqueue, self._restart = sess, enqueue_op, restart_op
        self._fails, self._restart_fails = list(fails), list(restart_fails)
        self._lock = threading.Lock()
        self.restarts = 0

    def run(self, fetches, *args, **kwargs):
        with self._lock:
            if fetches is self._enqueue and self._fails:
                raise self._fails.pop(0)
            if fetches is self._restart:
                self.restarts += 1
                if self._restart_fails:
                    raise self._restart_fails.pop(0)
        return self._sess.run(fetches, *args, **kwargs)


def _stale():
    return tf.errors.AbortedError(f"node n1: slot 0 {_core.STALE_SHARD_MAP_TEXT} 3 (it moved at epoch 4)")


def test_queue_runner_restart_op_runs_when_the_cluster_moves_and_the_thread_goes_on():
    # shardflow's addition (C++'s QueueRunnerOptions::restart_target): an enqueue refused because its
    # part moved, or its node died, runs restart_op (a shared input's release) and goes on; a release
    # that meets the same move runs again. Every row still arrives once.
    g = tf.Graph()
    with g.as_default():
        src = tf.FIFOQueue([tf.int32], shapes=[[]], capacity=100)
        fill = src.enqueue_many([tf.range(10)])
        close_src = src.close()
        dst = tf.FIFOQueue([tf.int32], shapes=[[]], capacity=100)
        enqueue = dst.enqueue([src.dequeue()])
        restart = tf.no_op(name="release")
        qr = tf.train.QueueRunner(dst, [enqueue], restart_op=restart)
        assert qr.restart_op is restart
        out = dst.dequeue()
    with tf.Session(graph=g) as real:
        real.run(fill)
        real.run(close_src)
        sess = _MovingSession(real, enqueue, restart, [_stale(), tf.errors.UnavailableError("node n2 is down")],
                              restart_fails=[_stale()])
        coord = tf.train.Coordinator()
        threads = qr.create_threads(sess, coord=coord, start=True)
        got = sorted(int(v) for v in drain(real, out))  # ends: the runner closed dst once src ran out
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
    assert got == list(range(10))
    assert sess.restarts == 3  # two moves, and one release that met the same move and ran again


def test_queue_runner_without_restart_op_or_past_max_restarts_stops_with_the_error():
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue([tf.float32], shapes=[[]], capacity=10)
        enqueue = q.enqueue([tf.constant(1.0)])
        restart = tf.no_op(name="release")
        plain = tf.train.QueueRunner(q, [enqueue])
        bounded = tf.train.QueueRunner(q, [enqueue], restart_op=restart, max_restarts=2)
        with pytest.raises(ValueError, match="max_restarts"):
            tf.train.QueueRunner(q, [enqueue], max_restarts=-1)
    with tf.Session(graph=g) as real:
        # TF's behaviour without a restart_op: the error goes to the coordinator.
        sess = _MovingSession(real, enqueue, restart, [_stale()])
        coord = tf.train.Coordinator()
        threads = plain.create_threads(sess, coord=coord, start=True)
        with pytest.raises(tf.errors.AbortedError, match="stale shard map"):
            coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
        assert sess.restarts == 0
        # Moves in a row past max_restarts: the last one ends the thread.
        sess = _MovingSession(real, enqueue, restart, [_stale()] * 5)
        coord = tf.train.Coordinator()
        threads = bounded.create_threads(sess, coord=coord, start=True)
        with pytest.raises(tf.errors.AbortedError, match="stale shard map"):
            coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
        assert sess.restarts == 2
        # An error that is no move is not restarted.
        sess = _MovingSession(real, enqueue, restart, [tf.errors.InvalidArgumentError("bad feed")])
        coord = tf.train.Coordinator()
        threads = bounded.create_threads(sess, coord=coord, start=True)
        with pytest.raises(tf.errors.InvalidArgumentError, match="bad feed"):
            coord.join(threads, stop_grace_period_secs=BACKSTOP_S)
        assert sess.restarts == 0
