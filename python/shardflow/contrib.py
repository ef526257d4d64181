"""The few tf.contrib names TF 1.x tutorials lean on; the rest of tf.contrib does not exist here.

tf.contrib.layers.xavier_initializer is Glorot's initializer (init_ops). Any
other tf.contrib name raises AttributeError saying so (tf.contrib.rnn, the
RNN cells, is not built yet: issue 39).
"""

import types

from . import init_ops

layers = types.SimpleNamespace(xavier_initializer=init_ops.xavier_initializer,
                               xavier_initializer_conv2d=init_ops.xavier_initializer)


def __getattr__(name):
    raise AttributeError(f"shardflow has no tf.contrib.{name}: only tf.contrib.layers.xavier_initializer is "
                         "provided (tf.contrib was TF 1.x's incubator; see docs/PYTHON.md, Coming from TensorFlow 1.x)")
