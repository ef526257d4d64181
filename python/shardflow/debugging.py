"""TF 1.x's run-time checks: tf.Assert, tf.debugging.assert_* (also tf.assert_*), tf.check_numerics.

    with tf.control_dependencies([tf.assert_positive(x, message="x")]):
        y = tf.log(x)

tf.Assert is the Assert op: when its condition is false the step fails with
InvalidArgumentError "assertion failed: [message] [values...]", each data
item in brackets, a tensor as its first `summarize` values (3 by default, as
TensorFlow). The assert_* functions build it as TF 1.x does, and, as TF 1.x,
check at graph construction what constants already decide: a false one
raises InvalidArgumentError (static rank and dtype checks raise ValueError and
TypeError) and a true one adds no Assert.
"""

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import ops
from . import tf_api as _tf

__all__ = ["Assert", "assert_equal", "assert_none_equal", "assert_less", "assert_less_equal", "assert_greater",
           "assert_greater_equal", "assert_positive", "assert_negative", "assert_non_negative",
           "assert_non_positive", "assert_rank", "assert_rank_at_least", "assert_type", "assert_integer",
           "assert_scalar", "check_numerics", "verify_tensor_all_finite", "is_numeric_tensor"]


def _static(t):
    """The value of t when it is a Const node's output (TF's constant_value, for Consts only), else None."""
    if isinstance(t, _graph.Tensor) and t.op.type == "Const":
        return np.asarray(t.op.get_attr("value"))
    return None


def _data_template(data):
    """(template, tensors): each item in brackets, a str as itself, a tensor as {} (braces escaped)."""
    parts, tensors = [], []
    for item in data:
        if isinstance(item, (str, bytes)):
            text = item.decode() if isinstance(item, bytes) else item
            parts.append("[" + text.replace("{", "{{").replace("}", "}}") + "]")
        else:
            tensors.append(_graph.convert_to_tensor(item))
            parts.append("[{}]")
    return " ".join(parts), tensors


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TensorFlow's name
    """An Operation that fails the step with InvalidArgumentError when condition (a bool scalar) is false.

    data: a list of str and tensors, printed in brackets after "assertion failed: "; summarize: how many
    values of each tensor (3 when None; a negative number prints all).
    """
    if isinstance(data, (str, bytes, _graph.Tensor)) or not hasattr(data, "__iter__"):
        raise errors.InvalidArgumentError(
            f"tf.Assert takes data as a list of strings and tensors, got {type(data).__name__}")
    condition = _graph.convert_to_tensor(condition)
    if condition.dtype != _dt.bool_:
        raise errors.InvalidArgumentError(f"tf.Assert's condition must be bool, got {condition.dtype.name}")
    template, tensors = _data_template(list(data))
    n = 3 if summarize is None else int(summarize)
    return ops.add_op("Assert", [condition] + tensors, {"template": template, "summarize": n},
                      name=name or "Assert")


def _static_text(data):
    # TF's _assert_static: the data's strings and constant values, one per line.
    out = []
    for item in data:
        if isinstance(item, (str, bytes)):
            out.append(item.decode() if isinstance(item, bytes) else item)
        else:
            v = _static(item) if isinstance(item, _graph.Tensor) else np.asarray(item)
            out.append(str(v) if v is not None else str(item))
    return "\n".join(out)


def _binary_assert(sym, np_fn, tf_fn, x, y, data, summarize, message, name, default_name):
    x = _graph.convert_to_tensor(x)
    y = _graph.convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, _graph.Tensor) else y
    if x.dtype != y.dtype:
        raise errors.InvalidArgumentError(
            f"{default_name}: x ({x.name}) is {x.dtype.name} but y ({y.name}) is {y.dtype.name}")
    if data is None:
        data = [message or "", f"Condition x {sym} y did not hold element-wise:",
                f"x ({x.name}) = ", x, f"y ({y.name}) = ", y]
    elif message is not None:
        data = [message] + list(data)
    xs, ys = _static(x), _static(y)
    if xs is not None and ys is not None:
        try:
            holds = bool(np.all(np_fn(xs, ys)))
        except ValueError:
            raise errors.InvalidArgumentError(
                f"{default_name}: shapes {list(xs.shape)} and {list(ys.shape)} do not broadcast") from None
        if not holds:
            raise errors.InvalidArgumentError(_static_text(data))
        return _graph.no_op(name=name or default_name)
    with _graph.name_scope(name or default_name):
        condition = _tf.reduce_all(tf_fn(x, y))
        return Assert(condition, data, summarize=summarize)


def assert_equal(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x == y element-wise (broadcasting)."""
    return _binary_assert("==", np.equal, _tf.equal, x, y, data, summarize, message, name, "assert_equal")


def assert_none_equal(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x != y for every element (broadcasting)."""
    return _binary_assert("!=", np.not_equal, _tf.not_equal, x, y, data, summarize, message, name,
                          "assert_none_equal")


def assert_less(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x < y element-wise (broadcasting)."""
    return _binary_assert("<", np.less, _tf.less, x, y, data, summarize, message, name, "assert_less")


def assert_less_equal(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x <= y element-wise (broadcasting)."""
    return _binary_assert("<=", np.less_equal, _tf.less_equal, x, y, data, summarize, message, name,
                          "assert_less_equal")


def assert_greater(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x > y element-wise (broadcasting)."""
    return _binary_assert(">", np.greater, _tf.greater, x, y, data, summarize, message, name, "assert_greater")


def assert_greater_equal(x, y, data=None, summarize=None, message=None, name=None):
    """Asserts x >= y element-wise (broadcasting)."""
    return _binary_assert(">=", np.greater_equal, _tf.greater_equal, x, y, data, summarize, message, name,
                          "assert_greater_equal")


def _sign_assert(sym, np_fn, tf_fn, x, data, summarize, message, name, default_name):
    x = _graph.convert_to_tensor(x)
    if data is None:
        data = [message or "", f"Condition x {sym} 0 did not hold element-wise:", f"x ({x.name}) = ", x]
    elif message is not None:
        data = [message] + list(data)
    zero = _graph.constant(0, dtype=x.dtype)
    return _binary_assert(sym, lambda a, _z: np_fn(a), lambda a, _z: tf_fn(a, zero), x, zero, data, summarize,
                          None, name, default_name)


def assert_positive(x, data=None, summarize=None, message=None, name=None):
    """Asserts x > 0 element-wise."""
    return _sign_assert(">", lambda a: a > 0, _tf.greater, x, data, summarize, message, name, "assert_positive")


def assert_negative(x, data=None, summarize=None, message=None, name=None):
    """Asserts x < 0 element-wise."""
    return _sign_assert("<", lambda a: a < 0, _tf.less, x, data, summarize, message, name, "assert_negative")


def assert_non_negative(x, data=None, summarize=None, message=None, name=None):
    """Asserts x >= 0 element-wise."""
    return _sign_assert(">=", lambda a: a >= 0, _tf.greater_equal, x, data, summarize, message, name,
                        "assert_non_negative")


def assert_non_positive(x, data=None, summarize=None, message=None, name=None):
    """Asserts x <= 0 element-wise."""
    return _sign_assert("<=", lambda a: a <= 0, _tf.less_equal, x, data, summarize, message, name,
                        "assert_non_positive")


def _rank_assert(x, rank, at_least, message, name, data, summarize, default_name):
    x = _graph.convert_to_tensor(x)
    want = int(rank)
    have = x.shape.rank
    what = "at least rank" if at_least else "rank"
    prefix = f"{message}.  " if message else ""
    if have is not None:
        if (have < want) if at_least else (have != want):
            raise ValueError(f"{prefix}Tensor {x.name} must have {what} {want}.  Received rank {have}, "
                             f"shape {x.shape}")
        return _graph.no_op(name=name or default_name)
    if data is None:
        data = [message or "", f"Tensor {x.name} must have {what}", want, "Received shape: ", _tf.shape(x)]
    with _graph.name_scope(name or default_name):
        r = _tf.rank(x)
        cond = _tf.greater_equal(r, want) if at_least else _tf.equal(r, want)
        return Assert(cond, data, summarize=summarize)


def assert_rank(x, rank, data=None, summarize=None, message=None, name=None):
    """Asserts x has rank `rank`: ValueError now when the rank is known, an Assert otherwise."""
    return _rank_assert(x, rank, False, message, name, data, summarize, "assert_rank")


def assert_rank_at_least(x, rank, data=None, summarize=None, message=None, name=None):
    """Asserts x has rank `rank` or more: ValueError now when the rank is known, an Assert otherwise."""
    return _rank_assert(x, rank, True, message, name, data, summarize, "assert_rank_at_least")


def assert_scalar(tensor, name=None, message=None):
    """tensor, after checking it is a scalar (ValueError when its rank is known and not 0)."""
    tensor = _graph.convert_to_tensor(tensor)
    rank = tensor.shape.rank
    if rank is not None and rank != 0:
        prefix = f"{message}  " if message else ""
        raise ValueError(f"{prefix}Expected scalar shape for {tensor.name}, saw shape: {tensor.shape}.")
    if rank is None:
        raise ValueError(f"A scalar is needed for {tensor.name}, whose rank is unknown")
    return tensor


def assert_type(tensor, tf_type, message=None, name=None):
    """A no_op after checking tensor's dtype is tf_type (TypeError otherwise), as TF 1.x."""
    tensor = _graph.convert_to_tensor(tensor)
    want = _dt.as_dtype(tf_type)
    if tensor.dtype != want:
        prefix = f"{message} " if message else ""
        raise TypeError(f"{prefix}{tensor.name} must be of type {want!r}; got {tensor.dtype!r}")
    return _graph.no_op(name=name or "assert_type")


def assert_integer(x, message=None, name=None):
    """A no_op after checking x's dtype is an integer (TypeError otherwise), as TF 1.x."""
    x = _graph.convert_to_tensor(x)
    if not x.dtype.is_integer:
        prefix = f"{message} " if message else ""
        raise TypeError(f"{prefix}Expected {x.name} to be integer type.  Found: {x.dtype.name}")
    return _graph.no_op(name=name or "assert_integer")


def is_numeric_tensor(tensor):
    """Whether tensor is a Tensor of a numeric dtype (not bool or resource)."""
    return isinstance(tensor, _graph.Tensor) and (tensor.dtype.is_floating or tensor.dtype.is_integer)


def check_numerics(tensor, message, name=None):
    """tensor, failing the step with InvalidArgumentError "... message : Tensor had NaN or Inf values" when it has one.

    Its gradient passes through unchanged (the Assert is a control input of an Identity).
    """
    tensor = _graph.convert_to_tensor(tensor)
    if not tensor.dtype.is_floating:
        raise TypeError(f"check_numerics needs a floating tensor, got {tensor.dtype.name} ({tensor.name})")
    with _graph.name_scope(name or "CheckNumerics"):
        ok = _tf.reduce_all(ops.is_finite(tensor))
        check = Assert(ok, [f"{message} : Tensor had NaN or Inf values"], summarize=0)
        with _graph.control_dependencies([check]):
            return _graph.identity(tensor)


def verify_tensor_all_finite(t, msg, name=None):
    """TF 1.x's name for check_numerics(t, msg)."""
    return check_numerics(t, msg, name=name)
