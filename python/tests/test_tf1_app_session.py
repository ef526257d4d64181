"""TF 1.x's tf.app.run and flags, tf.compat.v1, and the default session (issue 39)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _python(code, *args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_flags_parse_like_absl_and_leave_unknown_ones():
    fv = tf.flags.FlagValues()
    tf.flags.DEFINE_string("data_dir", "/tmp/data", "where", flag_values=fv)
    tf.flags.DEFINE_integer("max_steps", 100, "steps", flag_values=fv)
    tf.flags.DEFINE_float("learning_rate", 0.01, "lr", flag_values=fv)
    tf.flags.DEFINE_boolean("fake_data", False, "fake", flag_values=fv)
    tf.flags.DEFINE_bool("verbose", True, "talk", flag_values=fv)
    rest = fv(["prog", "--max_steps=7", "--learning_rate", "0.5", "--fake_data", "--noverbose", "pos",
               "--unknown=3", "-data_dir=/d", "--", "--max_steps=9"], known_only=True)
    assert (fv.max_steps, fv.learning_rate, fv.fake_data, fv.verbose, fv.data_dir) == (7, 0.5, True, False, "/d")
    assert rest == ["prog", "pos", "--unknown=3", "--", "--max_steps=9"]
    fv2 = tf.flags.FlagValues()
    tf.flags.DEFINE_boolean("b", True, "", flag_values=fv2)
    tf.flags.DEFINE_integer("n", 1, "", flag_values=fv2)
    fv2(["p", "--b=false"])
    assert fv2.b is False and fv2.n == 1
    with pytest.raises(tf.flags.IllegalFlagValueError, match="--n=x"):
        fv2(["p", "--n=x"])
    with pytest.raises(tf.flags.Error, match="unknown command line flag 'zz'"):
        fv2(["p", "--zz=1"])
    with pytest.raises(tf.flags.DuplicateFlagError):
        tf.flags.DEFINE_integer("n", 2, "", flag_values=fv2)
    fv2.n = 5  # assignable, as absl's
    assert fv2.flag_values_dict() == {"b": False, "n": 5}


def test_app_run_parses_sys_argv_and_exits_with_main_value():
    out = _python("""
        import sys
        import shardflow as tf
        flags = tf.app.flags
        flags.DEFINE_integer("max_steps", 10, "Number of steps.")
        flags.DEFINE_string("data_dir", "/tmp", "Data.")
        FLAGS = flags.FLAGS

        def main(argv):
            print("steps", FLAGS.max_steps, "dir", FLAGS.data_dir, "argv", argv[1:])
            return 3

        if __name__ == "__main__":
            tf.app.run()
        """, "--max_steps=42", "--other=1", "file.txt")
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == "steps 42 dir /tmp argv ['--other=1', 'file.txt']"
    bad = _python("""
        import shardflow as tf
        tf.flags.DEFINE_integer("max_steps", 10, "Number of steps.")
        tf.app.run(main=lambda argv: 0)
        """, "--max_steps=many")
    assert bad.returncode == 1 and "--max_steps=many" in bad.stderr


def test_flags_parse_sys_argv_on_first_access_as_tf1():
    out = _python("""
        import shardflow as tf
        tf.app.flags.DEFINE_float("lr", 0.1, "Learning rate.")
        print(tf.app.flags.FLAGS.lr, tf.flags.FLAGS is tf.app.flags.FLAGS)
        """, "--lr=0.25", "--unknown")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.25", "True"]


def test_compat_v1_is_the_tf1_api():
    out = _python("""
        import shardflow.compat.v1 as tf
        tf.disable_v2_behavior()
        x = tf.placeholder(tf.float32, [None, 2])
        with tf.Session() as sess:
            print(sess.run(tf.reduce_sum(x * 2.0), {x: [[1.0, 2.0]]}))
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6.0"
    assert tf.compat.v1 is tf and tf.compat.v1.placeholder is tf.placeholder


def test_eval_and_run_use_the_default_session():
    x = tf.placeholder(tf.float32, [None, 2])
    v = tf.Variable(np.float32([1.0, 2.0]))
    y = x * 3.0
    inc = v.assign_add([1.0, 1.0])
    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        assert tf.get_default_session() is sess
        init.run()
        np.testing.assert_array_equal(y.eval(feed_dict={x: [[1, 2]]}), [[3, 6]])
        inc.op.run()
        np.testing.assert_array_equal(v.eval(), [2, 3])
    assert tf.get_default_session() is None
    with pytest.raises(ValueError, match="No default session"):
        y.eval(feed_dict={x: [[1, 2]]})
    sess = tf.Session()
    with sess.as_default():
        init.run()
        np.testing.assert_array_equal(v.eval(), [1, 2])
    np.testing.assert_array_equal(v.eval(session=sess), [1, 2])
    np.testing.assert_array_equal(y.eval({x: [[1, 1]]}, session=sess), [[3, 3]])
    sess.close()
    other = tf.Graph()
    with other.as_default():
        c = tf.constant(1.0)
    with tf.Session() as s2, pytest.raises(ValueError, match="graph is different"):
        c.eval(session=s2)


def test_session_block_makes_its_graph_the_default():
    g = tf.Graph()
    with tf.Session(graph=g) as sess:
        c = tf.constant(5.0)  # built into g, as in TF 1.x
        assert c.graph is g
        assert c.eval() == 5.0 and sess.run(c) == 5.0
    assert tf.get_default_graph() is not g


def test_interactive_session_is_default_until_closed():
    a = tf.constant([[1.0, 2.0]])
    v = tf.Variable(np.zeros(2, np.float32))
    sess = tf.InteractiveSession()
    tf.global_variables_initializer().run()
    np.testing.assert_array_equal((a * 2).eval(), [[2, 4]])
    np.testing.assert_array_equal(v.eval(), [0, 0])
    sess.run(v.initializer)
    sess.close()
    assert tf.get_default_session() is None


def test_get_shape_is_tf1s():
    x = tf.placeholder(tf.float32, [None, 784])
    w = tf.Variable(tf.zeros([784, 10]))
    s = x.get_shape()
    assert s.as_list() == [None, 784] and s.ndims == 2 and len(s) == 2
    assert s[1].value == 784 and s[0].value is None and int(s[1]) == 784
    assert [d.value for d in s.dims] == [None, 784]
    assert s[1:].as_list() == [784]
    with pytest.raises(TypeError):
        int(s[0])
    assert w.get_shape().as_list() == [784, 10] and w.get_shape()[1] == 10
    # a Dimension serves where an int is wanted, as in TF 1.x programs
    r = tf.reshape(x, [-1, s[1]])
    z = tf.zeros([w.get_shape()[0], 2])
    assert r.get_shape().as_list() == [None, 784] and z.get_shape().as_list() == [784, 2]


def test_uint8_data_feeds_an_int32_placeholder():
    labels = np.array([3, 7, 255, 0], np.uint8)  # MNIST's labels are uint8
    y = tf.placeholder(tf.int32, [None])
    counts = tf.reduce_sum(tf.one_hot(y, 10), 0)
    with tf.Session() as sess:
        got_y, got = sess.run([y, counts], {y: labels})
    np.testing.assert_array_equal(got_y, [3, 7, 255, 0])
    np.testing.assert_array_equal(got, np.eye(10)[[3, 7, 0]].sum(0))  # 255 is outside depth: a zero row, as TF


def test_session_takes_tf1s_config_and_positional_target():
    config = tf.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1,
                            allow_soft_placement=True, device_count={"CPU": 2})
    config.gpu_options.allow_growth = True  # no effect: shardflow runs on CPUs
    c = tf.constant([1.0, 2.0]) * 2.0
    with tf.Session(config=config) as sess:
        assert sess.options.compute_threads == 2 and sess.options.num_cpu_devices == 2
        sess.run(tf.group(tf.global_variables_initializer(), tf.local_variables_initializer()))
        np.testing.assert_array_equal(sess.run(c), [2, 4])
    g = tf.Graph()
    with g.as_default():
        d = tf.constant(3.0)
    with tf.Session("", g) as sess:  # TF 1.x's order: target, graph, config
        assert sess.run(d) == 3.0
    with pytest.raises(tf.errors.UnimplementedError, match="ClusterSession"):
        tf.Session("grpc://localhost:2222")
    with pytest.raises(ValueError, match='no "bogus" field'):
        tf.ConfigProto(bogus=1)
