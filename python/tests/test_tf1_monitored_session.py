"""TF 1.x's tf.train.MonitoredTrainingSession and hooks, in the shape TF 1.x training loops use them."""

import glob
import logging
import os

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _model():
    x = tf.placeholder(tf.float32, [None, 2])
    y = tf.placeholder(tf.float32, [None, 1])
    w = tf.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    gs = tf.train.get_or_create_global_step()
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    return x, y, w, loss, gs, train


DATA_X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
DATA_Y = np.array([[2.0], [-1.0], [1.0]], np.float32)


def test_training_loop_stops_at_step_saves_and_resumes(tmp_path):
    x, y, w, loss, gs, train = _model()
    tf.summary.scalar("loss", loss)
    ckpt = str(tmp_path / "train")
    hooks = [tf.train.StopAtStepHook(last_step=50), tf.train.NanTensorHook(loss)]
    steps = 0
    with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpt, hooks=hooks, save_summaries_steps=10,
                                           log_step_count_steps=10) as sess:
        while not sess.should_stop():
            sess.run(train, {x: DATA_X, y: DATA_Y})
            steps += 1
    assert steps == 50
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-50")
    assert os.path.exists(os.path.join(ckpt, "model.ckpt-0"))  # saved when the session was made, as TF
    assert glob.glob(os.path.join(ckpt, "events.out.tfevents.*"))  # summaries and global_step/sec
    with open(glob.glob(os.path.join(ckpt, "events.out.tfevents.*"))[0], "rb") as f:
        events = f.read()
    assert b"loss" in events and b"global_step/sec" in events
    # A new session in the same directory resumes from the checkpoint and runs to the new last step.
    final = tf.train.FinalOpsHook(gs)
    with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpt, hooks=[tf.train.StopAtStepHook(num_steps=5),
                                                                       final]) as sess:
        feed = {x: DATA_X, y: DATA_Y}  # the summary hook's first run fetches the loss summary, as in TF
        assert sess.run(gs, feed) == 50
        w_at_50 = sess.run(w, feed)
        while not sess.should_stop():
            sess.run(train, feed)
        with pytest.raises(RuntimeError, match="should_stop"):  # as TF
            sess.run(gs, feed)
    assert final.final_ops_values == 55
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-55")  # saved at the end
    assert np.abs(w_at_50).sum() > 0  # restored, not re-initialized


def test_hooks_get_fetches_feeds_and_stop_requests():
    x, y, w, loss, gs, train = _model()

    class Recorder(tf.train.SessionRunHook):
        def __init__(self):
            self.calls, self.losses = [], []

        def begin(self):
            self.calls.append("begin")

        def after_create_session(self, session, coord):
            self.calls.append("created")

        def before_run(self, run_context):
            return tf.train.SessionRunArgs({"loss": loss}, feed_dict={y: DATA_Y})

        def after_run(self, run_context, run_values):
            self.losses.append(run_values.results["loss"])
            if len(self.losses) == 3:
                run_context.request_stop()

        def end(self, session):
            self.calls.append("end")

    rec = Recorder()
    final = tf.train.FinalOpsHook(w)
    feeds = tf.train.FeedFnHook(lambda: {x: DATA_X})
    with tf.train.MonitoredTrainingSession(hooks=[rec, final, feeds]) as sess:
        while not sess.should_stop():
            assert sess.run(train) is None  # the caller's fetch: an Operation gives None
        with pytest.raises(RuntimeError, match="should_stop"):
            sess.run(train)
    assert rec.calls == ["begin", "created", "end"]
    assert len(rec.losses) == 3 and rec.losses[2] < rec.losses[0]
    assert final.final_ops_values.shape == (2, 1)
    with tf.train.MonitoredTrainingSession(hooks=[feeds]) as sess:
        with pytest.raises(RuntimeError, match="fed by a SessionRunHook and user"):
            sess.run(loss, {x: DATA_X, y: DATA_Y})


def test_nan_and_logging_hooks(caplog):
    x, y, w, loss, gs, train = _model()
    bad = loss * float("nan")
    with pytest.raises(tf.train.NanLossDuringTrainingError):
        with tf.train.MonitoredTrainingSession(hooks=[tf.train.NanTensorHook(bad)]) as sess:
            sess.run(train, {x: DATA_X, y: DATA_Y})
    with tf.train.MonitoredTrainingSession(hooks=[tf.train.NanTensorHook(bad, fail_on_nan_loss=False)]) as sess:
        sess.run(train, {x: DATA_X, y: DATA_Y})
        assert sess.should_stop()
    logger = logging.getLogger("tensorflow")
    logger.propagate = True
    tf.logging.set_verbosity(tf.logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="tensorflow"):
            hook = tf.train.LoggingTensorHook({"step": gs, "loss": loss}, every_n_iter=2)
            with tf.train.MonitoredTrainingSession(hooks=[hook]) as sess:
                for _ in range(5):
                    sess.run(train, {x: DATA_X, y: DATA_Y})
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loss = ")]
        assert len(logged) == 3 and "step = " in logged[0]
    finally:
        logger.propagate = False
        tf.logging.set_verbosity(tf.logging.WARN)


def test_end_of_input_ends_training_quietly_and_queue_runners_start():
    data = tf.data.Dataset.from_tensor_slices(np.arange(6, dtype=np.float32)).batch(2)
    nxt = data.make_one_shot_iterator().get_next()
    q = tf.FIFOQueue(10, [tf.float32], shapes=[[]])
    tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue([tf.constant(1.0)])]))
    total = tf.Variable(0.0)
    add = tf.assign_add(total, tf.reduce_sum(nxt) + q.dequeue())
    seen = []
    with tf.train.MonitoredTrainingSession() as sess:
        while not sess.should_stop():
            seen.append(sess.run(add))
    assert seen == [2.0, 8.0, 18.0]  # 0+1 +1, 2+3 +1, 4+5 +1; OutOfRangeError ended the loop


def test_what_monitored_sessions_refuse():
    _model()
    with pytest.raises(tf.errors.UnimplementedError, match="ClusterSession"):
        tf.train.MonitoredTrainingSession(master="grpc://10.0.0.1:2222")
    with pytest.raises(tf.errors.UnimplementedError, match="non-chief"):
        tf.train.MonitoredTrainingSession(is_chief=False)
    tf.reset_default_graph()
    tf.Variable(1.0)
    with pytest.raises(RuntimeError, match="Global step should be created to use StopAtStepHook"):
        tf.train.MonitoredTrainingSession(hooks=[tf.train.StopAtStepHook(last_step=3)])
    with pytest.raises(ValueError, match="One of num_steps or last_step"):
        tf.train.StopAtStepHook()
