"""TF 1.x's tf.train.Saver, latest_checkpoint, get_checkpoint_state and global steps (issue 39)."""

import os

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def test_save_returns_tf_paths_and_restore_takes_them(tmp_path):
    w = tf.Variable(np.float32([1.0, 2.0]), name="w")
    inc = w.assign_add([1.0, 1.0])
    saver = tf.train.Saver(max_to_keep=2)
    prefix = str(tmp_path / "model" / "model.ckpt")  # the directory does not exist yet, as TF allows
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        paths = []
        for step in (100, 200, 300):
            paths.append(saver.save(sess, prefix, global_step=step))
            sess.run(inc)
        assert paths == [prefix + "-100", prefix + "-200", prefix + "-300"]
        assert saver.save(sess, prefix) == prefix  # no global_step: the path itself
    state_dir = str(tmp_path / "model")
    assert tf.train.latest_checkpoint(state_dir) == prefix
    state = tf.train.get_checkpoint_state(state_dir)
    assert state.model_checkpoint_path == prefix
    assert state.all_model_checkpoint_paths == [prefix + "-300", prefix]  # max_to_keep=2
    assert not tf.train.checkpoint_exists(prefix + "-100") and tf.train.checkpoint_exists(prefix + "-300")
    with tf.Session() as sess:  # a new session restores without running the initializer
        tf.train.Saver().restore(sess, prefix + "-300")
        np.testing.assert_array_equal(sess.run(w), [3.0, 4.0])
        tf.train.Saver().restore(sess, tf.train.latest_checkpoint(state_dir))
        np.testing.assert_array_equal(sess.run(w), [4.0, 5.0])
        with pytest.raises(ValueError, match="not a valid checkpoint"):
            tf.train.Saver().restore(sess, prefix + "-100")
        with pytest.raises(ValueError, match="None"):
            tf.train.Saver().restore(sess, tf.train.latest_checkpoint(str(tmp_path / "empty")))
    assert tf.train.get_checkpoint_state(str(tmp_path / "empty")) is None


def test_relative_paths_are_written_relative_to_the_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tf.Variable(np.float32(1.0), name="v")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        path = tf.train.Saver().save(sess, "ckpts/model.ckpt", global_step=7)
    assert path == "ckpts/model.ckpt-7"
    with open("ckpts/checkpoint") as f:
        assert f.readline().strip() == 'model_checkpoint_path: "model.ckpt-7"'
    assert tf.train.latest_checkpoint("ckpts") == os.path.join("ckpts", "model.ckpt-7")


def test_global_step_counts_minimize_and_names_the_checkpoint(tmp_path):
    x = tf.placeholder(tf.float32, [None, 1])
    w = tf.Variable(tf.zeros([1, 1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 2.0 * x))
    step = tf.train.get_or_create_global_step()
    assert tf.train.get_global_step() is step and tf.train.get_or_create_global_step() is step
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    opt = tf.train.GradientDescentOptimizer(0.1)
    train2 = opt.apply_gradients(opt.compute_gradients(loss), global_step=step)
    saver = tf.train.Saver(tf.global_variables())
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(5):
            sess.run(train, {x: [[1.0]]})
        sess.run(train2, {x: [[1.0]]})
        assert tf.train.global_step(sess, step) == 6
        path = saver.save(sess, str(tmp_path / "m"), global_step=step)
    assert path == str(tmp_path / "m") + "-6"


def test_saver_refuses_what_it_cannot_do():
    a = tf.Variable(np.float32(1.0), name="a")
    tf.Variable(np.float32(2.0), name="b")
    with pytest.raises(tf.errors.UnimplementedError, match="subset"):
        tf.train.Saver([a])
    with pytest.raises(tf.errors.UnimplementedError, match="name: variable"):
        tf.train.Saver({"a": a})
