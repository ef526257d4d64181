#!/usr/bin/env python3
"""Softmax regression on Fashion-MNIST, written as TensorFlow 1.x's "MNIST for ML beginners".

Only the import differs from a TensorFlow 1.x program:

    PYTHONPATH=build/python python3 examples/python/tf1/softmax_fashion_mnist.py
    ... --json        # one JSON line at the end: test_accuracy, steps, seconds

The labels stay uint8 as the IDX files hold them: they are fed to a tf.uint8
placeholder and one-hot encoded in the graph. A tf.debugging assertion checks
that the fed labels are below 10. The data is Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist). With the defaults (2,000 steps of 100) it
reached 0.834 test accuracy in about a second.
"""

import json
import sys
import time

import numpy as np

import fashion_mnist_idx  # beside this file: Fashion-MNIST's IDX files as arrays

try:
    import shardflow as tf  # a TensorFlow 1.x program: `import tensorflow as tf` is the only line changed
except ImportError as e:
    sys.exit(f"{e} (README.md: /usr/bin/python3 with PYTHONPATH=build/python, or pip install .)")

flags = tf.app.flags
flags.DEFINE_string("data_dir", "/usr/share/datasets/fashion-mnist", "Directory with the gzipped IDX files.")
flags.DEFINE_integer("max_steps", 2000, "Number of training steps.")
flags.DEFINE_integer("batch_size", 100, "Batch size.")
flags.DEFINE_float("learning_rate", 0.5, "Learning rate of gradient descent.")
flags.DEFINE_integer("limit", 0, "Use only the first N training images (0: all).")
flags.DEFINE_boolean("json", False, "Print one JSON line at the end instead of text.")
FLAGS = flags.FLAGS


def load(part):
    images, labels = fashion_mnist_idx.load(FLAGS.data_dir, part)
    return images.reshape(-1, 784).astype(np.float32) / 255.0, labels


def main(_):
    train_images, train_labels = load("train")
    test_images, test_labels = load("t10k")
    if FLAGS.limit:
        train_images, train_labels = train_images[:FLAGS.limit], train_labels[:FLAGS.limit]

    x = tf.placeholder(tf.float32, [None, 784])
    labels = tf.placeholder(tf.uint8, [None])
    W = tf.Variable(tf.zeros([784, 10]))
    b = tf.Variable(tf.zeros([10]))
    logits = tf.matmul(x, W) + b

    check = tf.assert_less(labels, tf.constant(10, tf.uint8), message="labels must be below 10")
    with tf.control_dependencies([check]):
        y_ = tf.one_hot(labels, 10)
    cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=logits))
    train_step = tf.train.GradientDescentOptimizer(FLAGS.learning_rate).minimize(cross_entropy)

    correct = tf.equal(tf.argmax(logits, 1), tf.cast(labels, tf.int64))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    rng = np.random.RandomState(0)
    start = time.time()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        order = rng.permutation(len(train_images))
        pos = 0
        for step in range(FLAGS.max_steps):
            if pos + FLAGS.batch_size > len(order):
                order, pos = rng.permutation(len(train_images)), 0
            idx = order[pos:pos + FLAGS.batch_size]
            pos += FLAGS.batch_size
            sess.run(train_step, feed_dict={x: train_images[idx], labels: train_labels[idx]})
        test_accuracy = float(sess.run(accuracy, feed_dict={x: test_images, labels: test_labels}))
    seconds = time.time() - start
    if FLAGS.json:
        print(json.dumps({"example": "softmax_fashion_mnist", "test_accuracy": round(test_accuracy, 4),
                          "steps": FLAGS.max_steps, "seconds": round(seconds, 2)}))
    else:
        print("test accuracy %g (%d steps, %.1f s)" % (test_accuracy, FLAGS.max_steps, seconds))


if __name__ == "__main__":
    tf.app.run()
