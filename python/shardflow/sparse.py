"""TF 1.x's SparseTensor and the ops TF 1.x programs use it with, composed from dense primitive ops:

    sp = tf.SparseTensor(indices=[[0, 1], [2, 0]], values=[3.0, 4.0], dense_shape=[3, 4])
    y = tf.sparse_tensor_dense_matmul(sp, w)          # gathers w's rows, sums them per output row
    d = tf.sparse.to_dense(sp)                        # or tf.sparse_tensor_to_dense(sp, default_value)
    e = tf.nn.embedding_lookup_sparse(params, sp_ids, sp_weights, combiner="mean")
    indices, values, shape = sess.run(sp)             # a tf.SparseTensorValue

A SparseTensor is its three tensors (int64 indices [N, rank], values [N], int64 dense_shape [rank]); the
ops are differentiable in values and in the dense operand. What differs from TF: indices need not be in
row-major order (TF's validate_indices refuses unordered ones; the result here is the same as for ordered
ones); repeated and out-of-bounds indices fail the step in to_dense, and different inner dimensions in
sparse_tensor_dense_matmul, as TF's do. embedding_lookup_sparse keeps TF 1.x's quirks: rows up to the last
row with an id, NaN for an empty row under a weighted mean. tf.sparse_placeholder is refused (feed the
three parts through tf.placeholder and build the SparseTensor from them); other tf.sparse ops raise an
AttributeError naming what exists.
"""

import collections

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api as _tf

__all__ = ["SparseTensor", "SparseTensorValue", "to_dense", "sparse_tensor_to_dense", "sparse_to_dense",
           "sparse_tensor_dense_matmul", "matmul", "embedding_lookup_sparse", "sparse_placeholder", "placeholder"]


class SparseTensorValue(collections.namedtuple("SparseTensorValue", ["indices", "values", "dense_shape"])):
    """TF 1.x's tf.SparseTensorValue: a SparseTensor's three NumPy arrays (what Session.run gives for one)."""


class SparseTensor:
    """TF 1.x's tf.SparseTensor(indices, values, dense_shape); raises TypeError or ValueError for parts of the
    wrong dtype or rank."""

    def __init__(self, indices, values, dense_shape):
        self._indices = _graph.convert_to_tensor(indices, dtype=_dt.int64)
        self._values = _graph.convert_to_tensor(values)
        self._dense_shape = _graph.convert_to_tensor(dense_shape, dtype=_dt.int64)
        if self._indices.dtype != _dt.int64 or self._dense_shape.dtype != _dt.int64:
            raise TypeError("tf.SparseTensor: indices and dense_shape must be int64")
        if self._indices.shape.rank not in (None, 2):
            raise ValueError(f"tf.SparseTensor: indices must be [N, rank], got shape {self._indices.shape}")
        if self._values.shape.rank not in (None, 1):
            raise ValueError(f"tf.SparseTensor: values must be [N], got shape {self._values.shape}")
        if self._dense_shape.shape.rank not in (None, 1):
            raise ValueError(f"tf.SparseTensor: dense_shape must be a vector, got shape {self._dense_shape.shape}")

    @classmethod
    def from_value(cls, value):
        """A SparseTensor from a SparseTensorValue (or a SparseTensor, returned as it is); raises as the
        constructor does for parts of the wrong dtype or rank."""
        if isinstance(value, SparseTensor):
            return value
        return cls(value.indices, value.values, value.dense_shape)

    indices = property(lambda self: self._indices, doc="int64 [N, rank]: the coordinates of the values.")
    values = property(lambda self: self._values, doc="[N]: the values.")
    dense_shape = property(lambda self: self._dense_shape, doc="int64 [rank]: the dense tensor's shape.")
    dtype = property(lambda self: self._values.dtype, doc="The values' dtype.")
    graph = property(lambda self: self._values.graph, doc="The graph the three tensors belong to.")

    @property
    def shape(self):
        """The dense shape where dense_shape is a constant, else dims of unknown size (rank known or not)."""
        const = _static(self._dense_shape)
        if const is not None:
            return _graph.TensorShape([int(d) for d in const])
        rank = self._indices.shape[1] if self._indices.shape.rank == 2 else None
        return _graph.TensorShape(None if rank is None else [None] * rank)

    def get_shape(self):
        """The same as shape (TF 1.x's spelling)."""
        return self.shape

    def eval(self, feed_dict=None, session=None):
        """The SparseTensorValue in session (the default session when None); ValueError without a session,
        the step's errors otherwise."""
        from .session import get_default_session
        session = session or get_default_session()
        if session is None:
            raise ValueError("Cannot evaluate a SparseTensor using eval(): no default session is registered")
        return session.run(self, feed_dict)

    def _fetch_structure(self):
        # Session.run fetches the three tensors and gives them back as a SparseTensorValue.
        return SparseTensorValue(self._indices, self._values, self._dense_shape)

    def __repr__(self):
        return f"SparseTensor(indices={self._indices!r}, values={self._values!r}, dense_shape={self._dense_shape!r})"


def _static(t):
    """t's value when it is a Const node's output, else None."""
    return np.asarray(t.op.get_attr("value")) if t.op.type == "Const" else None


def _sparse(sp_input, what):
    if isinstance(sp_input, SparseTensorValue):
        return SparseTensor.from_value(sp_input)
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"{what} needs a tf.SparseTensor, got {type(sp_input).__name__}")
    return sp_input


def _named(t, name):
    return _graph.identity(t, name=name) if name else t


def _dense_from(indices, values, shape, default_value, validate_indices, what, name):
    """The dense tensor of shape `shape` with values at indices (row-major linear positions) and
    default_value elsewhere; a step with an index out of bounds, or a repeated index when validate_indices,
    fails with InvalidArgumentError, as TF's does."""
    from .debugging import Assert
    values = _graph.convert_to_tensor(values)
    shape = _tf.cast(shape, _dt.int64)
    strides = _tf.cumprod(shape, exclusive=True, reverse=True)
    linear = _tf.reduce_sum(indices * strides, axis=1)
    total = _tf.reduce_prod(shape)
    flat = _tf.unsorted_segment_sum(values, linear, total)
    hits = _tf.unsorted_segment_sum(_tf.ones_like(linear, name="one"), linear, total)
    inside = _tf.logical_and(_tf.greater_equal(indices, 0), _tf.less(indices, _tf.expand_dims(shape, 0)))
    deps = [Assert(_tf.reduce_all(inside), [f"{what}: an index is out of bounds of the dense shape", shape])]
    if validate_indices:
        deps.append(Assert(_tf.reduce_all(_tf.less_equal(hits, 1)),
                           [f"{what}: indices repeat (TF's validate_indices refuses them)"]))
    default = _graph.convert_to_tensor(default_value, dtype=values.dtype)
    with _graph.control_dependencies(deps):
        dense = _tf.where(_tf.greater(hits, 0), flat, _tf.zeros_like(flat) + default)
        return _named(_tf.reshape(dense, shape), name)


def to_dense(sp_input, default_value=0, validate_indices=True, name=None):
    """TF 1.x's tf.sparse.to_dense: the dense tensor, default_value where sp_input has no value; a step with
    a repeated index fails with InvalidArgumentError (validate_indices); TypeError for a non-SparseTensor."""
    sp = _sparse(sp_input, "tf.sparse.to_dense")
    with sp.graph.as_default():
        return _dense_from(sp.indices, sp.values, sp.dense_shape, default_value, validate_indices,
                           "tf.sparse.to_dense", name)


sparse_tensor_to_dense = to_dense


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0, validate_indices=True,
                    name=None):
    """TF 1.x's tf.sparse_to_dense: indices as a scalar, a vector (rank 1) or [N, rank]; sparse_values a
    scalar (for every index) or [N]. ValueError for indices of rank above 2; a repeated (validate_indices)
    or out-of-bounds index fails the step with InvalidArgumentError."""
    idx = _tf.cast(_graph.convert_to_tensor(sparse_indices), _dt.int64)
    with idx.graph.as_default():
        if idx.shape.rank == 0:
            idx = _tf.reshape(idx, [1, 1])
        elif idx.shape.rank == 1:
            idx = _tf.expand_dims(idx, 1)
        elif idx.shape.rank != 2:
            raise ValueError(f"tf.sparse_to_dense: sparse_indices must have rank 0, 1 or 2, got {idx.shape}")
        shape = _tf.reshape(_tf.cast(_graph.convert_to_tensor(output_shape), _dt.int64), [-1])
        values = _graph.convert_to_tensor(sparse_values)
        if values.shape.rank == 0:
            values = _tf.zeros(_tf.shape(idx)[:1], values.dtype) + values
        return _dense_from(idx, values, shape, default_value, validate_indices, "tf.sparse_to_dense", name)


def sparse_tensor_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """TF 1.x's tf.sparse_tensor_dense_matmul: the rank-2 SparseTensor sp_a times the dense matrix b (each
    value times b's row at its column, summed per row); ValueError for other ranks."""
    sp = _sparse(sp_a, "tf.sparse_tensor_dense_matmul")
    if sp.shape.rank not in (None, 2):
        raise ValueError(f"tf.sparse_tensor_dense_matmul needs a rank-2 SparseTensor, got {sp.shape}")
    g = sp.graph
    with g.as_default(), g.name_scope(name or "SparseTensorDenseMatMul"):
        b = _graph.convert_to_tensor(b, dtype=sp.dtype)
        if b.shape.rank not in (None, 2):
            raise ValueError(f"tf.sparse_tensor_dense_matmul needs a matrix b, got shape {b.shape}")
        if adjoint_b:
            b = _tf.transpose(b)
        from .debugging import Assert
        rows, cols = sp.indices[:, 0], sp.indices[:, 1]
        out_rows, inner = sp.dense_shape[0], sp.dense_shape[1]
        if adjoint_a:
            rows, cols, out_rows, inner = cols, rows, inner, out_rows
        check = Assert(_tf.equal(inner, _tf.cast(_tf.shape(b)[0], _dt.int64)),
                       ["tf.sparse_tensor_dense_matmul: the inner dimensions differ: A's", inner, "and b's",
                        _tf.shape(b)[0]])
        with _graph.control_dependencies([check]):
            picked = _tf.gather(b, cols) * _tf.expand_dims(sp.values, 1)
        return _tf.unsorted_segment_sum(picked, rows, out_rows)


matmul = sparse_tensor_dense_matmul  # tf.sparse.matmul


def embedding_lookup_sparse(params, sp_ids, sp_weights, partition_strategy="mod", name=None, combiner=None,
                            max_norm=None):
    """TF 1.x's tf.nn.embedding_lookup_sparse: per row of sp_ids, the combination ("sum", "mean" (TF 1.x's
    default), "sqrtn") of params' rows at its ids, weighted by sp_weights (None: 1). As TF 1.x's: the result
    has one row per row of sp_ids up to the last that has an id (not dense_shape[0]); a row without ids is
    zeros, or NaN for "mean" and "sqrtn" with weights (TF divides by their zero sum). ValueError for an
    unknown combiner."""
    from .nn import embedding_lookup
    combiner = combiner or "mean"
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"combiner must be one of 'mean', 'sqrtn' or 'sum', got {combiner!r}")
    ids = _sparse(sp_ids, "tf.nn.embedding_lookup_sparse")
    g = ids.graph
    with g.as_default(), g.name_scope(name or "embedding_lookup_sparse"):
        rows = embedding_lookup(params, ids.values, partition_strategy=partition_strategy, max_norm=max_norm)
        segments = ids.indices[:, 0]
        last = _tf.reduce_max(_tf.concat([segments, _graph.constant(np.array([-1], np.int64))], 0))
        batch = last + 1  # TF's sparse_segment_* ops: up to the last row that has an id
        if sp_weights is None:
            weights = _tf.ones_like(ids.values, name="one")
            weights = _tf.cast(weights, rows.dtype)
        else:
            weights = _sparse(sp_weights, "tf.nn.embedding_lookup_sparse").values
            weights = _tf.cast(weights, rows.dtype)
        total = _tf.unsorted_segment_sum(rows * _tf.expand_dims(weights, 1), segments, batch)
        if combiner == "sum":
            return total
        scale = _tf.unsorted_segment_sum(weights if combiner == "mean" else weights * weights, segments, batch)
        if combiner == "sqrtn":
            scale = _tf.sqrt(scale)
        if sp_weights is not None:  # TF divides by the weights' sum: 0 / 0 for a row without ids
            return total / _tf.expand_dims(scale, 1)
        safe = _tf.where(_tf.greater(scale, 0), scale, _tf.ones_like(scale))  # sparse_segment_mean/sqrt_n: 0
        return total / _tf.expand_dims(safe, 1)


def sparse_placeholder(dtype, shape=None, name=None):
    """TF 1.x's tf.sparse_placeholder: raises UnimplementedError naming what to feed instead."""
    raise errors.UnimplementedError(
        "tf.sparse_placeholder is not supported: feed the three parts through placeholders, "
        "indices = tf.placeholder(tf.int64, [None, rank]), values = tf.placeholder(dtype, [None]), "
        "shape = tf.placeholder(tf.int64, [rank]), and build tf.SparseTensor(indices, values, shape) from them")


placeholder = sparse_placeholder  # tf.sparse.placeholder


def __getattr__(name):
    raise AttributeError(f"tf.sparse.{name} is not in shardflow: it has SparseTensor, SparseTensorValue, to_dense, "
                         "matmul (sparse_tensor_dense_matmul) and tf.nn.embedding_lookup_sparse")
