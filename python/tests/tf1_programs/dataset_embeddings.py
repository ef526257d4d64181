"""A bag-of-words classifier over sharded embeddings, fed by tf.data, in TensorFlow 1.x style.

Only the import differs from a TensorFlow 1.x program. Each synthetic document is 6 word ids out of
1000: three are topic words of its class (one of 4; every word is a topic word of one class), the
others are drawn at random. The embedding table is split over 3 variables (partition_strategy="div").
Prints the steps run and the top-1 / top-2 accuracy.
"""
import numpy as np
import shardflow as tf

VOCAB, DIM, CLASSES, WORDS = 1000, 16, 4, 6

rng = np.random.RandomState(2)
word_class = rng.randint(0, CLASSES, size=VOCAB)


def documents(n):
    labels = rng.randint(0, CLASSES, size=n)
    docs = rng.randint(0, VOCAB, size=(n, WORDS))
    for i, c in enumerate(labels):  # three of the six words are topic words of the class
        docs[i, :3] = rng.choice(np.flatnonzero(word_class == c), size=3)
    return docs.astype(np.int32), labels.astype(np.int32)


train_docs, train_labels = documents(4000)
test_docs, test_labels = documents(1000)

dataset = tf.data.Dataset.from_tensor_slices((train_docs, train_labels))
dataset = dataset.shuffle(buffer_size=1000, seed=7).repeat(3).batch(64)
docs, labels = dataset.make_one_shot_iterator().get_next()

sizes = [334, 333, 333]
shards = [tf.get_variable("embedding/part_%d" % k, [n, DIM], initializer=tf.random_uniform_initializer(-0.1, 0.1))
          for k, n in enumerate(sizes)]


def classify(word_ids):
    embedded = tf.nn.embedding_lookup(shards, word_ids, partition_strategy="div")   # [batch, WORDS, DIM]
    return tf.layers.dense(tf.reduce_mean(embedded, axis=1), CLASSES, name="logits", reuse=tf.AUTO_REUSE)


loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=classify(docs)))
train_op = tf.train.AdagradOptimizer(0.5).minimize(loss)

test_x = tf.placeholder(tf.int32, [None, WORDS])
test_y = tf.placeholder(tf.int32, [None])
test_logits = classify(test_x)
top1 = tf.reduce_mean(tf.cast(tf.nn.in_top_k(test_logits, test_y, 1), tf.float32))
top2 = tf.reduce_mean(tf.cast(tf.nn.in_top_k(test_logits, test_y, 2), tf.float32))

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    steps = 0
    while True:
        try:
            sess.run(train_op)
        except tf.errors.OutOfRangeError:
            break
        steps += 1
    print("steps %d" % steps)
    a1, a2 = sess.run([top1, top2], feed_dict={test_x: test_docs, test_y: test_labels})
    print("top-1 accuracy %g, top-2 accuracy %g" % (a1, a2))
