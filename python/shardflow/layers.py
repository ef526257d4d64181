"""TF 1.x's tf.layers: the layer classes (Dense, Conv2D, MaxPooling2D, AveragePooling2D, Dropout, Flatten,
BatchNormalization) and their functions (dense, conv2d, ..., batch_normalization).

    h = tf.layers.dense(x, 128, activation=tf.nn.relu)          # variables dense/kernel, dense/bias
    h = tf.layers.dropout(h, rate=0.4, training=is_training)    # rate is the DROP rate, as in tf.layers
    logits = tf.layers.dense(h, 10, name="logits")

    layer = tf.layers.Dense(10)                                 # a class: one set of variables
    a, b = layer(x1), layer(x2)                                 # the second call reuses the first's

Each layer is a graph builder over the existing ops and tf.get_variable, with
TF 1.x's naming and sharing. A layer object makes its variables on its first
call, in a variable scope chosen then (an unnamed one gets a unique name,
"dense", "dense_1", ...), and reuses them on every later call. A function
(tf.layers.dense(x, ..., name=, reuse=)) is a new layer object each time: with
name, its variables are "name/kernel" (asking for them again needs reuse=True
or a scope opened with reuse, else ValueError, as TF 1.x); without, the
unique default name. kernel_initializer defaults to glorot_uniform,
bias_initializer to zeros. batch_normalization's moving averages are updated
by ops in tf.GraphKeys.UPDATE_OPS, run them with the training op as in TF 1.x.
Only channels_last (NHWC) data is supported; other formats, dilations and
constraints raise UnimplementedError.
"""

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import init_ops
from . import nn
from . import ops
from . import tf_api
from . import variable_scopes as vs
from .control_flow import cond

__all__ = ["Layer", "Dense", "Conv2D", "MaxPooling2D", "AveragePooling2D", "Dropout", "Flatten",
           "BatchNormalization", "dense", "conv2d", "max_pooling2d", "average_pooling2d", "dropout", "flatten",
           "batch_normalization"]


def _unsupported(what, **given):
    for k, v in given.items():
        if v is not None:
            raise errors.UnimplementedError(f"tf.layers.{what}({k}=...) is not supported")


def _regularize(value, regularizer):
    if regularizer is not None:
        loss = regularizer(value)
        if loss is not None:
            vs.add_to_collection(vs.GraphKeys.REGULARIZATION_LOSSES, loss)
        return loss
    return None


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


class Layer:
    """TF 1.x's tf.layers.Layer: build(input_shape) makes the variables on the first call, call(inputs) the ops.

    layer(inputs) (or layer.apply(inputs)) returns the outputs; layer.variables / trainable_variables /
    non_trainable_variables (also *_weights) list the variables, layer.updates the ops to run while training
    (BatchNormalization's moving averages), layer.losses the regularization losses.
    """

    _default_name = "layer"

    def __init__(self, trainable=True, name=None, dtype=None, _scope=None, _reuse=None, **kwargs):
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {sorted(kwargs)}")
        self.trainable = bool(trainable)
        self._base_name = name or self._default_name
        self._given_scope = _scope
        self._reuse = _reuse
        self.dtype = None if dtype is None else _dt.as_dtype(dtype)
        self._scope = None
        self.built = False
        self._trainable_weights, self._non_trainable_weights = [], []
        self._updates, self._losses = [], []

    @property
    def name(self):
        return self._scope.name.rpartition("/")[2] if self._scope is not None else self._base_name

    @property
    def scope_name(self):
        if self._scope is None:
            raise ValueError(f"No name available for layer scope because the layer {self._base_name!r} "
                             "has not been used yet. The scope name is determined the first time the layer "
                             "instance is called.")
        return self._scope.name

    def add_variable(self, name, shape, dtype=None, initializer=None, regularizer=None, trainable=True,
                     constraint=None):
        """A variable of this layer (get_variable in the layer's scope); trainable only if the layer is."""
        if constraint is not None:
            raise errors.UnimplementedError(f"{type(self).__name__}: variable constraints are not supported")
        trainable = bool(trainable) and self.trainable
        var = vs.get_variable(name, shape, dtype=dtype or self.dtype or _dt.float32, initializer=initializer,
                              trainable=trainable)
        (self._trainable_weights if trainable else self._non_trainable_weights).append(var)
        loss = _regularize(var, regularizer)
        if loss is not None:
            self._losses.append(loss)
        return var

    add_weight = add_variable

    def build(self, input_shape):
        self.built = True

    def call(self, inputs, **kwargs):
        return inputs

    def _scope_for_build(self):
        if self._given_scope is not None:
            return vs.variable_scope(self._given_scope, reuse=self._reuse)
        if self._reuse:
            return vs.variable_scope(self._base_name, reuse=self._reuse)
        return vs.variable_scope(None, default_name=self._base_name)

    def __call__(self, inputs, *args, **kwargs):
        x = _graph.convert_to_tensor(inputs)
        g = x.graph
        with g.as_default():
            if not self.built:
                with self._scope_for_build() as scope:
                    self._scope = scope
                    if self.dtype is None:
                        self.dtype = x.dtype
                    self.build(x.shape)
                    self.built = True
                    return self.call(x, *args, **kwargs)
            with vs.variable_scope(self._scope, reuse=True, auxiliary_name_scope=False), \
                    g.name_scope(self.name):
                return self.call(x, *args, **kwargs)

    apply = __call__

    @property
    def trainable_variables(self):
        return list(self._trainable_weights)

    @property
    def non_trainable_variables(self):
        return list(self._non_trainable_weights)

    @property
    def variables(self):
        return self.trainable_variables + self.non_trainable_variables

    trainable_weights = trainable_variables
    non_trainable_weights = non_trainable_variables
    weights = variables

    @property
    def updates(self):
        return list(self._updates)

    @property
    def losses(self):
        return list(self._losses)

    def _add_update(self, op):
        self._updates.append(op)
        vs.add_to_collection(vs.GraphKeys.UPDATE_OPS, op)


class Dense(Layer):
    """activation(inputs @ kernel + bias) over the last axis of inputs (rank 2 or more, last dim known)."""

    _default_name = "dense"

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                 name=None, **kwargs):
        _unsupported("Dense", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                     activity_regularizer=activity_regularizer)
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.units = int(units)
        self.activation, self.use_bias = activation, bool(use_bias)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer
        self.kernel = self.bias = None

    def build(self, input_shape):
        if input_shape.rank is None or input_shape.rank < 2 or input_shape[-1] is None:
            raise ValueError(f"The last dimension of the inputs to `Dense` should be defined. Found {input_shape}.")
        self.kernel = self.add_variable("kernel", [input_shape[-1], self.units], initializer=self.kernel_initializer,
                                        regularizer=self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_variable("bias", [self.units], initializer=self.bias_initializer,
                                          regularizer=self.bias_regularizer)

    def call(self, inputs):
        x = inputs
        rank, d = x.shape.rank, self.kernel.shape[0]
        if rank is None or x.shape[-1] not in (None, d):
            raise ValueError(f"Input 0 of layer {self.name} is incompatible with the layer: expected last "
                             f"dimension {d}, got shape {x.shape}")
        if rank == 2:
            y = tf_api.matmul(x, self.kernel)
        else:  # TF applies the kernel to the last axis (a tensordot)
            flat = tf_api.reshape(x, [-1, d])
            out_shape = tf_api.concat([tf_api.shape(x)[:-1], _graph.constant([self.units])], 0)
            y = tf_api.reshape(tf_api.matmul(flat, self.kernel), out_shape)
        if self.use_bias:
            y = nn.bias_add(y, self.bias) if rank == 2 else y + self.bias
        return self.activation(y) if self.activation is not None else y


class Conv2D(Layer):
    """A 2-D convolution of NHWC inputs with a [kh, kw, in, filters] kernel, plus bias, then activation."""

    _default_name = "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                 dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                 name=None, **kwargs):
        _channels_last("conv2d", data_format)
        if _pair(dilation_rate, "dilation_rate") != [1, 1]:
            raise errors.UnimplementedError("tf.layers.conv2d: dilation_rate other than 1 is not supported")
        _unsupported("conv2d", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                     activity_regularizer=activity_regularizer)
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)
        self.activation, self.use_bias = activation, bool(use_bias)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer
        self.kernel = self.bias = None

    def build(self, input_shape):
        if input_shape.rank != 4 or input_shape[-1] is None:
            raise ValueError(f"Inputs to conv2d should have rank 4 with a known channel dimension. "
                             f"Received: {input_shape}")
        kh, kw = self.kernel_size
        self.kernel = self.add_variable("kernel", [kh, kw, input_shape[-1], self.filters],
                                        initializer=self.kernel_initializer, regularizer=self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_variable("bias", [self.filters], initializer=self.bias_initializer,
                                          regularizer=self.bias_regularizer)

    def call(self, inputs):
        sh, sw = self.strides
        y = ops.conv2d(inputs, self.kernel, strides=[1, sh, sw, 1], padding=self.padding)
        if self.use_bias:
            y = nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


class _Pooling2D(Layer):
    _op = None

    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last", name=None, **kwargs):
        _channels_last(self._default_name, data_format)
        super().__init__(name=name, **kwargs)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)

    def _scope_for_build(self):
        # Pooling makes no variables: TF names its ops by a name scope only.
        return _NameOnly(self._base_name)

    def call(self, inputs):
        (ph, pw), (sh, sw) = self.pool_size, self.strides
        return type(self)._op(inputs, ksize=[1, ph, pw, 1], strides=[1, sh, sw, 1], padding=self.padding)


class _NameOnly:
    """A name scope standing in for a variable scope (layers without variables)."""

    def __init__(self, name):
        self._name = name
        self._cm = None

    def __enter__(self):
        g = _graph.get_default_graph()
        self._cm = g.name_scope(self._name)
        full = self._cm.__enter__()
        return vs.VariableScope(vs.get_variable_scope().reuse, name=(full or self._name).rstrip("/"))

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


class MaxPooling2D(_Pooling2D):
    """The maximum over pool_size windows of NHWC inputs, moved by strides."""
    _default_name = "max_pooling2d"
    _op = staticmethod(ops.max_pool)


class AveragePooling2D(_Pooling2D):
    """The mean over pool_size windows of NHWC inputs (padding excluded), moved by strides."""
    _default_name = "average_pooling2d"
    _op = staticmethod(ops.avg_pool)


class Dropout(Layer):
    """While training, drops each element with probability rate (NOT keep_prob) and scales the rest by
    1 / (1 - rate); otherwise inputs unchanged. call(inputs, training=False): a Python bool or a bool tensor."""

    _default_name = "dropout"

    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def _scope_for_build(self):
        return _NameOnly(self._base_name)

    def call(self, inputs, training=False):
        x = inputs
        if isinstance(training, _graph.Tensor):
            return cond(training, lambda: nn.dropout(x, rate=self.rate, noise_shape=self.noise_shape,
                                                     seed=self.seed),
                        lambda: _graph.identity(x))
        if not training:
            return x
        return nn.dropout(x, rate=self.rate, noise_shape=self.noise_shape, seed=self.seed)


class Flatten(Layer):
    """inputs as [batch, everything else] (the dims after the first must be known)."""

    _default_name = "flatten"

    def __init__(self, data_format="channels_last", name=None, **kwargs):
        _channels_last("flatten", data_format)
        super().__init__(name=name, **kwargs)

    def _scope_for_build(self):
        return _NameOnly(self._base_name)

    def call(self, inputs):
        dims = inputs.shape.dims
        if dims is None or any(d is None for d in dims[1:]):
            raise ValueError(f"flatten needs the dims after the first known, got {inputs.shape}")
        n = int(np.prod(dims[1:])) if len(dims) > 1 else 1
        return tf_api.reshape(inputs, [-1, n])


def _moments(x, axes):
    # TF's tf.nn.moments: the mean, and the mean squared difference from it (biased), over axes.
    mean = tf_api.reduce_mean(x, axes, keepdims=True)
    var = tf_api.reduce_mean(tf_api.squared_difference(x, tf_api.stop_gradient(mean)), axes, keepdims=True)
    return mean, var


def _batch_norm(x, axis, momentum, epsilon, gamma, beta, moving_mean, moving_var, training, bessel):
    """(output, [mean update, variance update]) of batch normalization over every axis but `axis`.

    training: True, False or a bool tensor. bessel: the moving variance takes the batch variance times
    n / (n - 1), as TF's fused kernel reports it (TF 1.x's fused path); otherwise the biased one.
    """
    rank = x.shape.rank
    reduce_axes = [i for i in range(rank) if i != axis]
    shape = [1] * rank
    shape[axis] = -1

    def bshape(v):
        return v if axis == rank - 1 else tf_api.reshape(v, shape)

    def normalize(mean, var):
        inv = ops.rsqrt(var + epsilon)
        if gamma is not None:
            inv = inv * bshape(gamma)
        out = x * inv
        shift = -mean * inv if beta is None else bshape(beta) - mean * inv
        return out + shift

    if training is False:
        return normalize(bshape(moving_mean), bshape(moving_var)), []
    mean, var = _moments(x, reduce_axes)
    batch_mean = tf_api.reshape(mean, [-1])
    batch_var = tf_api.reshape(var, [-1])
    if bessel:
        n = tf_api.cast(tf_api.size(x), x.dtype) / tf_api.cast(tf_api.size(batch_var), x.dtype)
        update_var = batch_var * (n / (n - 1.0))
    else:
        update_var = batch_var
    if isinstance(training, _graph.Tensor):
        out = cond(training, lambda: normalize(mean, var),
                   lambda: normalize(bshape(moving_mean), bshape(moving_var)))
        decay = cond(training, lambda: _graph.constant(1.0 - momentum, dtype=x.dtype),
                     lambda: _graph.constant(0.0, dtype=x.dtype))
    else:
        out = normalize(mean, var)
        decay = _graph.constant(1.0 - momentum, dtype=x.dtype)
    # TF's _assign_moving_average: variable -= (variable - value) * (1 - momentum)
    with _graph.name_scope("AssignMovingAvg"):
        mean_update = moving_mean.assign_sub((moving_mean - batch_mean) * decay)
    with _graph.name_scope("AssignMovingAvg_1"):
        var_update = moving_var.assign_sub((moving_var - update_var) * decay)
    return out, [mean_update, var_update]


class BatchNormalization(Layer):
    """TF 1.x's batch normalization over every axis but `axis` (an int): in training, the batch's mean and
    (biased) variance normalize the inputs and moving averages are updated by ops in layer.updates and
    tf.GraphKeys.UPDATE_OPS; otherwise the moving averages normalize. Variables gamma, beta (trainable),
    moving_mean, moving_variance (not trainable). As TF 1.x's fused kernel (rank 4 with axis 1 or 3, unless
    fused=False), the moving variance takes the batch variance with Bessel's correction.
    call(inputs, training=False): a Python bool or a bool tensor."""

    _default_name = "batch_normalization"

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=init_ops.zeros_initializer(), gamma_initializer=init_ops.ones_initializer(),
                 moving_mean_initializer=init_ops.zeros_initializer(),
                 moving_variance_initializer=init_ops.ones_initializer(), beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, renorm=False,
                 renorm_clipping=None, renorm_momentum=0.99, fused=None, trainable=True, virtual_batch_size=None,
                 adjustment=None, name=None, **kwargs):
        _unsupported("batch_normalization", beta_constraint=beta_constraint, gamma_constraint=gamma_constraint,
                     renorm_clipping=renorm_clipping, virtual_batch_size=virtual_batch_size, adjustment=adjustment)
        if renorm:
            raise errors.UnimplementedError("tf.layers.batch_normalization(renorm=True) is not supported")
        if isinstance(axis, (list, tuple)):
            if len(axis) != 1:
                raise errors.UnimplementedError("tf.layers.batch_normalization over several axes is not supported")
            axis = axis[0]
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.center, self.scale, self.fused = bool(center), bool(scale), fused
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer
        self.beta_regularizer, self.gamma_regularizer = beta_regularizer, gamma_regularizer
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def build(self, input_shape):
        rank = input_shape.rank
        if rank is None:
            raise ValueError(f"Input has undefined rank: {input_shape}")
        axis = self.axis + rank if self.axis < 0 else self.axis
        if not 0 <= axis < rank:
            raise ValueError(f"Invalid axis: {self.axis} for inputs of rank {rank}")
        if input_shape[axis] is None:
            raise ValueError(f"Input has undefined `axis` dimension. Input shape: {input_shape}")
        self.axis = axis
        self.fused = self.fused is not False and rank == 4 and axis in (1, 3)
        shape = [input_shape[axis]]
        if self.scale:
            self.gamma = self.add_variable("gamma", shape, initializer=self.gamma_initializer,
                                           regularizer=self.gamma_regularizer)
        if self.center:
            self.beta = self.add_variable("beta", shape, initializer=self.beta_initializer,
                                          regularizer=self.beta_regularizer)
        self.moving_mean = self.add_variable("moving_mean", shape, initializer=self.moving_mean_initializer,
                                             trainable=False)
        self.moving_variance = self.add_variable("moving_variance", shape,
                                                 initializer=self.moving_variance_initializer, trainable=False)

    def call(self, inputs, training=False):
        if not isinstance(training, _graph.Tensor):
            training = bool(training)
        out, updates = _batch_norm(inputs, self.axis, self.momentum, self.epsilon, self.gamma, self.beta,
                                   self.moving_mean, self.moving_variance, training, self.fused)
        for u in updates:
            self._add_update(u)
        return out


# ---- the functions: a new layer object per call -------------------------------------------------------


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
          reuse=None):
    """activation(inputs @ kernel + bias) over the last axis of inputs (rank 2 or more, last dim known)."""
    layer = Dense(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                  bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                  bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                  kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, trainable=trainable,
                  name=name, _scope=name, _reuse=reuse)
    return layer(inputs)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """A 2-D convolution of NHWC inputs with a [kh, kw, in, filters] kernel, plus bias, then activation."""
    layer = Conv2D(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                   dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                   kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                   kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                   activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                   bias_constraint=bias_constraint, trainable=trainable, name=name, _scope=name, _reuse=reuse)
    return layer(inputs)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """The maximum over pool_size windows of NHWC inputs, moved by strides."""
    return MaxPooling2D(pool_size, strides, padding=padding, data_format=data_format, name=name)(inputs)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """The mean over pool_size windows of NHWC inputs (padding excluded), moved by strides."""
    return AveragePooling2D(pool_size, strides, padding=padding, data_format=data_format, name=name)(inputs)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """tf.layers.dropout: while training, drops each element with probability rate (NOT keep_prob) and scales
    the rest by 1 / (1 - rate); otherwise inputs unchanged. training: a Python bool or a bool tensor (fed)."""
    return Dropout(rate, noise_shape=noise_shape, seed=seed, name=name)(inputs, training=training)


def flatten(inputs, name=None, data_format="channels_last"):
    """inputs as [batch, everything else] (the dims after the first must be known)."""
    return Flatten(data_format=data_format, name=name)(inputs)


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=init_ops.zeros_initializer(), gamma_initializer=init_ops.ones_initializer(),
                        moving_mean_initializer=init_ops.zeros_initializer(),
                        moving_variance_initializer=init_ops.ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, training=False,
                        trainable=True, name=None, reuse=None, renorm=False, renorm_clipping=None,
                        renorm_momentum=0.99, fused=None, virtual_batch_size=None, adjustment=None):
    """TF 1.x's tf.layers.batch_normalization (see BatchNormalization). As TF 1.x, the moving averages change
    only when the ops in tf.GraphKeys.UPDATE_OPS run:

        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss)
    """
    layer = BatchNormalization(axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                               beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                               moving_mean_initializer=moving_mean_initializer,
                               moving_variance_initializer=moving_variance_initializer,
                               beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
                               beta_constraint=beta_constraint, gamma_constraint=gamma_constraint, renorm=renorm,
                               renorm_clipping=renorm_clipping, renorm_momentum=renorm_momentum, fused=fused,
                               trainable=trainable, virtual_batch_size=virtual_batch_size, adjustment=adjustment,
                               name=name, _scope=name, _reuse=reuse)
    return layer(inputs, training=training)
