"""Linear regression with flags, in the shape of the well-known TensorFlow 1.x examples.

Only the import differs from a TensorFlow 1.x program. Prints the fitted W and b.
"""
import numpy as np
import shardflow as tf

flags = tf.app.flags
flags.DEFINE_float("learning_rate", 0.01, "Initial learning rate.")
flags.DEFINE_integer("training_epochs", 200, "Number of epochs to run trainer.")
flags.DEFINE_integer("display_step", 50, "How often to print the cost.")
FLAGS = flags.FLAGS


def main(_):
    rng = np.random
    rng.seed(1)
    train_X = np.linspace(0.0, 10.0, 50)
    train_Y = 0.3 * train_X + 1.5 + rng.normal(0, 0.05, size=train_X.shape)
    n_samples = train_X.shape[0]

    X = tf.placeholder("float")
    Y = tf.placeholder("float")

    W = tf.Variable(rng.randn(), name="weight")
    b = tf.Variable(rng.randn(), name="bias")

    pred = tf.add(tf.multiply(X, W), b)
    cost = tf.reduce_sum(tf.pow(pred - Y, 2)) / (2 * n_samples)
    optimizer = tf.train.GradientDescentOptimizer(FLAGS.learning_rate).minimize(cost)

    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        sess.run(init)
        for epoch in range(FLAGS.training_epochs):
            for (x, y) in zip(train_X, train_Y):
                sess.run(optimizer, feed_dict={X: x, Y: y})
            if (epoch + 1) % FLAGS.display_step == 0:
                c = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
                print("Epoch:", '%04d' % (epoch + 1), "cost=", "{:.9f}".format(c))
        training_cost = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
        print("Training cost=", training_cost, "W=", sess.run(W), "b=", sess.run(b))
        print("fitted W=%.4f b=%.4f" % (W.eval(), b.eval()))


if __name__ == "__main__":
    tf.app.run()
