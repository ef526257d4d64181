#!/usr/bin/env python3
"""A convolutional network on Fashion-MNIST with tf.layers, batch normalization and a tf.data input
pipeline, written as a TensorFlow 1.x program (only the import differs):

    PYTHONPATH=build/python python3 examples/python/tf1/cnn_layers_fashion_mnist.py
    ... --json        # one JSON line at the end: test_accuracy, steps, seconds

The training images come from tf.data (from_tensor_slices of the uint8 arrays, map to float, shuffle,
repeat, batch, a one-shot iterator); the test images are fed through a placeholder into the same
network (variable_scope reuse). tf.layers.batch_normalization's moving averages are updated by the
UPDATE_OPS that the training op depends on, and serve the test pass. The data is Debian's
dataset-fashion-mnist. With the defaults (1,500 steps of 64) it reached 0.889 test accuracy in 86 s
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
flags.DEFINE_integer("max_steps", 1500, "Number of training steps.")
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_float("learning_rate", 0.002, "Adam's learning rate.")
flags.DEFINE_integer("limit", 0, "Use only the first N training images (0: all).")
flags.DEFINE_integer("test_limit", 0, "Score only the first N test images (0: all).")
flags.DEFINE_boolean("json", False, "Print one JSON line at the end instead of text.")
FLAGS = flags.FLAGS


def load(part, limit):
    images, labels = fashion_mnist_idx.load(FLAGS.data_dir, part, limit)
    return images.reshape(-1, 28, 28, 1), labels


def network(images, training):
    """Logits of float [batch, 28, 28, 1] images in [0, 1]; the variables are shared between calls."""
    with tf.variable_scope("cnn", reuse=tf.AUTO_REUSE):
        h = tf.layers.conv2d(images, 16, 5, padding="same", use_bias=False, name="conv1")
        h = tf.nn.relu(tf.layers.batch_normalization(h, training=training, name="bn1"))
        h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.conv2d(h, 32, 5, padding="same", activation=tf.nn.relu, name="conv2")
        h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.flatten(h)
        h = tf.layers.dense(h, 128, activation=tf.nn.relu, name="fc1")
        h = tf.layers.dropout(h, rate=0.3, training=training)
        return tf.layers.dense(h, 10, name="logits")


def main(_):
    train_images, train_labels = load("train", FLAGS.limit)
    test_images, test_labels = load("t10k", FLAGS.test_limit)

    dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels))
    dataset = dataset.map(lambda image, label: (tf.cast(image, tf.float32) / 255.0, label))
    dataset = dataset.shuffle(buffer_size=2000, seed=1).repeat().batch(FLAGS.batch_size)
    images, labels = dataset.make_one_shot_iterator().get_next()

    logits = network(images, training=True)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=logits))
    global_step = tf.train.get_or_create_global_step()
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = tf.train.AdamOptimizer(FLAGS.learning_rate).minimize(loss, global_step=global_step)

    test_x = tf.placeholder(tf.uint8, [None, 28, 28, 1])
    test_y = tf.placeholder(tf.uint8, [None])
    test_logits = network(tf.cast(test_x, tf.float32) / 255.0, training=False)
    correct = tf.equal(tf.argmax(test_logits, 1), tf.cast(test_y, tf.int64))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    start = time.time()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(FLAGS.max_steps):
            _, step, loss_value = sess.run([train_op, global_step, loss])
            if not FLAGS.json and step % 250 == 0:
                print("step %d: loss %.4f" % (step, loss_value))
        hits = 0.0
        for i in range(0, len(test_images), 1000):
            batch = slice(i, i + 1000)
            hits += sess.run(accuracy, {test_x: test_images[batch], test_y: test_labels[batch]}) * \
                len(test_images[batch])
        test_accuracy = hits / len(test_images)
    seconds = time.time() - start
    if FLAGS.json:
        print(json.dumps({"example": "cnn_layers_fashion_mnist", "test_accuracy": round(test_accuracy, 4),
                          "final_loss": round(float(loss_value), 4), "steps": FLAGS.max_steps,
                          "seconds": round(seconds, 2)}))
    else:
        print("test accuracy %g (%d steps, %.1f s)" % (test_accuracy, FLAGS.max_steps, seconds))


if __name__ == "__main__":
    tf.app.run()
