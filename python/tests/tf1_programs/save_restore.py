"""Save and restore a model with tf.train.Saver, in the shape of the well-known TensorFlow 1.x example.

Trains a multilayer perceptron for a few epochs, saves it, restores it in a
fresh session, checks the restored model gives the same accuracy and trains
on. Only the import differs from a TensorFlow 1.x program.
"""
import os

import numpy as np
import shardflow as tf

tf.app.flags.DEFINE_string("model_dir", "/tmp/tf1_save_restore", "Where to keep the checkpoints.")
FLAGS = tf.app.flags.FLAGS


def make_data(n, rng, centers):
    labels = rng.randint(0, 4, size=n)
    points = centers[labels] + rng.normal(0, 1.0, size=(n, 20))
    return points.astype(np.float32), np.eye(4, dtype=np.float32)[labels]


def main(_):
    rng = np.random.RandomState(7)
    centers = rng.normal(0, 1.0, size=(4, 20))
    train_x, train_y = make_data(4000, rng, centers)
    test_x, test_y = make_data(1000, rng, centers)

    n_hidden_1, n_hidden_2, n_input, n_classes = 32, 32, 20, 4
    x = tf.placeholder("float", [None, n_input])
    y = tf.placeholder("float", [None, n_classes])

    def multilayer_perceptron(x, weights, biases):
        layer_1 = tf.nn.relu(tf.add(tf.matmul(x, weights['h1']), biases['b1']))
        layer_2 = tf.nn.relu(tf.add(tf.matmul(layer_1, weights['h2']), biases['b2']))
        return tf.matmul(layer_2, weights['out']) + biases['out']

    weights = {
        'h1': tf.Variable(tf.random_normal([n_input, n_hidden_1], stddev=0.1)),
        'h2': tf.Variable(tf.random_normal([n_hidden_1, n_hidden_2], stddev=0.1)),
        'out': tf.Variable(tf.random_normal([n_hidden_2, n_classes], stddev=0.1)),
    }
    biases = {
        'b1': tf.Variable(tf.random_normal([n_hidden_1], stddev=0.1)),
        'b2': tf.Variable(tf.random_normal([n_hidden_2], stddev=0.1)),
        'out': tf.Variable(tf.random_normal([n_classes], stddev=0.1)),
    }
    pred = multilayer_perceptron(x, weights, biases)
    cost = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=pred, labels=y))
    optimizer = tf.train.AdamOptimizer(learning_rate=0.001).minimize(cost)
    correct_prediction = tf.equal(tf.argmax(pred, 1), tf.argmax(y, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, "float"))

    init = tf.global_variables_initializer()
    saver = tf.train.Saver()
    model_path = os.path.join(FLAGS.model_dir, "model.ckpt")

    print("Starting 1st session...")
    with tf.Session() as sess:
        sess.run(init)
        for epoch in range(3):
            for i in range(0, len(train_x), 100):
                sess.run(optimizer, feed_dict={x: train_x[i:i + 100], y: train_y[i:i + 100]})
        first_accuracy = accuracy.eval({x: test_x, y: test_y})
        print("Accuracy after 3 epochs:", first_accuracy)
        save_path = saver.save(sess, model_path, global_step=3)
        print("Model saved in file: %s" % save_path)

    print("Starting 2nd session...")
    with tf.Session() as sess:
        sess.run(init)
        latest = tf.train.latest_checkpoint(FLAGS.model_dir)
        saver.restore(sess, latest)
        print("Model restored from file: %s" % latest)
        restored_accuracy = accuracy.eval({x: test_x, y: test_y})
        print("Accuracy after restoring:", restored_accuracy)
        assert restored_accuracy == first_accuracy, (restored_accuracy, first_accuracy)
        for epoch in range(4):
            for i in range(0, len(train_x), 100):
                sess.run(optimizer, feed_dict={x: train_x[i:i + 100], y: train_y[i:i + 100]})
        print("Accuracy after 7 epochs: %g" % accuracy.eval({x: test_x, y: test_y}))


if __name__ == "__main__":
    tf.app.run()
