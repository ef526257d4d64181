#!/usr/bin/env python3
"""Between-graph replication on Fashion-MNIST, written as TensorFlow 1.x's "Distributed TensorFlow" trainer.

One program, run once per task of the cluster, as with TensorFlow 1.x (only the import differs):

    trainer.py --ps_hosts=H:P[,...] --worker_hosts=H:P,H:P --job_name=ps --task_index=0
    trainer.py --ps_hosts=... --worker_hosts=... --job_name=worker --task_index=0   # the chief
    trainer.py --ps_hosts=... --worker_hosts=... --job_name=worker --task_index=1

Each worker builds the model under tf.device(tf.train.replica_device_setter(cluster=...)), makes a
tf.train.Server and trains its half of the training set with MonitoredTrainingSession(master=server.target,
is_chief=...) until the shared global step reaches --train_steps; the chief reports the test accuracy.
Under shardflow the ps tasks are `shardflow node` processes (tf.train.Server starts them on their
addresses), the variables live on them and both workers' sessions update the same copy. The nodes read
the cluster's credentials and etcd from SHARDFLOW_TLS_DIR and SHARDFLOW_ETCD (docs/PYTHON.md).

Without --job_name the program runs the whole cluster on this machine (--num_ps ps tasks and
--num_workers workers on 127.0.0.1, each a process of this program) and prints the chief's result last:

    PYTHONPATH=build/python python3 examples/python/tf1/replicated_trainer.py --json

That launcher is the only part that is not TensorFlow 1.x: under shardflow it makes the credentials and
the etcd the tasks share (sf.cluster.LocalEnvironment). With the defaults (2 ps tasks, 2 workers, a
hidden layer of 128, Adagrad, 3,000 global steps of 100 images, about 1,500 per worker) it reached 0.864 to 0.867
test accuracy, the whole cluster in 15 to 21 s on a 2-core machine.
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

import fashion_mnist_idx  # beside this file: Fashion-MNIST's IDX files as arrays

try:
    import shardflow as tf  # a TensorFlow 1.x program: `import tensorflow as tf` is the only line changed
except ImportError as e:
    sys.exit(f"{e} (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)")

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "", "Comma-separated host:port pairs of the ps job.")
flags.DEFINE_string("worker_hosts", "", "Comma-separated host:port pairs of the worker job.")
flags.DEFINE_string("job_name", "", "ps or worker; empty: run the whole cluster on this machine.")
flags.DEFINE_integer("task_index", 0, "Index of the task within its job.")
flags.DEFINE_integer("num_ps", 2, "Without --job_name: ps tasks to start.")
flags.DEFINE_integer("num_workers", 2, "Without --job_name: workers to start.")
flags.DEFINE_string("data_dir", "/usr/share/datasets/fashion-mnist", "Directory with the gzipped IDX files.")
flags.DEFINE_integer("train_steps", 3000, "Global steps of all workers together.")
flags.DEFINE_integer("batch_size", 100, "Batch size of each worker's step.")
flags.DEFINE_integer("hidden_units", 128, "Units of the hidden layer.")
flags.DEFINE_float("learning_rate", 0.1, "Learning rate of Adagrad.")
flags.DEFINE_integer("limit", 0, "Use only the first N training images (0: all).")
flags.DEFINE_integer("timeout_s", 900, "Without --job_name: stop the cluster after this long.")
flags.DEFINE_boolean("json", False, "Print one JSON line at the end instead of text.")
FLAGS = flags.FLAGS


def load(part):
    images, labels = fashion_mnist_idx.load(FLAGS.data_dir, part)
    return images.reshape(-1, 784).astype(np.float32) / 255.0, labels.astype(np.int64)


def train():
    ps_hosts = FLAGS.ps_hosts.split(",")
    worker_hosts = FLAGS.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return

    is_chief = FLAGS.task_index == 0
    train_images, train_labels = load("train")
    if FLAGS.limit:
        train_images, train_labels = train_images[:FLAGS.limit], train_labels[:FLAGS.limit]
    # Each worker trains on its own shard of the data.
    train_images = train_images[FLAGS.task_index::len(worker_hosts)]
    train_labels = train_labels[FLAGS.task_index::len(worker_hosts)]
    test_images, test_labels = load("t10k")

    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        x = tf.placeholder(tf.float32, [None, 784])
        y_ = tf.placeholder(tf.int64, [None])
        hid_w = tf.Variable(tf.truncated_normal([784, FLAGS.hidden_units], stddev=1.0 / 28, seed=1), name="hid_w")
        hid_b = tf.Variable(tf.zeros([FLAGS.hidden_units]), name="hid_b")
        sm_w = tf.Variable(tf.truncated_normal([FLAGS.hidden_units, 10], stddev=1.0 / np.sqrt(FLAGS.hidden_units),
                                               seed=2), name="sm_w")
        sm_b = tf.Variable(tf.zeros([10]), name="sm_b")
        hid = tf.nn.relu(tf.nn.xw_plus_b(x, hid_w, hid_b))
        logits = tf.nn.xw_plus_b(hid, sm_w, sm_b)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.AdagradOptimizer(FLAGS.learning_rate).minimize(loss, global_step=global_step)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y_), tf.float32))

    final = tf.train.FinalOpsHook(accuracy, final_ops_feed_dict={x: test_images, y_: test_labels})
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    rng = np.random.RandomState(FLAGS.task_index)
    local_steps, last_loss = 0, float("nan")
    start = time.time()
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks,
                                           chief_only_hooks=[final]) as sess:
        while not sess.should_stop():
            idx = rng.randint(0, len(train_images), FLAGS.batch_size)
            _, last_loss, step = sess.run([train_op, loss, global_step],
                                          feed_dict={x: train_images[idx], y_: train_labels[idx]})
            local_steps += 1
    seconds = time.time() - start
    result = {"example": "replicated_trainer", "task_index": FLAGS.task_index, "is_chief": is_chief,
              "local_steps": local_steps, "global_step": int(step), "loss": round(float(last_loss), 4),
              "seconds": round(seconds, 2)}
    if is_chief:
        result["test_accuracy"] = round(float(final.final_ops_values), 4)
    if FLAGS.json:
        print(json.dumps(result), flush=True)
    else:
        print("worker %d: %d of %d global steps here, loss %.4f, %.1f s%s" % (
            FLAGS.task_index, local_steps, step, last_loss, seconds,
            ", test accuracy %.4f" % result["test_accuracy"] if is_chief else ""), flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launch_local():
    """Runs --num_ps ps tasks and --num_workers workers of this program on 127.0.0.1; prints the chief's line last."""
    ports = free_ports(FLAGS.num_ps + FLAGS.num_workers)
    ps_hosts = ",".join("127.0.0.1:%d" % p for p in ports[:FLAGS.num_ps])
    worker_hosts = ",".join("127.0.0.1:%d" % p for p in ports[FLAGS.num_ps:])
    env = dict(os.environ)
    local = None
    if tf.__name__ == "shardflow":
        local = tf.cluster.LocalEnvironment()  # credentials and an etcd for the ps nodes
        env.update(local.env)
    passed = [a for a in sys.argv[1:] if not a.startswith(("--num_ps", "--num_workers", "--timeout_s"))]
    common = [sys.executable, os.path.abspath(__file__), "--ps_hosts=" + ps_hosts,
              "--worker_hosts=" + worker_hosts] + passed
    start = time.time()
    ps = [subprocess.Popen(common + ["--job_name=ps", "--task_index=%d" % i], env=env, stdin=subprocess.DEVNULL)
          for i in range(FLAGS.num_ps)]
    workers = [subprocess.Popen(common + ["--job_name=worker", "--task_index=%d" % i], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
               for i in range(FLAGS.num_workers)]
    outputs, failed = [], False
    try:
        for w in workers:
            out, _ = w.communicate(timeout=max(1.0, FLAGS.timeout_s - (time.time() - start)))
            outputs.append(out)
            failed = failed or w.returncode != 0
    finally:
        for p in workers + ps:
            if p.poll() is None:
                p.terminate()
        for p in workers + ps:
            p.wait()
        if local is not None:
            local.close()
    seconds = time.time() - start
    for i, out in enumerate(outputs[1:], 1):
        sys.stdout.write(out)
    if outputs:
        chief = outputs[0].strip().splitlines()[-1] if outputs[0].strip() else ""
        if FLAGS.json and chief.startswith("{"):
            line = json.loads(chief)
            line.update(cluster_seconds=round(seconds, 2), num_ps=FLAGS.num_ps, num_workers=FLAGS.num_workers)
            print(json.dumps(line))
        else:
            print(outputs[0], end="")
    if failed:
        sys.exit("a worker failed")


def main(_):
    if FLAGS.job_name:
        train()
    else:
        launch_local()


if __name__ == "__main__":
    tf.app.run()
