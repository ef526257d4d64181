"""A classifier built with tf.variable_scope, tf.get_variable and tf.layers, as TensorFlow 1.x programs build them.

The model function is called twice (training and evaluation graphs share the
variables through reuse=True); dropout is on only while training. Only the
import differs from a TensorFlow 1.x program. Prints the evaluation accuracy.
"""
import numpy as np
import shardflow as tf


def make_spirals(n, rng):
    labels = rng.randint(0, 3, size=n)
    r = rng.rand(n)
    t = labels * 2.0 * np.pi / 3 + r * 2.5 + rng.normal(0, 0.15, size=n)
    points = np.stack([r * np.sin(t), r * np.cos(t)], axis=1).astype(np.float32)
    return points, labels.astype(np.uint8)


def model(inputs, is_training, reuse=False):
    with tf.variable_scope("classifier", reuse=reuse):
        with tf.variable_scope("features"):
            w = tf.get_variable("w", [2, 64], initializer=tf.truncated_normal_initializer(stddev=0.5))
            b = tf.get_variable("b", [64], initializer=tf.constant_initializer(0.1))
            net = tf.nn.relu(tf.matmul(inputs, w) + b)
        net = tf.layers.dense(net, 64, activation=tf.nn.relu)
        net = tf.layers.dropout(net, rate=0.1, training=is_training)
        return tf.layers.dense(net, 3, name="logits")


rng = np.random.RandomState(3)
train_x, train_y = make_spirals(3000, rng)
test_x, test_y = make_spirals(600, rng)

x = tf.placeholder(tf.float32, [None, 2], name="x")
y = tf.placeholder(tf.int64, [None], name="y")
train_logits = model(x, is_training=True)
eval_logits = model(x, is_training=False, reuse=True)

loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32),
                                                                    logits=train_logits))
global_step = tf.train.get_or_create_global_step()
train_op = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(eval_logits, 1), y), tf.float32))

print("variables:", [v.name for v in tf.trainable_variables()])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(600):
        idx = rng.randint(0, len(train_x), size=128)
        _, l = sess.run([train_op, loss], feed_dict={x: train_x[idx], y: train_y[idx]})
        if step % 200 == 0:
            print("step %d loss %.4f" % (step, l))
    print("global step", tf.train.global_step(sess, global_step))
    print("eval accuracy %g" % sess.run(accuracy, feed_dict={x: test_x, y: test_y}))
