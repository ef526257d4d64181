"""Softmax regression in the shape of TensorFlow 1.x's "MNIST for ML beginners", on MNIST-shaped synthetic data.

Only the import differs from a TensorFlow 1.x program. Prints the test accuracy.
"""
import numpy as np
import shardflow as tf


def synthetic_mnist(n, rng, prototypes):
    labels = rng.randint(0, 10, size=n).astype(np.uint8)          # MNIST's labels are uint8
    images = prototypes[labels] + rng.normal(0, 0.35, size=(n, 784))
    images = np.clip(images, 0, 1).astype(np.float32)
    return images, np.eye(10, dtype=np.float32)[labels]


rng = np.random.RandomState(0)
prototypes = (rng.rand(10, 784) > 0.7).astype(np.float64)
train_images, train_labels = synthetic_mnist(6000, rng, prototypes)
test_images, test_labels = synthetic_mnist(1000, rng, prototypes)

x = tf.placeholder(tf.float32, [None, 784])
W = tf.Variable(tf.zeros([784, 10]))
b = tf.Variable(tf.zeros([10]))
y = tf.nn.softmax(tf.matmul(x, W) + b)

y_ = tf.placeholder(tf.float32, [None, 10])
cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y + 1e-10), reduction_indices=[1]))
train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)

sess = tf.InteractiveSession()
tf.global_variables_initializer().run()

for i in range(300):
    start = (i * 100) % len(train_images)
    batch_xs, batch_ys = train_images[start:start + 100], train_labels[start:start + 100]
    train_step.run({x: batch_xs, y_: batch_ys})

correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
print("test accuracy %g" % accuracy.eval(feed_dict={x: test_images, y_: test_labels}))
sess.close()
