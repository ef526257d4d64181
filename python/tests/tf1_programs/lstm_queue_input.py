"""An LSTM sequence classifier fed by TensorFlow 1.x's queue input (slice_input_producer, shuffle_batch,
a Coordinator and start_queue_runners), with summaries, on synthetic sequences.

Only the import differs from a TensorFlow 1.x program. The task: is a sequence's first value larger than
its last? Prints the step count when the input's epochs run out and the test accuracy.
"""
import numpy as np
import shardflow as tf

TIME_STEPS, NUM_EPOCHS, BATCH = 8, 25, 32

rng = np.random.RandomState(1)


def sequences(n):
    xs = rng.rand(n, TIME_STEPS, 1).astype(np.float32)
    return xs, (xs[:, 0, 0] > xs[:, -1, 0]).astype(np.int64)


train_x, train_y = sequences(512)
test_x, test_y = sequences(500)

with tf.name_scope("input"):
    seq, label = tf.train.slice_input_producer([train_x, train_y], num_epochs=NUM_EPOCHS, shuffle=True)
    seq_batch, label_batch = tf.train.shuffle_batch([seq, label], batch_size=BATCH, capacity=200,
                                                    min_after_dequeue=100, num_threads=2)


def model(inputs, reuse):
    with tf.variable_scope("model", reuse=reuse):
        cell = tf.contrib.rnn.BasicLSTMCell(16)
        outputs, state = tf.nn.dynamic_rnn(cell, inputs, dtype=tf.float32)
        return tf.layers.dense(state.h, 2, name="logits")


logits = model(seq_batch, reuse=False)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(label_batch, tf.int32),
                                                                     logits=logits))
tf.summary.scalar("loss", loss)
train_op = tf.train.AdamOptimizer(0.02).minimize(loss)

eval_x = tf.placeholder(tf.float32, [None, TIME_STEPS, 1])
eval_y = tf.placeholder(tf.int32, [None])
accuracy = tf.reduce_mean(tf.cast(tf.nn.in_top_k(model(eval_x, reuse=True), eval_y, 1), tf.float32))
merged = tf.summary.merge_all()

with tf.Session() as sess:
    writer = tf.summary.FileWriter("logs", sess.graph)
    sess.run(tf.group(tf.global_variables_initializer(), tf.local_variables_initializer()))
    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    step = 0
    try:
        while not coord.should_stop():
            summary, _ = sess.run([merged, train_op])
            writer.add_summary(summary, step)
            step += 1
    except tf.errors.OutOfRangeError:
        print("Done training for %d epochs, %d steps." % (NUM_EPOCHS, step))
    finally:
        coord.request_stop()
    coord.join(threads)
    writer.close()
    print("test accuracy %g" % sess.run(accuracy, feed_dict={eval_x: test_x, eval_y: test_y}))
