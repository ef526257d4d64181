"""TF 1.x's tf.nn.top_k, tf.einsum and tf.scatter_update / scatter_add / scatter_sub on variables, composed
from shardflow's primitive ops (so they are differentiable where TF's are, through those ops' gradients).

- top_k(input, k, sorted=True): k passes of "take the largest, then mask it", along the last axis: values
  in descending order, the lower index first among equal values (TF's order); k must be a Python int.
- einsum(equation, *inputs): equations without "..." and without an index repeated within one operand,
  with or without "->"; two operands become one BatchMatMul (batch, free and summed indices moved into
  place by transposes and reshapes), one operand a sum and a transpose, more operands a chain of pairs.
- scatter_update / scatter_add / scatter_sub(ref, indices, updates): ref[indices[i], ...] = (+= / -=)
  updates[i, ...] on a variable, as one AssignAdd (add, sub: duplicates accumulate, as TF) or one Assign
  of the whole variable (update: with duplicate indices the last update wins; TF leaves that undefined).
  Each evaluates to the variable's new value.
"""

import builtins

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api as _tf

__all__ = ["top_k", "einsum", "scatter_update", "scatter_add", "scatter_sub"]


def _lowest(dtype):
    if dtype.is_floating:
        return _graph.constant(np.array(-np.inf, dtype.as_numpy_dtype))
    return _graph.constant(np.array(np.iinfo(dtype.as_numpy_dtype).min, dtype.as_numpy_dtype))


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002 - TensorFlow's names
    """(values, indices): the k largest entries of input's last axis, largest first (TF 1.x's tf.nn.top_k)."""
    x = _graph.convert_to_tensor(input)
    if isinstance(k, _graph.Tensor):
        raise errors.UnimplementedError("tf.nn.top_k with k a tensor is not supported: give k as a Python int")
    k = int(k)
    if k < 0:
        raise errors.InvalidArgumentError(f"Need k >= 0, got {k}")
    if x.shape.rank == 0:
        raise ValueError("top_k needs an input of rank 1 or more")
    n = x.shape[-1] if x.shape.rank is not None else None
    if n is not None and k > n:
        raise errors.InvalidArgumentError(f"input must have at least k={k} columns, got {n}")
    g = x.graph
    with g.as_default(), g.name_scope(name or "TopKV2"):
        positions = _tf.range(_tf.shape(x)[-1])
        values, indices, rest = [], [], x
        lowest = _lowest(x.dtype)
        taken = None
        for _ in builtins.range(k):
            idx = _tf.argmax(rest, axis=-1, output_type=_dt.int32)
            hit = _tf.equal(positions, _tf.expand_dims(idx, -1))
            values.append(_tf.reduce_max(_tf.where(hit, x, _tf.zeros_like(x) + lowest), axis=-1))
            indices.append(idx)
            taken = hit if taken is None else _tf.logical_or(taken, hit)
            rest = _tf.where(taken, _tf.zeros_like(x) + lowest, x)
        if k == 0:
            shape = _tf.concat([_tf.shape(x)[:-1], [0]], 0)
            return _tf.zeros(shape, x.dtype), _tf.zeros(shape, _dt.int32)
        return _tf.stack(values, axis=-1), _tf.stack(indices, axis=-1)


# ---- einsum ------------------------------------------------------------------------------------

def _parse(equation, n):
    eq = equation.replace(" ", "")
    if "." in eq:
        raise errors.UnimplementedError(f"tf.einsum({equation!r}): ellipses (...) are not supported")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        raise ValueError(f"tf.einsum({equation!r}) has {len(terms)} operands in the equation but {n} inputs")
    for t in terms + [out]:
        if not t.isalpha() and t:
            raise ValueError(f"tf.einsum({equation!r}): indices must be letters")
        if len(set(t)) != len(t):
            raise errors.UnimplementedError(
                f"tf.einsum({equation!r}): an index repeated within one operand (a trace or diagonal) is not "
                "supported")
    if not arrow:  # implicit output: the indices that appear once, in alphabetical order
        counts = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, m in counts.items() if m == 1))
    for c in out:
        if not any(c in t for t in terms):
            raise ValueError(f"tf.einsum({equation!r}): output index {c!r} appears in no input")
    return terms, out


def _dims(x):
    """x's dims: ints where static, else scalar tensors."""
    shape = None
    out = []
    for i, d in enumerate(x.shape.dims):
        if d is None:
            shape = _tf.shape(x) if shape is None else shape
            out.append(shape[i])
        else:
            out.append(d)
    return out


def _prod(dims):
    p = 1
    for d in dims:
        p = p * d
    return p


def _reshape(x, dims):
    if all(isinstance(d, int) for d in dims):
        return _tf.reshape(x, [int(d) for d in dims])
    return _tf.reshape(x, _tf.stack([d if isinstance(d, _graph.Tensor) else _graph.constant(np.int32(d))
                                     for d in dims]))


def _one(x, term, out):
    """x (indices term) summed over the indices out lacks and transposed to out's order."""
    gone = [i for i, c in enumerate(term) if c not in out]
    if gone:
        x = _tf.reduce_sum(x, axis=gone)
        term = "".join(c for c in term if c in out)
    if term != out:
        x = _tf.transpose(x, [term.index(c) for c in out])
    return x


def _two(a, ta, b, tb, out):
    """a (indices ta) times b (indices tb) summed to out: one BatchMatMul."""
    # indices in one operand only that the result does not keep are summed first
    ta_keep = "".join(c for c in ta if c in out or c in tb)
    tb_keep = "".join(c for c in tb if c in out or c in ta)
    a, b = _one(a, ta, ta_keep), _one(b, tb, tb_keep)
    ta, tb = ta_keep, tb_keep
    batch = [c for c in ta if c in tb and c in out]
    summed = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    a = _tf.transpose(a, [ta.index(c) for c in batch + free_a + summed]) if ta != "".join(batch + free_a + summed) \
        else a
    b = _tf.transpose(b, [tb.index(c) for c in batch + summed + free_b]) if tb != "".join(batch + summed + free_b) \
        else b
    da, db = _dims(a), _dims(b)
    nb, nfa, ns = len(batch), len(free_a), len(summed)
    bdims, fadims, sdims, fbdims = da[:nb], da[nb:nb + nfa], da[nb + nfa:], db[nb + ns:]
    a3 = _reshape(a, [_prod(bdims), _prod(fadims), _prod(sdims)])
    b3 = _reshape(b, [_prod(bdims), _prod(sdims), _prod(fbdims)])
    c = _tf.matmul(a3, b3)
    c = _reshape(c, bdims + fadims + fbdims)
    return _one(c, "".join(batch + free_a + free_b), out)


def einsum(equation, *inputs, **kwargs):
    """TF 1.x's tf.einsum for equations without "..." or an index repeated within one operand."""
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"einsum() got unexpected keyword arguments {sorted(kwargs)}")
    xs = [_graph.convert_to_tensor(x) for x in inputs]
    if not xs:
        raise ValueError("tf.einsum needs at least one input")
    terms, out = _parse(equation, len(xs))
    for x, t in zip(xs, terms):
        if x.shape.rank is not None and x.shape.rank != len(t):
            raise ValueError(f"tf.einsum({equation!r}): input of shape {x.shape} has rank {x.shape.rank}, but its "
                             f"indices {t!r} name {len(t)} dims")
        if x.shape.rank is None:
            raise errors.UnimplementedError(f"tf.einsum({equation!r}) needs inputs of known rank")
    g = xs[0].graph
    with g.as_default(), g.name_scope(name or "einsum"):
        acc, tacc = xs[0], terms[0]
        if len(xs) == 1:
            return _one(acc, tacc, out)
        for i in builtins.range(1, len(xs)):
            later = "".join(terms[i + 1:]) + out
            keep = "".join(dict.fromkeys(c for c in tacc + terms[i] if c in later))
            acc = _two(acc, tacc, xs[i], terms[i], keep)
            tacc = keep
        return _one(acc, tacc, out)


# ---- scatter updates on variables -----------------------------------------------------------------

def _rows_and_value(ref, indices, updates, what):
    from .variables import _handle_of
    handle = _handle_of(ref, what)
    g = handle.graph
    reads = [o for o in g.get_operations() if o.type == "ReadVariable" and o.inputs and o.inputs[0] == handle]
    if not reads:
        raise errors.NotFoundError(f"{what}: variable {handle.op.name!r} has no read to take its shape from")
    value = reads[0].outputs[0]
    if value.shape.rank in (None, 0):
        raise errors.InvalidArgumentError(f"{what} needs a variable of rank 1 or more, got shape {value.shape}")
    with g.as_default():
        indices = _graph.convert_to_tensor(indices)
        if indices.dtype not in (_dt.int32, _dt.int64):
            raise TypeError(f"{what}: indices must be int32 or int64, got {indices.dtype.name}")
        updates = _graph.convert_to_tensor(updates, dtype=value.dtype)
        rows = value.shape[0] if value.shape[0] is not None else _tf.shape(value)[0]
    return g, handle, value, indices, updates, rows


def scatter_add(ref, indices, updates, use_locking=False, name=None):
    """TF 1.x's tf.scatter_add: ref[indices[i], ...] += updates[i, ...] (duplicates add up); evaluates to the
    variable's new value."""
    from .variables import assign_add
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_add")
    with g.as_default():
        delta = _tf.unsorted_segment_sum(updates, indices, rows)
        return assign_add(ref, delta, name=name or "ScatterAdd")


def scatter_sub(ref, indices, updates, use_locking=False, name=None):
    """TF 1.x's tf.scatter_sub: ref[indices[i], ...] -= updates[i, ...]; evaluates to the new value."""
    from .variables import assign_sub
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_sub")
    with g.as_default():
        delta = _tf.unsorted_segment_sum(updates, indices, rows)
        return assign_sub(ref, delta, name=name or "ScatterSub")


def scatter_update(ref, indices, updates, use_locking=True, name=None):
    """TF 1.x's tf.scatter_update: ref[indices[i], ...] = updates[i, ...] (the last of duplicate indices
    wins); evaluates to the variable's new value. It reads and assigns the whole variable."""
    from .variables import assign
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_update")
    with g.as_default(), g.name_scope(name or "ScatterUpdate"):
        flat_idx = _tf.reshape(indices, [-1])
        row_shape = _tf.shape(value)[1:]
        flat_upd = _tf.reshape(updates, _tf.concat([[-1], row_shape], 0))
        m = _tf.size(flat_idx)
        pos = _tf.range(m)
        # an update is kept when no later one names the same row
        same = _tf.equal(_tf.expand_dims(flat_idx, 1), _tf.expand_dims(flat_idx, 0))
        later = _tf.greater(_tf.expand_dims(pos, 0), _tf.expand_dims(pos, 1))
        kept = _tf.logical_not(_tf.reduce_any(_tf.logical_and(same, later), axis=1))
        kept_rows = _tf.reshape(kept, _tf.concat([_tf.stack([m]), _tf.ones_like(row_shape)], 0))
        kept_rows = _tf.logical_and(kept_rows, _tf.ones_like(flat_upd, name="ones") > 0)
        chosen = _tf.where(kept_rows, flat_upd, _tf.zeros_like(flat_upd))
        new_rows = _tf.unsorted_segment_sum(chosen, flat_idx, rows)
        hit = _tf.unsorted_segment_sum(_tf.ones_like(flat_idx, name="one"), flat_idx, rows) > 0
        hit = _tf.reshape(hit, _tf.concat([_tf.stack([rows]), _tf.ones_like(row_shape)], 0))
        hit = _tf.logical_and(hit, _tf.ones_like(value, name="ones") > 0)
        return assign(ref, _tf.where(hit, new_rows, value))
