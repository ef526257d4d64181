"""TF 1.x's learning-rate schedules of tf.train: exponential_decay, inverse_time_decay, natural_exp_decay,
polynomial_decay and piecewise_constant, as graph tensors of the global step with TF 1.x's formulas."""

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import ops
from . import tf_api as _tf

__all__ = ["exponential_decay", "inverse_time_decay", "natural_exp_decay", "polynomial_decay", "piecewise_constant"]


def _prepare(what, learning_rate, global_step, decay_steps):
    if global_step is None:
        raise ValueError(f"global_step is required for {what}.")
    lr = _graph.convert_to_tensor(learning_rate)
    if not lr.dtype.is_floating:
        lr = _tf.cast(lr, _dt.float32)
    step = _tf.cast(global_step, lr.dtype)
    steps = _tf.cast(_graph.convert_to_tensor(decay_steps), lr.dtype)
    return lr, step, steps


def _progress(step, steps, staircase):
    p = step / steps
    return ops.floor(p) if staircase else p


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """learning_rate * decay_rate ^ (global_step / decay_steps) (the exponent floored when staircase)."""
    lr, step, steps = _prepare("exponential_decay", learning_rate, global_step, decay_steps)
    with _graph.name_scope(name or "ExponentialDecay"):
        return lr * _tf.pow(_graph.convert_to_tensor(decay_rate, dtype=lr.dtype), _progress(step, steps, staircase))


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """learning_rate / (1 + decay_rate * global_step / decay_steps) (floored when staircase)."""
    lr, step, steps = _prepare("inverse_time_decay", learning_rate, global_step, decay_steps)
    with _graph.name_scope(name or "InverseTimeDecay"):
        return lr / (1.0 + _graph.convert_to_tensor(decay_rate, dtype=lr.dtype) * _progress(step, steps, staircase))


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """learning_rate * exp(-decay_rate * global_step / decay_steps) (floored when staircase)."""
    lr, step, steps = _prepare("natural_exp_decay", learning_rate, global_step, decay_steps)
    with _graph.name_scope(name or "NaturalExpDecay"):
        rate = _graph.convert_to_tensor(decay_rate, dtype=lr.dtype)
        return lr * _tf.exp(-rate * _progress(step, steps, staircase))


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                     name=None):
    """(learning_rate - end) * (1 - min(global_step, decay_steps) / decay_steps) ^ power + end; with cycle,
    decay_steps grows to the next multiple of itself past global_step, as TF 1.x."""
    lr, step, steps = _prepare("polynomial_decay", learning_rate, global_step, decay_steps)
    with _graph.name_scope(name or "PolynomialDecay"):
        end = _graph.convert_to_tensor(end_learning_rate, dtype=lr.dtype)
        if cycle:
            mult = ops.ceil(step / steps)
            steps = steps * _tf.where(_tf.equal(step, 0.0), _tf.ones_like(mult), mult)
        else:
            step = _tf.minimum(step, steps)
        frac = 1.0 - step / steps
        return (lr - end) * _tf.pow(frac, _graph.convert_to_tensor(power, dtype=lr.dtype)) + end


def piecewise_constant(x, boundaries, values, name=None):
    """values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <= boundaries[i], values[-1]
    after the last boundary."""
    if len(values) != len(boundaries) + 1:
        raise ValueError("The length of boundaries should be 1 less than the length of values")
    x = _graph.convert_to_tensor(x)
    with _graph.name_scope(name or "PiecewiseConstant"):
        vals = [_graph.convert_to_tensor(v) for v in values]
        dtype = vals[0].dtype
        out = vals[-1]
        for b, v in reversed(list(zip(boundaries, vals[:-1]))):
            bound = _graph.convert_to_tensor(b, dtype=x.dtype)
            if v.dtype != dtype:
                raise errors.InvalidArgumentError("piecewise_constant's values must have one dtype")
            out = _tf.where(_tf.less_equal(x, bound), v, out)
        return out
