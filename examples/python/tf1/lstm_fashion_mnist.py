#!/usr/bin/env python3
"""An LSTM classifier reading Fashion-MNIST images row by row (28 steps of 28 pixels), written as the
well-known TensorFlow 1.x recurrent-network tutorials are (only the import differs):

    PYTHONPATH=build/python python3 examples/python/tf1/lstm_fashion_mnist.py
    ... --json        # one JSON line at the end: test_accuracy, steps, seconds

tf.contrib.rnn.BasicLSTMCell under tf.nn.dynamic_rnn (one graph while loop over the 28 rows), the last
output through a dense layer, Adam, gradients clipped by global norm. The data is Debian's
dataset-fashion-mnist. With the defaults (1,000 steps of 128) it reached 0.854 test accuracy in 93 s
on a 2-core machine.
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
flags.DEFINE_integer("max_steps", 1000, "Number of training steps.")
flags.DEFINE_integer("batch_size", 128, "Batch size.")
flags.DEFINE_integer("num_hidden", 128, "LSTM units.")
flags.DEFINE_float("learning_rate", 0.002, "Adam's learning rate.")
flags.DEFINE_integer("test_limit", 0, "Score only the first N test images (0: all).")
flags.DEFINE_boolean("json", False, "Print one JSON line at the end instead of text.")
FLAGS = flags.FLAGS

TIMESTEPS, NUM_INPUT, NUM_CLASSES = 28, 28, 10


def load(part, limit=0):
    images, labels = fashion_mnist_idx.load(FLAGS.data_dir, part, limit)
    return images.astype(np.float32) / 255.0, labels.astype(np.int64)


def main(_):
    train_images, train_labels = load("train")
    test_images, test_labels = load("t10k", FLAGS.test_limit)

    X = tf.placeholder(tf.float32, [None, TIMESTEPS, NUM_INPUT])
    Y = tf.placeholder(tf.int64, [None])

    cell = tf.contrib.rnn.BasicLSTMCell(FLAGS.num_hidden, forget_bias=1.0)
    outputs, state = tf.nn.dynamic_rnn(cell, X, dtype=tf.float32)
    last = outputs[:, -1, :]
    logits = tf.layers.dense(last, NUM_CLASSES)

    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=Y, logits=logits))
    optimizer = tf.train.AdamOptimizer(FLAGS.learning_rate)
    grads, variables = zip(*optimizer.compute_gradients(loss))
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    train_op = optimizer.apply_gradients(zip(grads, variables))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), Y), tf.float32))

    rng = np.random.RandomState(0)
    start = time.time()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(1, FLAGS.max_steps + 1):
            idx = rng.randint(0, len(train_images), FLAGS.batch_size)
            _, loss_value = sess.run([train_op, loss], {X: train_images[idx], Y: train_labels[idx]})
            if not FLAGS.json and step % 200 == 0:
                print("step %d: loss %.4f" % (step, loss_value))
        hits = 0.0
        for i in range(0, len(test_images), 1000):
            batch = slice(i, i + 1000)
            hits += sess.run(accuracy, {X: test_images[batch], Y: test_labels[batch]}) * len(test_images[batch])
        test_accuracy = hits / len(test_images)
    seconds = time.time() - start
    if FLAGS.json:
        print(json.dumps({"example": "lstm_fashion_mnist", "test_accuracy": round(test_accuracy, 4),
                          "final_loss": round(float(loss_value), 4), "steps": FLAGS.max_steps,
                          "seconds": round(seconds, 2)}))
    else:
        print("test accuracy %g (%d steps, %.1f s)" % (test_accuracy, FLAGS.max_steps, seconds))


if __name__ == "__main__":
    tf.app.run()
