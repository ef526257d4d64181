"""The few tf.contrib names TF 1.x tutorials lean on; the rest of tf.contrib does not exist here.

tf.contrib.layers: fully_connected, conv2d, max_pool2d, avg_pool2d, flatten,
dropout (keep_prob, is_training=True), batch_norm, l1_regularizer,
l2_regularizer, xavier_initializer and variance_scaling_initializer, with
contrib's defaults (activation_fn=relu, padding SAME for conv2d, VALID and
stride 2 for the pools, scopes "fully_connected", "Conv", "BatchNorm" and
variables "weights", "biases", "beta", "gamma", "moving_mean",
"moving_variance"). tf.contrib.rnn holds the RNN cells and static_rnn
(rnn.py). Any other tf.contrib name raises AttributeError saying so.
"""

import math
import numbers
import types

from . import errors
from . import graph as _graph
from . import init_ops
from . import layers as _layers
from . import nn
from . import ops
from . import rnn as _rnn
from . import tf_api
from . import variable_scopes as vs


class _ContribVarianceScaling(init_ops.Initializer):
    def __init__(self, factor, mode, uniform, seed, dtype):
        super().__init__(dtype)
        self.factor, self.mode, self.uniform, self.seed = factor, mode, uniform, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        shape = init_ops._shape(shape)
        fan_in, fan_out = init_ops._fans(shape)
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[self.mode]
        n = max(1.0, n)
        if self.uniform:
            limit = math.sqrt(3.0 * self.factor / n)
            return tf_api.random_uniform(shape, -limit, limit, self._dtype(dtype), seed=self.seed)
        return tf_api.truncated_normal(shape, 0.0, math.sqrt(1.3 * self.factor / n), self._dtype(dtype),
                                       seed=self.seed)


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype="float32"):
    """contrib's He initializer: truncated normal with stddev sqrt(1.3 * factor / n), or (uniform=True)
    within +-sqrt(3 * factor / n); n the fan of mode (FAN_IN, FAN_OUT or FAN_AVG)."""
    init_ops._not_float("variance_scaling_initializer", dtype)
    if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
        raise TypeError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
    return _ContribVarianceScaling(float(factor), mode, bool(uniform), seed, dtype)


def _regularizer(scale, what, fn):
    if isinstance(scale, numbers.Integral):
        raise ValueError(f"scale cannot be an integer: {scale}")
    if isinstance(scale, numbers.Real):
        if scale < 0.0:
            raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale}")
        if scale == 0.0:
            return lambda _weights: None

    def reg(weights):
        with _graph.name_scope(what):
            return tf_api.multiply(fn(weights), float(scale))
    return reg


def l1_regularizer(scale, scope=None):
    """weights -> scale * sum(|weights|) (None for scale 0)."""
    return _regularizer(scale, scope or "l1_regularizer", lambda w: tf_api.reduce_sum(tf_api.abs(w)))


def l2_regularizer(scale, scope=None):
    """weights -> scale * sum(weights ** 2) / 2, as tf.nn.l2_loss (None for scale 0)."""
    return _regularizer(scale, scope or "l2_regularizer", nn.l2_loss)


def _no_collections(what, **given):
    for k, v in given.items():
        if v is not None:
            raise errors.UnimplementedError(f"tf.contrib.layers.{what}({k}=...) is not supported")


def _finish(outputs, normalizer_fn, normalizer_params, biases, activation_fn):
    if normalizer_fn is not None:
        outputs = normalizer_fn(outputs, **(normalizer_params or {}))
    elif biases is not None:
        outputs = nn.bias_add(outputs, biases)
    return activation_fn(outputs) if activation_fn is not None else outputs


def fully_connected(inputs, num_outputs, activation_fn=nn.relu, normalizer_fn=None, normalizer_params=None,
                    weights_initializer=init_ops.xavier_initializer(), weights_regularizer=None,
                    biases_initializer=init_ops.zeros_initializer(), biases_regularizer=None, reuse=None,
                    variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """activation_fn(inputs @ weights + biases) (or normalizer_fn in place of the biases), over the last axis."""
    _no_collections("fully_connected", variables_collections=variables_collections,
                    outputs_collections=outputs_collections)
    x = _graph.convert_to_tensor(inputs)
    if x.shape.rank is None or x.shape.rank < 2 or x.shape[-1] is None:
        raise ValueError(f"The last dimension of the inputs to fully_connected should be defined. Found {x.shape}.")
    with x.graph.as_default(), vs.variable_scope(scope, default_name="fully_connected", reuse=reuse):
        d = x.shape[-1]
        weights = vs.get_variable("weights", [d, int(num_outputs)], dtype=x.dtype, initializer=weights_initializer,
                                  regularizer=weights_regularizer, trainable=trainable)
        y = tf_api.matmul(x, weights) if x.shape.rank == 2 else tf_api.reshape(
            tf_api.matmul(tf_api.reshape(x, [-1, d]), weights),
            tf_api.concat([tf_api.shape(x)[:-1], _graph.constant([int(num_outputs)])], 0))
        biases = None
        if normalizer_fn is None and biases_initializer is not None:
            biases = vs.get_variable("biases", [int(num_outputs)], dtype=x.dtype, initializer=biases_initializer,
                                     regularizer=biases_regularizer, trainable=trainable)
            if x.shape.rank != 2:
                y, biases = y + biases, None
        return _finish(y, normalizer_fn, normalizer_params, biases, activation_fn)


def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format=None, rate=1,
           activation_fn=nn.relu, normalizer_fn=None, normalizer_params=None,
           weights_initializer=init_ops.xavier_initializer(), weights_regularizer=None,
           biases_initializer=init_ops.zeros_initializer(), biases_regularizer=None, reuse=None,
           variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """contrib's 2-D convolution of NHWC inputs: weights [kh, kw, in, num_outputs] in scope "Conv"."""
    _no_collections("conv2d", variables_collections=variables_collections, outputs_collections=outputs_collections)
    if data_format not in (None, "NHWC"):
        raise errors.UnimplementedError(f"tf.contrib.layers.conv2d: data_format {data_format!r} is not supported; "
                                        "only NHWC")
    if _layers._pair(rate, "rate") != [1, 1]:
        raise errors.UnimplementedError("tf.contrib.layers.conv2d: rate (dilation) other than 1 is not supported")
    x = _graph.convert_to_tensor(inputs)
    if x.shape.rank != 4 or x.shape[-1] is None:
        raise ValueError(f"tf.contrib.layers.conv2d needs NHWC inputs with known channels, got {x.shape}")
    kh, kw = _layers._pair(kernel_size, "kernel_size")
    sh, sw = _layers._pair(stride, "stride")
    with x.graph.as_default(), vs.variable_scope(scope, default_name="Conv", reuse=reuse):
        weights = vs.get_variable("weights", [kh, kw, x.shape[-1], int(num_outputs)], dtype=x.dtype,
                                  initializer=weights_initializer, regularizer=weights_regularizer,
                                  trainable=trainable)
        y = ops.conv2d(x, weights, strides=[1, sh, sw, 1], padding=_layers._padding(padding))
        biases = None
        if normalizer_fn is None and biases_initializer is not None:
            biases = vs.get_variable("biases", [int(num_outputs)], dtype=x.dtype, initializer=biases_initializer,
                                     regularizer=biases_regularizer, trainable=trainable)
        return _finish(y, normalizer_fn, normalizer_params, biases, activation_fn)


def _pool(op, what, default_scope, inputs, kernel_size, stride, padding, data_format, outputs_collections, scope):
    _no_collections(what, outputs_collections=outputs_collections)
    if data_format != "NHWC":
        raise errors.UnimplementedError(f"tf.contrib.layers.{what}: data_format {data_format!r} is not supported")
    x = _graph.convert_to_tensor(inputs)
    (ph, pw), (sh, sw) = _layers._pair(kernel_size, "kernel_size"), _layers._pair(stride, "stride")
    g = x.graph
    with g.as_default(), g.name_scope(scope or default_scope):
        return op(x, ksize=[1, ph, pw, 1], strides=[1, sh, sw, 1], padding=_layers._padding(padding))


def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """The maximum over kernel_size windows of NHWC inputs (contrib: stride 2, VALID by default)."""
    return _pool(ops.max_pool, "max_pool2d", "MaxPool2D", inputs, kernel_size, stride, padding, data_format,
                 outputs_collections, scope)


def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """The mean over kernel_size windows of NHWC inputs, padding excluded (contrib: stride 2, VALID)."""
    return _pool(ops.avg_pool, "avg_pool2d", "AvgPool2D", inputs, kernel_size, stride, padding, data_format,
                 outputs_collections, scope)


def flatten(inputs, outputs_collections=None, scope=None):
    """inputs as [batch, everything else]."""
    _no_collections("flatten", outputs_collections=outputs_collections)
    return _layers.flatten(inputs, name=scope or "Flatten")


def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True, outputs_collections=None, scope=None,
            seed=None):
    """contrib's dropout: KEEPS each element with probability keep_prob (scaled by 1 / keep_prob) while
    is_training (True by default; a bool tensor allowed); otherwise inputs unchanged."""
    _no_collections("dropout", outputs_collections=outputs_collections)
    if not isinstance(keep_prob, _graph.Tensor) and not 0.0 < float(keep_prob) <= 1.0:
        raise ValueError(f"keep_prob must be a scalar tensor or a float in the range (0, 1], got {keep_prob}")
    rate = 1.0 - keep_prob if not isinstance(keep_prob, _graph.Tensor) else tf_api.subtract(1.0, keep_prob)
    return _layers.dropout(inputs, rate=rate, noise_shape=noise_shape, seed=seed, training=is_training,
                           name=scope or "Dropout")


def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
               param_initializers=None, param_regularizers=None, updates_collections=vs.GraphKeys.UPDATE_OPS,
               is_training=True, reuse=None, variables_collections=None, outputs_collections=None, trainable=True,
               batch_weights=None, fused=None, data_format="NHWC", zero_debias_moving_mean=False, scope=None,
               renorm=False, renorm_clipping=None, renorm_decay=0.99, adjustment=None):
    """contrib's batch normalization over the last axis (NHWC): decay 0.999, no gamma unless scale=True,
    is_training=True by default. The moving averages are updated by ops in updates_collections (UPDATE_OPS:
    run them with the training op); updates_collections=None makes the output wait for them. As contrib's
    fused kernel (rank 2 or 4, unless fused=False), the moving variance takes the batch variance with
    Bessel's correction."""
    _no_collections("batch_norm", variables_collections=variables_collections,
                    outputs_collections=outputs_collections, batch_weights=batch_weights,
                    renorm_clipping=renorm_clipping, adjustment=adjustment)
    if renorm or zero_debias_moving_mean:
        raise errors.UnimplementedError("tf.contrib.layers.batch_norm: renorm and zero_debias_moving_mean are "
                                        "not supported")
    if data_format != "NHWC":
        raise errors.UnimplementedError(f"tf.contrib.layers.batch_norm: data_format {data_format!r} is not "
                                        "supported; only NHWC")
    x = _graph.convert_to_tensor(inputs)
    rank = x.shape.rank
    if rank is None or x.shape[-1] is None:
        raise ValueError(f"Inputs {x.name} has undefined rank or last dimension: {x.shape}")
    inits = dict(param_initializers or {})
    regs = dict(param_regularizers or {})
    unknown = (set(inits) | set(regs)) - {"beta", "gamma", "moving_mean", "moving_variance"}
    if unknown:
        raise ValueError(f"param_initializers / param_regularizers name unknown parameters: {sorted(unknown)}")
    with x.graph.as_default(), vs.variable_scope(scope, default_name="BatchNorm", reuse=reuse):
        shape = [x.shape[-1]]
        beta = vs.get_variable("beta", shape, dtype=x.dtype, initializer=inits.get("beta", init_ops.zeros_initializer()),
                               regularizer=regs.get("beta"), trainable=trainable) if center else None
        gamma = vs.get_variable("gamma", shape, dtype=x.dtype,
                                initializer=inits.get("gamma", init_ops.ones_initializer()),
                                regularizer=regs.get("gamma"), trainable=trainable) if scale else None
        moving_mean = vs.get_variable("moving_mean", shape, dtype=x.dtype,
                                      initializer=inits.get("moving_mean", init_ops.zeros_initializer()),
                                      trainable=False)
        moving_var = vs.get_variable("moving_variance", shape, dtype=x.dtype,
                                     initializer=inits.get("moving_variance", init_ops.ones_initializer()),
                                     trainable=False)
        training = is_training if isinstance(is_training, _graph.Tensor) else bool(is_training)
        bessel = fused is not False and rank in (2, 4)
        out, updates = _layers._batch_norm(x, rank - 1, float(decay), float(epsilon), gamma, beta, moving_mean,
                                           moving_var, training, bessel)
        if updates and updates_collections is None:
            with _graph.control_dependencies(updates):
                out = _graph.identity(out)
        elif updates:
            for u in updates:
                vs.add_to_collection(updates_collections, u)
        return activation_fn(out) if activation_fn is not None else out


def linear(inputs, num_outputs, **kwargs):
    """fully_connected without an activation."""
    return fully_connected(inputs, num_outputs, activation_fn=None, **kwargs)


layers = types.SimpleNamespace(
    xavier_initializer=init_ops.xavier_initializer, xavier_initializer_conv2d=init_ops.xavier_initializer,
    variance_scaling_initializer=variance_scaling_initializer, l1_regularizer=l1_regularizer,
    l2_regularizer=l2_regularizer, fully_connected=fully_connected, linear=linear, conv2d=conv2d,
    convolution2d=conv2d, max_pool2d=max_pool2d, avg_pool2d=avg_pool2d, flatten=flatten, dropout=dropout,
    batch_norm=batch_norm)
rnn = types.SimpleNamespace(static_rnn=_rnn.static_rnn, **vars(_rnn.rnn_cell))


def __getattr__(name):
    raise AttributeError(f"shardflow has no tf.contrib.{name}: only tf.contrib.layers (fully_connected, conv2d, "
                         "pools, flatten, dropout, batch_norm, regularizers, initializers) and tf.contrib.rnn are "
                         "provided (tf.contrib was TF 1.x's incubator; see docs/PYTHON.md, Coming from TensorFlow 1.x)")
