"""TF 1.x's tf.layers: dense, conv2d, max_pooling2d, average_pooling2d, dropout and flatten.

    h = tf.layers.dense(x, 128, activation=tf.nn.relu)          # variables dense/kernel, dense/bias
    h = tf.layers.dropout(h, rate=0.4, training=is_training)    # rate is the DROP rate, as in tf.layers
    logits = tf.layers.dense(h, 10, name="logits")

Each layer is a graph builder over the existing ops and tf.get_variable, with
TF 1.x's naming and sharing: an unnamed layer gets a unique name in its
variable scope ("dense", "dense_1", ...); reuse=True (or an enclosing scope
opened with reuse) takes the existing variables. kernel_initializer defaults
to glorot_uniform, bias_initializer to zeros. Only channels_last (NHWC) data
is supported; other formats, dilations and constraints raise
UnimplementedError.
"""

import numpy as np

from . import errors
from . import graph as _graph
from . import init_ops
from . import nn
from . import ops
from . import tf_api
from . import variable_scopes as vs
from .control_flow import cond

__all__ = ["dense", "conv2d", "max_pooling2d", "average_pooling2d", "dropout", "flatten"]


def _layer_scope(name, default, reuse):
    if reuse:
        return vs.variable_scope(name or default, reuse=reuse)
    return vs.variable_scope(None, default_name=name or default)


def _unsupported(what, **given):
    for k, v in given.items():
        if v is not None:
            raise errors.UnimplementedError(f"tf.layers.{what}({k}=...) is not supported")


def _regularize(value, regularizer):
    if regularizer is not None:
        loss = regularizer(value)
        if loss is not None:
            vs.add_to_collection(vs.GraphKeys.REGULARIZATION_LOSSES, loss)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
          reuse=None):
    """activation(inputs @ kernel + bias) over the last axis of inputs (rank 2 or more, last dim known)."""
    _unsupported("dense", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                 activity_regularizer=activity_regularizer)
    x = _graph.convert_to_tensor(inputs)
    rank = x.shape.rank
    if rank is None or rank < 2 or x.shape[-1] is None:
        raise ValueError(f"The last dimension of the inputs to `Dense` should be defined. Found {x.shape}.")
    d = x.shape[-1]
    with _layer_scope(name, "dense", reuse):
        kernel = vs.get_variable("kernel", [d, int(units)], dtype=x.dtype, initializer=kernel_initializer,
                                 trainable=trainable)
        _regularize(kernel, kernel_regularizer)
        if rank == 2:
            y = tf_api.matmul(x, kernel)
        else:  # TF applies the kernel to the last axis (a tensordot)
            flat = tf_api.reshape(x, [-1, d])
            out_shape = tf_api.concat([tf_api.shape(x)[:-1], _graph.constant([int(units)])], 0)
            y = tf_api.reshape(tf_api.matmul(flat, kernel), out_shape)
        if use_bias:
            bias = vs.get_variable("bias", [int(units)], dtype=x.dtype, initializer=bias_initializer,
                                   trainable=trainable)
            _regularize(bias, bias_regularizer)
            y = nn.bias_add(y, bias) if rank == 2 else y + bias
        return activation(y) if activation is not None else y


def _pair(v, what):
    if isinstance(v, (int, np.integer)):
        return [int(v), int(v)]
    v = [int(x) for x in v]
    if len(v) != 2:
        raise ValueError(f"The `{what}` argument must be a tuple of 2 integers. Received: {v}")
    return v


def _padding(p):
    p = str(p).upper()
    if p not in ("SAME", "VALID"):
        raise ValueError(f"The `padding` argument must be one of 'valid', 'same'. Received: {p.lower()}")
    return p


def _channels_last(what, data_format):
    if data_format != "channels_last":
        raise errors.UnimplementedError(f"tf.layers.{what}: data_format {data_format!r} is not supported; "
                                        "only channels_last (NHWC)")


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """A 2-D convolution of NHWC inputs with a [kh, kw, in, filters] kernel, plus bias, then activation."""
    _channels_last("conv2d", data_format)
    if _pair(dilation_rate, "dilation_rate") != [1, 1]:
        raise errors.UnimplementedError("tf.layers.conv2d: dilation_rate other than 1 is not supported")
    _unsupported("conv2d", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                 activity_regularizer=activity_regularizer)
    x = _graph.convert_to_tensor(inputs)
    if x.shape.rank != 4 or x.shape[-1] is None:
        raise ValueError(f"Inputs to conv2d should have rank 4 with a known channel dimension. Received: {x.shape}")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(strides, "strides")
    with _layer_scope(name, "conv2d", reuse):
        kernel = vs.get_variable("kernel", [kh, kw, x.shape[-1], int(filters)], dtype=x.dtype,
                                 initializer=kernel_initializer, trainable=trainable)
        _regularize(kernel, kernel_regularizer)
        y = ops.conv2d(x, kernel, strides=[1, sh, sw, 1], padding=_padding(padding))
        if use_bias:
            bias = vs.get_variable("bias", [int(filters)], dtype=x.dtype, initializer=bias_initializer,
                                   trainable=trainable)
            _regularize(bias, bias_regularizer)
            y = nn.bias_add(y, bias)
        return activation(y) if activation is not None else y


def _pool(op, what, inputs, pool_size, strides, padding, data_format, name):
    _channels_last(what, data_format)
    ph, pw = _pair(pool_size, "pool_size")
    sh, sw = _pair(strides, "strides")
    x = _graph.convert_to_tensor(inputs)
    g = x.graph
    with g.as_default(), g.name_scope(name or what):
        return op(x, ksize=[1, ph, pw, 1], strides=[1, sh, sw, 1], padding=_padding(padding))


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """The maximum over pool_size windows of NHWC inputs, moved by strides."""
    return _pool(ops.max_pool, "max_pooling2d", inputs, pool_size, strides, padding, data_format, name)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """The mean over pool_size windows of NHWC inputs (padding excluded), moved by strides."""
    return _pool(ops.avg_pool, "average_pooling2d", inputs, pool_size, strides, padding, data_format, name)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """tf.layers.dropout: while training, drops each element with probability rate (NOT keep_prob) and scales
    the rest by 1 / (1 - rate); otherwise inputs unchanged. training: a Python bool or a bool tensor (fed)."""
    x = _graph.convert_to_tensor(inputs)
    g = x.graph
    if isinstance(training, _graph.Tensor):
        with g.as_default(), g.name_scope(name or "dropout"):
            return cond(training, lambda: nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed),
                        lambda: _graph.identity(x))
    if not training:
        return x
    with g.as_default(), g.name_scope(name or "dropout"):
        return nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)


def flatten(inputs, name=None, data_format="channels_last"):
    """inputs as [batch, everything else] (the dims after the first must be known)."""
    _channels_last("flatten", data_format)
    x = _graph.convert_to_tensor(inputs)
    dims = x.shape.dims
    if dims is None or any(d is None for d in dims[1:]):
        raise ValueError(f"flatten needs the dims after the first known, got {x.shape}")
    n = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    g = x.graph
    with g.as_default(), g.name_scope(name or "flatten"):
        return tf_api.reshape(x, [-1, n])
