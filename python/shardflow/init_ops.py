"""TF 1.x's variable initializers (tf.zeros_initializer(), tf.glorot_uniform_initializer(), ...).

An initializer is called as TF calls it, initializer(shape, dtype=None,
partition_info=None), and returns the Tensor of the initial value; it is what
tf.get_variable and tf.layers take as initializer=. Random ones draw from
the seeded random ops (seed None: derived from the node's name, so a graph
built twice draws the same values).
"""

import math

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api

__all__ = ["Initializer", "Zeros", "Ones", "Constant", "RandomNormal", "TruncatedNormal", "RandomUniform",
           "VarianceScaling", "zeros_initializer", "ones_initializer", "constant_initializer",
           "random_normal_initializer", "truncated_normal_initializer", "random_uniform_initializer",
           "variance_scaling_initializer", "glorot_uniform_initializer", "glorot_normal_initializer"]


def _shape(shape):
    return [int(d) for d in _graph.TensorShape(shape).as_list()]


class Initializer:
    """The base of the initializers: __call__(shape, dtype=None, partition_info=None) -> Tensor."""

    def __init__(self, dtype=_dt.float32):
        self.dtype = _dt.as_dtype(dtype)

    def _dtype(self, dtype):
        return self.dtype if dtype is None else _dt.as_dtype(dtype)

    def get_config(self):
        return {k: v for k, v in self.__dict__.items()}


class Zeros(Initializer):
    """Zeros."""

    def __call__(self, shape, dtype=None, partition_info=None):
        return tf_api.zeros(_shape(shape), dtype=self._dtype(dtype))


class Ones(Initializer):
    """Ones."""

    def __call__(self, shape, dtype=None, partition_info=None):
        return tf_api.ones(_shape(shape), dtype=self._dtype(dtype))


class Constant(Initializer):
    """value: a number (every element) or an array-like of the variable's size (reshaped to its shape).

    As in TF 1.x, a list with fewer elements than the shape repeats its last
    value; more elements raise ValueError (and so does a different size with
    verify_shape=True).
    """

    def __init__(self, value=0, dtype=_dt.float32, verify_shape=False):
        super().__init__(dtype)
        self.value = value
        self.verify_shape = verify_shape

    def __call__(self, shape, dtype=None, partition_info=None):
        dt = self._dtype(dtype)
        shape = _shape(shape)
        arr = np.asarray(self.value, dtype=dt.as_numpy_dtype)
        n = int(np.prod(shape))
        if arr.size == 1:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)
        elif self.verify_shape and list(arr.shape) != shape:
            raise TypeError(f"Expected Tensor's shape: {tuple(shape)}, got {arr.shape}.")
        elif arr.size > n:
            raise ValueError(f"Too many elements provided. Needed at most {n}, but received {arr.size}")
        else:
            flat = arr.reshape(-1)
            arr = np.concatenate([flat, np.full(n - flat.size, flat[-1], flat.dtype)]).reshape(shape)
        return _graph.constant(arr, dtype=dt)


class RandomNormal(Initializer):
    """Normal values (mean, stddev)."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dt.float32):
        super().__init__(dtype)
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        return tf_api.random_normal(_shape(shape), self.mean, self.stddev, self._dtype(dtype), seed=self.seed)


class TruncatedNormal(Initializer):
    """Normal values (mean, stddev) redrawn until within 2 stddev of the mean."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dt.float32):
        super().__init__(dtype)
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        return tf_api.truncated_normal(_shape(shape), self.mean, self.stddev, self._dtype(dtype), seed=self.seed)


class RandomUniform(Initializer):
    """Uniform values in [minval, maxval) (maxval None: 1)."""

    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=_dt.float32):
        super().__init__(dtype)
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        return tf_api.random_uniform(_shape(shape), self.minval, self.maxval, self._dtype(dtype), seed=self.seed)


def _fans(shape):
    # TF's _compute_fans: matrices (in, out); conv kernels (..., in, out) times the receptive field.
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


class VarianceScaling(Initializer):
    """TF 1.x's variance scaling: scale / n with n the fan in, out or their mean (mode).

    distribution "normal" or "truncated_normal": a normal truncated at 2 stddev
    with stddev sqrt(scale / n) / 0.8796 (TF's correction); "untruncated_normal":
    a normal with stddev sqrt(scale / n); "uniform": within +-sqrt(3 scale / n).
    """

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None, dtype=_dt.float32):
        super().__init__(dtype)
        if scale <= 0.0:
            raise ValueError("`scale` must be positive float.")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"Invalid `mode` argument: {mode}")
        if distribution not in ("normal", "truncated_normal", "untruncated_normal", "uniform"):
            raise ValueError(f"Invalid `distribution` argument: {distribution}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        shape = _shape(shape)
        dt = self._dtype(dtype)
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        if self.distribution in ("normal", "truncated_normal"):
            return tf_api.truncated_normal(shape, 0.0, math.sqrt(scale) / .87962566103423978, dt, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return tf_api.random_normal(shape, 0.0, math.sqrt(scale), dt, seed=self.seed)
        limit = math.sqrt(3.0 * scale)
        return tf_api.random_uniform(shape, -limit, limit, dt, seed=self.seed)


def _not_float(what, dtype):
    dt = _dt.as_dtype(dtype)
    if not dt.is_floating:
        raise errors.InvalidArgumentError(f"{what} needs a floating dtype, got {dt.name}")
    return dt


zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
random_uniform_initializer = RandomUniform
variance_scaling_initializer = VarianceScaling


def glorot_uniform_initializer(seed=None, dtype=_dt.float32):
    """Glorot (Xavier) uniform: within +-sqrt(6 / (fan_in + fan_out)); tf.get_variable's default."""
    return VarianceScaling(1.0, "fan_avg", "uniform", seed, _not_float("glorot_uniform_initializer", dtype))


def glorot_normal_initializer(seed=None, dtype=_dt.float32):
    """Glorot (Xavier) normal: truncated, stddev sqrt(2 / (fan_in + fan_out)) / 0.8796."""
    return VarianceScaling(1.0, "fan_avg", "truncated_normal", seed, _not_float("glorot_normal_initializer", dtype))


class _ContribXavierNormal(Initializer):
    def __init__(self, seed, dtype):
        super().__init__(dtype)
        self.seed = seed

    def __call__(self, shape, dtype=None, partition_info=None):
        shape = _shape(shape)
        fan_in, fan_out = _fans(shape)
        stddev = math.sqrt(1.3 / max(1.0, (fan_in + fan_out) / 2.0))
        return tf_api.truncated_normal(shape, 0.0, stddev, self._dtype(dtype), seed=self.seed)


def xavier_initializer(uniform=True, seed=None, dtype=_dt.float32):
    """tf.contrib.layers.xavier_initializer: Glorot uniform, or (uniform=False) contrib's truncated normal with
    stddev sqrt(1.3 / ((fan_in + fan_out) / 2))."""
    _not_float("xavier_initializer", dtype)
    return glorot_uniform_initializer(seed, dtype) if uniform else _ContribXavierNormal(seed, dtype)
