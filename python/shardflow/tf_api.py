"""TensorFlow 1.x's names and signatures for the common ops (tf.reduce_sum, tf.matmul, tf.stack, ...).

Each function builds the same nodes sf.ops does; they are here so TensorFlow code reads the same:
`sf.reduce_sum(x, axis=1, keepdims=True)` is `sf.ops.sum(x, axes=[1], keep_dims=True)`. A
function refuses, with InvalidArgumentError, an argument TensorFlow takes that it does not
support, rather than ignoring it.
"""

import builtins

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import ops

__all__ = ["matmul", "reshape", "concat", "stack", "unstack", "split", "cast", "reduce_sum", "reduce_mean",
           "reduce_max", "reduce_min", "reduce_prod", "reduce_all", "reduce_any", "argmax", "argmin", "range", "zeros", "ones", "zeros_like",
           "ones_like", "fill", "transpose", "expand_dims", "squeeze", "shape", "size", "rank", "tile", "gather",
           "one_hot", "where", "unique", "unsorted_segment_sum", "maximum", "minimum", "add_n", "clip_by_value", "clip_by_norm", "global_norm", "bitcast",
           "to_float", "to_double", "to_int32", "to_int64", "reduce_logsumexp", "count_nonzero", "cumsum", "cumprod",
           "pad", "slice", "eye", "sequence_mask", "boolean_mask",
           "clip_by_global_norm", "stop_gradient", "square", "sqrt",
           "exp", "log", "abs", "sign", "negative", "sin", "cos", "tanh", "sigmoid", "pow", "floordiv", "floormod", "truediv", "divide", "squared_difference",
           "add", "subtract", "multiply", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or", "logical_not", "arg_max", "arg_min", "random_normal", "random_uniform",
           "truncated_normal"]


def _t(x, dtype=None):
    return x if isinstance(x, _graph.Tensor) else _graph.convert_to_tensor(x, dtype=dtype)


def _int_list(value, what):
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    try:
        return [int(v) for v in value]
    except TypeError:
        raise errors.InvalidArgumentError(f"{what} must be an int or a list of ints, got {value!r}") from None


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """a @ b (MatMul for matrices, BatchMatMul over leading batch dims)."""
    a, b = _t(a), _t(b)
    ra, rb = a.shape.rank, b.shape.rank
    op = "MatMul" if (ra in (2, None) and rb in (2, None)) else "BatchMatMul"
    return ops.add_op(op, [a, b], {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}, name=name)


def reshape(tensor, shape, name=None):
    """tensor with a new shape (a list with at most one -1, or an int tensor)."""
    if not isinstance(shape, _graph.Tensor):
        shape = np.asarray(shape, dtype=np.int32)
    return ops.reshape(_t(tensor), shape, name=name)


def concat(values, axis, name=None):
    """values joined along axis."""
    values = [_t(v) for v in values]
    if not values:
        raise errors.InvalidArgumentError("concat needs at least one tensor")
    if len(values) == 1:
        return _graph.identity(values[0], name=name or "concat")
    return ops.concat(*values, axis=int(axis), name=name)


def stack(values, axis=0, name=None):
    """The tensors of values (one shape) along a new axis: N tensors of shape S give [N, *S] for axis 0."""
    values = [_t(v) for v in values]
    if not values:
        raise errors.InvalidArgumentError("stack needs at least one tensor")
    expanded = [ops.expand_dims(v, axis=int(axis)) for v in values]
    return concat(expanded, axis=int(axis), name=name)


def unstack(value, num=None, axis=0, name=None):
    """The num slices of value along axis, each without that axis; num from the static shape if None."""
    value = _t(value)
    rank = value.shape.rank
    if rank is None:
        raise errors.InvalidArgumentError(f"unstack of {value.name!r} needs a known rank")
    ax = int(axis) + rank if int(axis) < 0 else int(axis)
    if not 0 <= ax < rank:
        raise errors.InvalidArgumentError(f"unstack axis {axis} is out of range for shape {value.shape}")
    n = value.shape[ax] if num is None else int(num)
    if n is None:
        raise errors.InvalidArgumentError(f"unstack of {value.name!r} along axis {axis} of unknown size: pass num")
    if n == 1:
        parts = [value]
    else:
        parts = ops.split(value, num_split=n, axis=ax, name=name)
        parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    return [ops.squeeze(p, axes=[ax]) for p in parts]


def split(value, num_or_size_splits, axis=0, name=None):
    """value split into num_or_size_splits equal parts along axis (a list of sizes is not supported)."""
    if not isinstance(num_or_size_splits, (int, np.integer)):
        raise errors.InvalidArgumentError("split takes a number of equal parts; a list of sizes is not supported")
    n = int(num_or_size_splits)
    if n == 1:
        return [_graph.identity(_t(value), name=name or "split")]
    parts = ops.split(_t(value), num_split=n, axis=int(axis), name=name)
    return list(parts) if isinstance(parts, (list, tuple)) else [parts]


def cast(x, dtype, name=None):
    """x converted to dtype."""
    return ops.cast(_t(x), DstT=_dt.as_dtype(dtype), name=name)


def _reduce(op, x, axis, keepdims, name, reduction_indices=None, keep_dims=None):
    # TF 1.x's spellings: reduction_indices= for axis, keep_dims= for keepdims.
    if reduction_indices is not None:
        if axis is not None:
            raise errors.InvalidArgumentError("give axis or reduction_indices (its TF 1.x name), not both")
        axis = reduction_indices
    if keep_dims is not None:
        keepdims = keep_dims
    x = _t(x)
    if axis is None:
        return op(x, axes=[], keep_dims=bool(keepdims), name=name)
    axes = _int_list(axis, "axis")
    if not axes:  # TensorFlow: an empty list of axes reduces nothing
        return _graph.identity(x, name=name or "Identity")
    return op(x, axes=axes, keep_dims=bool(keepdims), name=name)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Sum over axis (None: all; [] none)."""
    return _reduce(ops.sum, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Mean over axis (None: all; [] none)."""
    return _reduce(ops.mean, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_max(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Maximum over axis (None: all; [] none)."""
    return _reduce(ops.max, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_min(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Minimum over axis (None: all; [] none)."""
    return _reduce(ops.min, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def _bool_reduce(op, x, axis, keepdims, name, reduction_indices, keep_dims):
    x = _t(x)
    if x.dtype != _dt.bool_:
        raise errors.InvalidArgumentError(f"{op.__name__} needs a bool tensor, got {x.dtype.name} ({x.name})")
    # As int32 0/1: the min of no elements is int32's max (True), the max int32's min (False), as TensorFlow's
    # reduce_all and reduce_any of an empty tensor.
    r = _reduce(op, ops.cast(x, DstT=_dt.int32), axis, keepdims, None, reduction_indices, keep_dims)
    return greater(r, 0, name=name)


def reduce_all(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Logical and over axis (None: all; [] none); True for no elements."""
    return _bool_reduce(ops.min, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_any(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Logical or over axis (None: all; [] none); False for no elements."""
    return _bool_reduce(ops.max, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_prod(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """Product over axis (None: all; [] none)."""
    return _reduce(ops.prod, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def argmax(input, axis=None, output_type=_dt.int64, name=None):  # noqa: A002 - TensorFlow's name
    """Index of the largest value along axis (0 if None, as TensorFlow 1.x)."""
    out = ops.arg_max(_t(input), axis=0 if axis is None else int(axis), name=name)
    return out if _dt.as_dtype(output_type) == _dt.int64 else cast(out, output_type)


def argmin(input, axis=None, output_type=_dt.int64, name=None):  # noqa: A002
    """Index of the smallest value along axis (0 if None, as TensorFlow 1.x)."""
    out = ops.arg_min(_t(input), axis=0 if axis is None else int(axis), name=name)
    return out if _dt.as_dtype(output_type) == _dt.int64 else cast(out, output_type)


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001 - TensorFlow's name
    """[start, start + delta, ...) up to limit; range(n) is 0..n-1. int32 unless a value or dtype is float."""
    if limit is None:
        start, limit = 0, start
    values = [start, limit, delta]
    if dtype is None:
        tensors = [v for v in values if isinstance(v, _graph.Tensor)]
        if tensors:
            dtype = tensors[0].dtype
        elif any(isinstance(v, (float, np.floating)) for v in values):
            dtype = _dt.float32
        else:
            dtype = _dt.int32
    dtype = _dt.as_dtype(dtype)
    values = [v if isinstance(v, _graph.Tensor) else _graph.convert_to_tensor(v, dtype=dtype) for v in values]
    values = [v if v.dtype == dtype else cast(v, dtype) for v in values]
    return ops.range(*values, name=name)


def fill(dims, value, name=None):
    """A tensor of shape dims filled with the scalar value."""
    if isinstance(dims, (list, tuple)) and any(isinstance(d, _graph.Tensor) for d in dims):
        dims = stack([d if isinstance(d, _graph.Tensor) else int(d) for d in dims])  # TF's packing of a list
        dims = dims if dims.dtype == _dt.int32 else cast(dims, _dt.int32)
    if not isinstance(dims, _graph.Tensor):
        dims = np.asarray(_int_list(dims, "dims"), dtype=np.int32)  # an int n is the shape [n], as TensorFlow
    return ops.fill(dims, _t(value), name=name)


def zeros(shape, dtype=_dt.float32, name=None):
    """Zeros of shape and dtype."""
    dtype = _dt.as_dtype(dtype)
    return fill(shape, _graph.constant(np.zeros((), dtype.as_numpy_dtype)), name=name)


def ones(shape, dtype=_dt.float32, name=None):
    """Ones of shape and dtype."""
    dtype = _dt.as_dtype(dtype)
    return fill(shape, _graph.constant(np.ones((), dtype.as_numpy_dtype)), name=name)


def zeros_like(tensor, name=None):
    """Zeros of tensor's shape and dtype."""
    return ops.zeros_like(_t(tensor), name=name)


def ones_like(tensor, name=None):
    """Ones of tensor's shape and dtype."""
    return ops.ones_like(_t(tensor), name=name)


def transpose(a, perm=None, name=None):
    """a with its dims permuted (reversed if perm is None)."""
    a = _t(a)
    if perm is None:
        if a.shape.rank is None:
            raise errors.InvalidArgumentError(f"transpose of {a.name!r} without perm needs a known rank")
        perm = list(reversed(builtins.range(a.shape.rank)))
    return ops.transpose(a, perm=_int_list(perm, "perm"), name=name)


def expand_dims(input, axis, name=None):  # noqa: A002
    """input with a size-1 axis inserted at axis."""
    return ops.expand_dims(_t(input), axis=int(axis), name=name)


def squeeze(input, axis=None, name=None):  # noqa: A002
    """input without its size-1 axes (all, or those in axis)."""
    return ops.squeeze(_t(input), axes=[] if axis is None else _int_list(axis, "axis"), name=name)


def shape(input, name=None):  # noqa: A002
    """The shape of input as an int32 vector."""
    return ops.shape(_t(input), name=name)


def size(input, name=None):  # noqa: A002
    """The number of elements of input (int32)."""
    return ops.size(_t(input), name=name)


def rank(input, name=None):  # noqa: A002
    """The rank of input (int32)."""
    return ops.rank(_t(input), name=name)


def tile(input, multiples, name=None):  # noqa: A002
    """input repeated multiples[i] times along axis i."""
    return ops.tile(_t(input), multiples=_int_list(multiples, "multiples"), name=name)


def gather(params, indices, axis=0, name=None):
    """Rows of params at indices (axis 0 only)."""
    if axis != 0:
        raise errors.InvalidArgumentError(f"gather supports axis 0 only, got {axis}")
    return ops.gather(_t(params), _t(indices), name=name)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, dtype=_dt.float32, name=None):
    """[..., depth] with on_value at each index and off_value elsewhere."""
    return ops.one_hot(_t(indices), depth=int(depth), dtype=_dt.as_dtype(dtype), on=float(on_value),
                       off=float(off_value), name=name)


def where(condition, x=None, y=None, name=None):
    """condition ? x : y element-wise; with condition alone, its true elements' coordinates (int64 [count, rank])."""
    if x is None and y is None:
        return ops.where(_t(condition), name=name)
    if x is None or y is None:
        raise errors.InvalidArgumentError("where takes both x and y, or neither")
    x = _t(x)
    return ops.select(_t(condition), x, _t(y, dtype=x.dtype), name=name)


def unique(x, out_idx=_dt.int32, name=None):
    """(y, idx): the distinct values of vector x in order of first appearance, and x's index into them."""
    if _dt.as_dtype(out_idx) != _dt.int32:
        raise errors.InvalidArgumentError("unique gives int32 indices only")
    return ops.unique(_t(x), name=name)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """out[segment_ids[i...], ...] = sum of data[i..., ...] (segment_ids a prefix of data's shape)."""
    return ops.unsorted_segment_sum(_t(data), _t(segment_ids), _t(num_segments), name=name)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """t limited to [clip_value_min, clip_value_max] element-wise."""
    t = _t(t)
    lo, hi = _t(clip_value_min, dtype=t.dtype), _t(clip_value_max, dtype=t.dtype)
    return ops.minimum(ops.maximum(t, lo), hi, name=name)


def to_float(x, name="ToFloat"):
    """TF 1.x's tf.to_float: x cast to float32."""
    return cast(x, _dt.float32, name=name)


def to_double(x, name="ToDouble"):
    """TF 1.x's tf.to_double: x cast to float64."""
    return cast(x, _dt.float64, name=name)


def to_int32(x, name="ToInt32"):
    """TF 1.x's tf.to_int32: x cast to int32."""
    return cast(x, _dt.int32, name=name)


def to_int64(x, name="ToInt64"):
    """TF 1.x's tf.to_int64: x cast to int64."""
    return cast(x, _dt.int64, name=name)


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None, keep_dims=None):
    """log(sum(exp(x))) over axis, computed stably (the maximum taken out first), as TF."""
    x = _t(input_tensor)
    m = _reduce(ops.max, x, axis, True, None, reduction_indices, None)
    m = stop_gradient(where(ops.is_finite(m), m, zeros_like(m)))
    out = ops.log(_reduce(ops.sum, ops.exp(x - m), axis, True, None, reduction_indices, None)) + m
    keep = keep_dims if keep_dims is not None else keepdims
    if keep:
        return out if name is None else _graph.identity(out, name=name)
    ax = reduction_indices if reduction_indices is not None else axis
    if ax is None:
        return reshape(out, [], name=name)
    return squeeze(out, _int_list(ax, "axis"), name=name)


def count_nonzero(input_tensor, axis=None, keepdims=False, dtype=_dt.int64, name=None, reduction_indices=None,
                  keep_dims=None):
    """How many elements are not zero (False for bool) over axis, as dtype (int64 by default)."""
    x = _t(input_tensor)
    nonzero = not_equal(x, False if x.dtype == _dt.bool_ else 0)
    return cast(_reduce(ops.sum, cast(nonzero, _dt.int64), axis, keepdims, None, reduction_indices, keep_dims),
                dtype, name=name)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sums along axis (exclusive: each without its own element; reverse: from the end)."""
    return ops.cumsum(_t(x), axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse), name=name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running products along axis (exclusive, reverse as cumsum)."""
    return ops.cumprod(_t(x), axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse), name=name)


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0):
    """tensor padded by paddings ([[before, after]] per axis); mode CONSTANT, REFLECT or SYMMETRIC."""
    if constant_values != 0:
        raise errors.UnimplementedError("tf.pad(constant_values=...) other than 0 is not supported")
    rows = np.asarray(paddings, dtype=np.int64)
    if rows.ndim != 2 or rows.shape[1] != 2:
        raise errors.InvalidArgumentError(f"paddings must be [[before, after]] per axis, got {paddings!r}")
    return ops.pad(_t(tensor), paddings=[int(v) for v in rows.reshape(-1)], mode=str(mode).upper(), name=name)


def slice(input_, begin, size, name=None):  # noqa: A001 - TensorFlow's name
    """The block of input_ starting at begin, of size (-1: to the end) per axis."""
    return ops.slice(_t(input_), begin=_int_list(begin, "begin"), size=_int_list(size, "size"), name=name)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dt.float32, name=None):
    """The identity matrix [num_rows, num_columns]."""
    if batch_shape is not None:
        raise errors.UnimplementedError("tf.eye(batch_shape=...) is not supported")
    n = int(num_rows)
    m = n if num_columns is None else int(num_columns)
    return _graph.constant(np.eye(n, m, dtype=_dt.as_dtype(dtype).as_numpy_dtype), name=name or "eye")


def sequence_mask(lengths, maxlen=None, dtype=_dt.bool_, name=None):
    """[..., maxlen] mask: element j of row i is j < lengths[i] (maxlen: the largest length when None)."""
    lengths = _t(lengths)
    if maxlen is None:
        maxlen = reduce_max(lengths)
    limit = _t(maxlen, dtype=lengths.dtype)
    mask = less(range(0, limit, 1, dtype=lengths.dtype), expand_dims(lengths, -1))
    return mask if _dt.as_dtype(dtype) == _dt.bool_ else cast(mask, dtype, name=name)


def boolean_mask(tensor, mask, name=None, axis=None):
    """The elements (rows) of tensor where mask ([leading dims of tensor], bool) is true, flattened over mask's
    dims, as TF."""
    if axis not in (None, 0):
        raise errors.UnimplementedError("tf.boolean_mask(axis=...) other than 0 is not supported")
    tensor, mask = _t(tensor), _t(mask)
    k = mask.shape.rank
    if k is None:
        raise errors.InvalidArgumentError("boolean_mask needs the mask's rank known")
    if k == 0:
        raise ValueError("mask cannot be scalar.")
    rest = tensor.shape.dims[k:] if tensor.shape.rank is not None else None
    if rest is None or any(d is None for d in rest):
        flat = reshape(tensor, concat([[-1], shape(tensor)[k:]], 0))
    else:
        flat = reshape(tensor, [-1] + [int(d) for d in rest])
    idx = reshape(ops.where(reshape(mask, [-1])), [-1])
    return gather(flat, idx, name=name)


def bitcast(input, type, name=None):  # noqa: A002 - TensorFlow's names
    """input's bytes as dtype type: a wider input gains a last dimension of the size ratio, a narrower one loses
    its last dimension (which must be that ratio), as TF's tf.bitcast."""
    return ops.add_op("Bitcast", [_t(input)], {"type": _dt.as_dtype(type)}, name=name)


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """t * clip_norm / max(l2norm(t), clip_norm), the norm over axes (None: all), as TF 1.x."""
    t = _t(t)
    clip = _t(clip_norm, dtype=t.dtype)
    with _graph.name_scope(name or "clip_by_norm"):
        l2sum = reduce_sum(t * t, axes, keepdims=True)
        pred = greater(l2sum, 0)
        l2norm = where(pred, ops.sqrt(where(pred, l2sum, ones_like(l2sum))), l2sum)  # no NaN gradient at 0
        return t * clip / ops.maximum(l2norm, clip)


def global_norm(t_list, name=None):
    """sqrt(sum of every tensor's squared L2 norm); None entries are skipped, as TF 1.x."""
    ts = [_t(v) for v in t_list if v is not None]
    if not ts:
        raise errors.InvalidArgumentError("global_norm needs at least one tensor that is not None")
    with _graph.name_scope(name or "global_norm"):
        return ops.sqrt(add_n([reduce_sum(v * v) for v in ts]))


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """TF 1.x's (list_clipped, global_norm): each t * clip_norm / max(global_norm, clip_norm); None entries stay
    None, and a non-finite global norm makes every value NaN, as TF."""
    if isinstance(t_list, _graph.Tensor) or not hasattr(t_list, "__iter__"):
        raise TypeError("t_list should be a sequence")
    t_list = list(t_list)
    with _graph.name_scope(name or "clip_by_global_norm"):
        norm = global_norm(t_list) if use_norm is None else _t(use_norm)
        clip = _t(clip_norm, dtype=norm.dtype)
        one = _graph.constant(1.0, dtype=norm.dtype)
        scale = clip * ops.minimum(one / norm, one / clip) + (norm - norm)  # NaN when the norm is not finite
        out = [None if v is None else _t(v) * cast(scale, _t(v).dtype) for v in t_list]
        return out, norm


def add_n(inputs, name=None):
    """The sum of same-shape tensors."""
    return ops.add_n(*[_t(v) for v in inputs], name=name)


def stop_gradient(input, name=None):  # noqa: A002
    """input, with a zero gradient."""
    return ops.stop_gradient(_t(input), name=name)


def _binary(op):
    def fn(x, y, name=None):
        # A Python value on either side takes the tensor's dtype, as in TensorFlow.
        if not isinstance(x, _graph.Tensor) and isinstance(y, _graph.Tensor):
            return op(_t(x, dtype=y.dtype), y, name=name)
        x = _t(x)
        return op(x, _t(y, dtype=x.dtype), name=name)
    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


def _widened(op_type, op):
    """op, run in int32 and cast back on int8, int16 and uint8 inputs (graph._small_int_op), whose kernels
    those ops lack."""
    def fn(*args, name=None):
        xs = [_t(a) for a in args]
        if xs[0].dtype in (_dt.int8, _dt.int16, _dt.uint8):
            g = xs[0].graph
            with g.as_default():
                out = _graph._small_int_op(g, op_type, xs)
            return _graph.identity(out, name=name) if name else out
        return op(*xs, name=name)
    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


maximum = _binary(ops.maximum)
minimum = _binary(ops.minimum)
floordiv = _binary(_widened("FloorDiv", ops.floor_div))
floormod = _binary(_widened("FloorMod", ops.floor_mod))
_truncate_div = _binary(_widened("Div", ops.div))  # tf1_more_ops.truncatediv checks the dtype
squared_difference = _binary(ops.squared_difference)
sqrt, exp, log = ops.sqrt, ops.exp, ops.log
square, abs, sign, negative = (_widened("Square", ops.square), _widened("Abs", ops.abs),  # noqa: A001
                               _widened("Sign", ops.sign), _widened("Neg", ops.neg))


# TF 1.x's names of binary ops, with TF 1.x's meanings (NumPy broadcasting; a Python value
# takes the tensor's dtype).
add = _binary(ops.add)
subtract = _binary(ops.sub)
multiply = _binary(ops.mul)
equal = _binary(ops.equal)
not_equal = _binary(ops.not_equal)
less = _binary(ops.less)
less_equal = _binary(ops.less_equal)
greater = _binary(ops.greater)
greater_equal = _binary(ops.greater_equal)
logical_and = _binary(ops.logical_and)
logical_or = _binary(ops.logical_or)
logical_not = ops.logical_not


def arg_max(input, dimension=None, name=None, output_type=_dt.int64):  # noqa: A002 - TF 1.x's name
    """TF 1.x's tf.arg_max: argmax along dimension (0 if None)."""
    return argmax(input, axis=dimension, output_type=output_type, name=name)


def arg_min(input, dimension=None, name=None, output_type=_dt.int64):  # noqa: A002
    """TF 1.x's tf.arg_min: argmin along dimension (0 if None)."""
    return argmin(input, axis=dimension, output_type=output_type, name=name)


def _random_shape(shape, what):
    if isinstance(shape, _graph.Tensor):
        raise errors.UnimplementedError(f"{what}: a shape given as a tensor is not supported; give a list of ints")
    return _int_list(shape, f"{what} shape")


def _scaled(unit, scale, shift, name):
    """unit * scale + shift where scale or shift is a tensor (TF 1.x lets them be fed)."""
    out = unit * scale + shift
    return _graph.identity(out, name=name) if name else out


def random_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """TF 1.x's tf.random_normal: normal values; mean and stddev may be tensors."""
    from . import random as _random
    shape = _random_shape(shape, "random_normal")
    if isinstance(mean, _graph.Tensor) or isinstance(stddev, _graph.Tensor):
        return _scaled(_random.normal(shape, 0.0, 1.0, dtype, seed or 0), _t(stddev, dtype), _t(mean, dtype), name)
    out = _random.normal(shape, mean, stddev, dtype, seed or 0)
    return _graph.identity(out, name=name) if name else out


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """TF 1.x's tf.truncated_normal: normal values within 2 stddev of the mean; mean and stddev may be tensors."""
    from . import random as _random
    shape = _random_shape(shape, "truncated_normal")
    if isinstance(mean, _graph.Tensor) or isinstance(stddev, _graph.Tensor):
        return _scaled(_random.truncated_normal(shape, 0.0, 1.0, dtype, seed or 0), _t(stddev, dtype), _t(mean, dtype),
                       name)
    out = _random.truncated_normal(shape, mean, stddev, dtype, seed or 0)
    return _graph.identity(out, name=name) if name else out


def random_uniform(shape, minval=0, maxval=None, dtype=_dt.float32, seed=None, name=None):
    """TF 1.x's tf.random_uniform: values in [minval, maxval) (maxval 1 for floats); bounds may be tensors."""
    from . import random as _random
    shape = _random_shape(shape, "random_uniform")
    dt = _dt.as_dtype(dtype)
    if dt not in (_dt.float32, _dt.float64):
        raise errors.UnimplementedError(f"random_uniform of {dt.name} is not supported; draw floats and cast")
    maxval = 1.0 if maxval is None else maxval
    if isinstance(minval, _graph.Tensor) or isinstance(maxval, _graph.Tensor):
        lo = _t(minval, dt)
        return _scaled(_random.uniform(shape, 0.0, 1.0, dt, seed or 0), _t(maxval, dt) - lo, lo, name)
    out = _random.uniform(shape, minval, maxval, dt, seed or 0)
    return _graph.identity(out, name=name) if name else out


def truediv(x, y, name=None):
    """x / y; int32 and int64 become float64 first, as Python's / (and TensorFlow's)."""
    return _t(x) / y if name is None else _graph.identity(_t(x) / y, name=name)


divide = truediv
sin, cos, log1p, expm1 = ops.sin, ops.cos, ops.log1p, ops.expm1
tanh, sigmoid, reciprocal, rsqrt = ops.tanh, ops.sigmoid, ops.reciprocal, ops.rsqrt
pow = _binary(ops.pow)  # noqa: A001 - tf.math.pow
floor, ceil, round, is_nan, is_inf, is_finite = (ops.floor, ops.ceil, ops.round, ops.is_nan,  # noqa: A001
                                                 ops.is_inf, ops.is_finite)


def __getattr__(name):
    # tf.math's names from tf1_more_ops.py, which builds on this module, so it is imported on first use
    if name in ("top_k", "truncatediv", "truncatemod", "realdiv", "divide_no_nan", "floor_div", "mod"):
        from . import tf1_more_ops
        return getattr(tf1_more_ops, "div_no_nan" if name == "divide_no_nan" else name)
    raise AttributeError(f"module 'shardflow.tf_api' has no attribute '{name}'")
