"""The few tf.contrib names TF 1.x tutorials lean on; the rest of tf.contrib does not exist here.

tf.contrib.layers.xavier_initializer is Glorot's initializer (init_ops);
tf.contrib.rnn holds the RNN cells and static_rnn (rnn.py). Any other
tf.contrib name raises AttributeError saying so.
"""

import types

from . import init_ops
from . import rnn as _rnn

layers = types.SimpleNamespace(xavier_initializer=init_ops.xavier_initializer,
                               xavier_initializer_conv2d=init_ops.xavier_initializer)
rnn = types.SimpleNamespace(static_rnn=_rnn.static_rnn, **vars(_rnn.rnn_cell))


def __getattr__(name):
    raise AttributeError(f"shardflow has no tf.contrib.{name}: only tf.contrib.layers.xavier_initializer and "
                         "tf.contrib.rnn are provided (tf.contrib was TF 1.x's incubator; see docs/PYTHON.md, "
                         "Coming from TensorFlow 1.x)")
