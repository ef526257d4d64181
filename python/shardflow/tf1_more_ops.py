"""TF 1.x's tf.nn.top_k, tf.einsum and tf.scatter_update / scatter_add / scatter_sub on variables, composed
from shardflow's primitive ops (so they are differentiable where TF's are, through those ops' gradients).

- top_k(input, k, sorted=True): values in descending order along the last axis, the lower index first
  among equal values (TF's order). A Python int k: k passes of "take the largest, then mask it"; a tensor
  k: each entry's place in that order (a count over all pairs of the row, O(n^2)), then the first k places.
- einsum(equation, *inputs): with or without "->"; "..." stands for the same leading dims in every
  operand (right-aligned, a dim of 1 broadcast); an index repeated within one operand takes the diagonal
  (a mask of equal positions, summed over one of them). Two operands become one BatchMatMul (batch, free
  and summed indices moved into place by transposes and reshapes), one operand a sum and a transpose, more
  operands a chain of pairs.
- div, realdiv, truncatediv, truncatemod, mod, floor_div, div_no_nan: TF 1.x's division names on every
  integer dtype (int8, int16 and uint8 computed in int32, graph._small_int_op) and the floats.
- scatter_update / scatter_add / scatter_sub(ref, indices, updates): ref[indices[i], ...] = (+= / -=)
  updates[i, ...] on a variable. add and sub on a float32 matrix are one sparse update of the rows named,
  applied where the variable lives (the embedding tables' EmbeddingSparseApplyGradientDescent with a
  learning rate of -1 or 1: duplicates accumulate, as TF); on other variables one AssignAdd/AssignSub of
  the segment sums. update is one ResourceScatterUpdate: the variable's shard overwrites the rows named
  in place, as one update (a concurrent read sees all of it or none, as after TF's ScatterUpdate with
  use_locking), on a variable of any dtype and rank. With duplicate indices the last update wins (TF leaves that
  undefined). Each evaluates to the variable's new value.
"""

import builtins

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api as _tf

__all__ = ["top_k", "einsum", "scatter_update", "scatter_add", "scatter_sub", "div", "realdiv", "truncatediv",
           "truncatemod", "mod", "floor_div", "div_no_nan", "py_func", "py_function", "numpy_function"]


def _lowest(dtype):
    if dtype.is_floating:
        return _graph.constant(np.array(-np.inf, dtype.as_numpy_dtype))
    return _graph.constant(np.array(np.iinfo(dtype.as_numpy_dtype).min, dtype.as_numpy_dtype))


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002 - TensorFlow's names
    """(values, indices): the k largest entries of input's last axis, largest first (TF 1.x's tf.nn.top_k);
    InvalidArgumentError for k < 0 or k above a known row length, ValueError for a scalar input."""
    x = _graph.convert_to_tensor(input)
    if isinstance(k, _graph.Tensor):
        return _top_k_by_rank(x, k, name)
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


def _top_k_by_rank(x, k, name):
    """top_k for a tensor k (an int32 scalar known at run time): each entry's place in TF's order is the
    number of larger entries plus the number of equal ones before it; the first k places are gathered.
    A step with k < 0 or k above the row's length fails with InvalidArgumentError."""
    from .debugging import Assert
    if k.dtype != _dt.int32 or (k.shape.rank is not None and k.shape.rank != 0):
        raise TypeError(f"tf.nn.top_k: k must be an int32 scalar, got {k.dtype.name} of shape {k.shape}")
    if x.shape.rank == 0:
        raise ValueError("top_k needs an input of rank 1 or more")
    g = x.graph
    with g.as_default(), g.name_scope(name or "TopKV2"):
        n = _tf.shape(x)[-1]
        check = Assert(_tf.logical_and(_tf.greater_equal(k, 0), _tf.less_equal(k, n)),
                       ["input must have at least k columns and k >= 0: k =", k, "columns =", n])
        with _graph.control_dependencies([check]):
            k = _graph.identity(k)
        xi, xj = _tf.expand_dims(x, -1), _tf.expand_dims(x, -2)  # [..., n, 1], [..., 1, n]
        pos = _tf.range(n)
        before = _tf.less(_tf.expand_dims(pos, 0), _tf.expand_dims(pos, 1))  # [i, j]: j < i
        ahead = _tf.logical_or(_tf.greater(xj, xi), _tf.logical_and(_tf.equal(xj, xi), before))
        place = _tf.reduce_sum(_tf.cast(ahead, _dt.int32), axis=-1)  # [..., n]: a permutation of 0..n-1
        chosen = _tf.equal(_tf.expand_dims(place, -2), _tf.expand_dims(_tf.range(k), -1))  # [..., k, n]
        indices = _tf.argmax(_tf.cast(chosen, _dt.int32), axis=-1, output_type=_dt.int32)
        spread = _tf.zeros_like(_tf.cast(chosen, x.dtype))
        values = _tf.reduce_max(_tf.where(chosen, xj + spread, spread + _lowest(x.dtype)), axis=-1)
        return values, indices


# ---- einsum ------------------------------------------------------------------------------------

def _parse(equation, ranks):
    """(terms, out) with each "..." spelled as letters the equation does not use: the longest ellipsis gets
    them all, a shorter one the last of them (NumPy's right alignment). ranks: each input's rank."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"tf.einsum({equation!r}) has {len(terms)} operands in the equation but {len(ranks)} "
                         "inputs")
    for t in terms + [out]:
        if not t.replace("...", "").isalpha() and t.replace("...", ""):
            raise ValueError(f"tf.einsum({equation!r}): indices must be letters, with at most one ...")
        if t.count("...") > 1 or t.replace("...", "").count(".") > 0:
            raise ValueError(f"tf.einsum({equation!r}): an operand has a \".\" that is not one \"...\"")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    widths = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            w = r - (len(t) - 3)
            if w < 0:
                raise ValueError(f"tf.einsum({equation!r}): operand {t!r} names more dims than its rank {r}")
            widths.append(w)
    width = max(widths, default=0)
    ell = "".join(spare[:width])
    terms = [t.replace("...", ell[width - (r - (len(t) - 3)):]) if "..." in t else t for t, r in zip(terms, ranks)]
    if arrow:
        if "..." in out:
            out = out.replace("...", ell)
        elif ell and any(c in t for t in terms for c in ell):
            raise ValueError(f"tf.einsum({equation!r}): the output must have ... when an input has it")
        if len(set(out)) != len(out):
            raise ValueError(f"tf.einsum({equation!r}): an output index appears more than once")
    else:  # implicit output: the ellipsis dims, then the indices that appear once, in alphabetical order
        counts = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, m in counts.items() if m == 1 and c not in ell))
    for c in out:
        if not any(c in t for t in terms):
            raise ValueError(f"tf.einsum({equation!r}): output index {c!r} appears in no input")
    return terms, out, ell


def _diagonal(x, term):
    """x with every index repeated in term taken once (the diagonal: entries where the repeated positions
    are equal), and the term without the repeats."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p = term.index(c)
        q = term.index(c, p + 1)
        dims = _dims(x)
        n = dims[p]
        pos = _tf.range(n)
        eye = _tf.cast(_tf.equal(_tf.expand_dims(pos, 1), _tf.expand_dims(pos, 0)), x.dtype)
        eye = _reshape(eye, [n if i in (p, q) else 1 for i in builtins.range(len(term))])
        zeros = _tf.zeros_like(x)
        x = _tf.reduce_sum(_tf.where(_tf.greater(eye + zeros, zeros), x, zeros), axis=q)
        term = term[:q] + term[q + 1:]
    return x, term


def _squeeze_broadcast(xs, terms, ell):
    """Drops an ellipsis dim of static size 1 from an operand when another operand has that index with
    another size (NumPy's broadcasting of ... dims): it is summed away, being of size 1."""
    for c in ell:
        sizes = [x.shape[t.index(c)] for x, t in zip(xs, terms) if c in t]
        if all(s == 1 for s in sizes):
            continue
        for i, (x, t) in enumerate(zip(xs, terms)):
            if c in t and x.shape[t.index(c)] == 1:
                xs[i] = _tf.reduce_sum(x, axis=t.index(c))
                terms[i] = t.replace(c, "")
    return xs, terms


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
    """TF 1.x's tf.einsum: ellipses, implicit outputs and diagonals included; ValueError for an equation
    that does not fit the inputs, UnimplementedError for an input of unknown rank."""
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"einsum() got unexpected keyword arguments {sorted(kwargs)}")
    xs = [_graph.convert_to_tensor(x) for x in inputs]
    if not xs:
        raise ValueError("tf.einsum needs at least one input")
    for x in xs:
        if x.shape.rank is None:
            raise errors.UnimplementedError(f"tf.einsum({equation!r}) needs inputs of known rank")
    terms, out, ell = _parse(equation, [x.shape.rank for x in xs])
    for x, t in zip(xs, terms):
        if x.shape.rank != len(t):
            raise ValueError(f"tf.einsum({equation!r}): input of shape {x.shape} has rank {x.shape.rank}, but its "
                             f"indices {t!r} name {len(t)} dims")
    g = xs[0].graph
    with g.as_default(), g.name_scope(name or "einsum"):
        pairs = [_diagonal(x, t) for x, t in zip(xs, terms)]
        xs, terms = _squeeze_broadcast([p[0] for p in pairs], [p[1] for p in pairs], ell)
        acc, tacc = xs[0], terms[0]
        if len(xs) == 1:
            return _one(acc, tacc, out)
        for i in builtins.range(1, len(xs)):
            later = "".join(terms[i + 1:]) + out
            keep = "".join(dict.fromkeys(c for c in tacc + terms[i] if c in later))
            acc = _two(acc, tacc, xs[i], terms[i], keep)
            tacc = keep
        return _one(acc, tacc, out)


# ---- TF 1.x's division names ----------------------------------------------------------------------

def _pair(x, y, what):
    """x and y as tensors of one dtype (a Python value takes the other side's, as TF)."""
    if not isinstance(x, _graph.Tensor) and isinstance(y, _graph.Tensor):
        x = _graph.convert_to_tensor(x, dtype=y.dtype)
    x = _graph.convert_to_tensor(x)
    y = _graph.convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, _graph.Tensor) else y
    if x.dtype != y.dtype:
        raise TypeError(f"{what}: x is {x.dtype.name} but y is {y.dtype.name} (TF does not convert; cast one)")
    return x, y


def _named(t, name):
    return _graph.identity(t, name=name) if name else t


def div(x, y, name=None):
    """TF 1.x's tf.div (Python 2's /): floor division for integers, real division for floats; TypeError
    for mixed dtypes."""
    x, y = _pair(x, y, "tf.div")
    return _tf.floordiv(x, y, name=name) if x.dtype.is_integer else _named(x / y, name)


def realdiv(x, y, name=None):
    """TF 1.x's tf.realdiv: x / y for floats; TypeError for integers (TF has no integer RealDiv kernel)."""
    x, y = _pair(x, y, "tf.realdiv")
    if not x.dtype.is_floating:
        raise TypeError(f"tf.realdiv is for floats, got {x.dtype.name}: use tf.truediv (a float result), "
                        "tf.floordiv or tf.truncatediv")
    return _named(x / y, name)


def truncatediv(x, y, name=None):
    """TF 1.x's tf.truncatediv: integer division rounding toward zero (C's); TypeError for floats, as TF."""
    x, y = _pair(x, y, "tf.truncatediv")
    if not x.dtype.is_integer:
        raise TypeError(f"tf.truncatediv is for integers, got {x.dtype.name}: use tf.truediv or tf.floordiv")
    return _tf._truncate_div(x, y, name=name)


def truncatemod(x, y, name=None):
    """TF 1.x's tf.truncatemod: the remainder of truncating division, with x's sign (C's % and fmod):
    x - truncatediv(x, y) * y for integers, sign(x) * floormod(|x|, |y|) for floats (exactly fmod); TypeError
    for mixed dtypes."""
    x, y = _pair(x, y, "tf.truncatemod")
    with x.graph.as_default():
        if x.dtype.is_integer:
            return _named(x - _tf._truncate_div(x, y) * y, name)
        return _named(_tf.sign(x) * _tf.floormod(_tf.abs(x), _tf.abs(y)), name)


def mod(x, y, name=None):
    """TF 1.x's tf.mod (tf.floormod): the remainder takes y's sign, as Python's %; TypeError for mixed
    dtypes."""
    x, y = _pair(x, y, "tf.mod")
    return _tf.floormod(x, y, name=name)


def floor_div(x, y, name=None):
    """TF 1.x's tf.floor_div: x // y (floor division) on integers and floats; TypeError for mixed dtypes."""
    x, y = _pair(x, y, "tf.floor_div")
    return _tf.floordiv(x, y, name=name)


def div_no_nan(x, y, name=None):
    """TF 1.x's tf.div_no_nan: x / y, and 0 where y is 0; floats only (TypeError otherwise, as TF)."""
    x, y = _pair(x, y, "tf.div_no_nan")
    if not x.dtype.is_floating:
        raise TypeError(f"tf.div_no_nan is for floats, got {x.dtype.name}")
    with x.graph.as_default():
        zero = _tf.zeros_like(y)
        nonzero = _tf.not_equal(y, zero)
        safe = _tf.where(nonzero, y, _tf.ones_like(y))
        q = x / safe
        return _named(_tf.where(_tf.logical_and(nonzero, _tf.ones_like(q) > 0), q, _tf.zeros_like(q)), name)


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


def _beside(handle):
    """A device scope for the ops that take the variable's handle: the variable's own device (TF colocates them
    with the variable; a caller's scope naming another device would conflict with the handle's)."""
    return handle.graph.device(handle.op.device or "")


def _sparse_table(value):
    """The attributes that make a float32 matrix variable of static row count one table shard for the
    embedding ops (a sparse update or read of its rows where it lives), or None for other variables."""
    rows = value.shape[0]
    if value.dtype != _dt.float32 or value.shape.rank != 2 or rows is None:
        return None
    return {"table_rows": int(rows), "num_shards": 1, "shard": 0}


def _sparse_apply(handle, table, rows, grads, lr, name):
    """The op that makes rows -= lr * grads (int64 rows, float32 [n, dim]) where the variable lives, as one
    sparse update (EmbeddingSparseApplyGradientDescent; duplicate rows summed first)."""
    from . import ops
    return ops.add_op("EmbeddingSparseApplyGradientDescent", [handle, _graph.constant(np.float32(lr)), rows, grads],
                      dict(table, table=handle.op.get_attr("shared_name"), segments="rows"), name=name)


def _read_after(handle, dtype, ops_before):
    """A read of the variable's value that runs after ops_before."""
    from . import ops
    with _graph.control_dependencies(ops_before):
        return ops.add_op("ReadVariable", [handle], {"dtype": dtype}, name="read")


def _sparse_rows_add(g, handle, value, indices, updates, lr, name):
    """rows -= lr * updates at indices as one sparse update of only those rows (duplicates summed); lr is
    +-1, so each row changes by exactly +-updates. The variable's value read after it, or None for
    variables that are not float32 matrices of static row count."""
    table = _sparse_table(value)
    if table is None:
        return None
    with g.as_default(), g.name_scope(name):
        flat = _tf.reshape(_tf.cast(indices, _dt.int64), [-1])
        grads = _tf.reshape(updates, _tf.stack([_tf.size(flat), _tf.shape(value)[1]]))
        with _beside(handle):
            return _read_after(handle, value.dtype, [_sparse_apply(handle, table, flat, grads, lr, "SparseApply")])


def scatter_add(ref, indices, updates, use_locking=False, name=None):
    """TF 1.x's tf.scatter_add: ref[indices[i], ...] += updates[i, ...] (duplicates add up); evaluates to the
    variable's new value. A float32 matrix gets a sparse update of the rows named (atomic where the variable
    lives); other variables one AssignAdd of the whole delta. Raises what the ops raise on bad indices."""
    from .variables import assign_add
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_add")
    sparse = _sparse_rows_add(g, handle, value, indices, updates, -1.0, name or "ScatterAdd")
    if sparse is not None:
        return sparse
    with g.as_default():
        delta = _tf.unsorted_segment_sum(updates, indices, rows)
        return assign_add(ref, delta, name=name or "ScatterAdd")


def scatter_sub(ref, indices, updates, use_locking=False, name=None):
    """TF 1.x's tf.scatter_sub: ref[indices[i], ...] -= updates[i, ...]; evaluates to the new value (a sparse
    update of the rows for a float32 matrix, as scatter_add)."""
    from .variables import assign_sub
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_sub")
    sparse = _sparse_rows_add(g, handle, value, indices, updates, 1.0, name or "ScatterSub")
    if sparse is not None:
        return sparse
    with g.as_default():
        delta = _tf.unsorted_segment_sum(updates, indices, rows)
        return assign_sub(ref, delta, name=name or "ScatterSub")


def scatter_update(ref, indices, updates, use_locking=True, name=None):
    """TF 1.x's tf.scatter_update: ref[indices[i], ...] = updates[i, ...] (the last of duplicate indices
    wins); evaluates to the variable's new value. One ResourceScatterUpdate: the rows are overwritten where the
    variable lives, as one update (a concurrent read sees all of them or none), on a variable of any dtype
    and rank 1 or more. Raises TypeError for indices that are not int32 or int64, InvalidArgumentError when
    the updates' dtype or shape does not fit; a step with an index out of range fails with
    InvalidArgumentError naming the variable and the index, and writes nothing."""
    from . import ops
    g, handle, value, indices, updates, rows = _rows_and_value(ref, indices, updates, "tf.scatter_update")
    with g.as_default(), g.name_scope(name or "ScatterUpdate"), _beside(handle):
        put = ops.add_op("ResourceScatterUpdate", [handle, indices, updates], {}, name="put")
        return _read_after(handle, value.dtype, [put])


# ---- Python functions in the graph ----------------------------------------------------------------

def py_func(func, inp, Tout, stateful=True, name=None):  # noqa: N803 - TensorFlow's names
    """TF 1.x's tf.py_func: raises UnimplementedError naming what to use instead."""
    raise errors.UnimplementedError(
        "tf.py_func (and tf.py_function, tf.numpy_function) is not supported: shardflow runs its graphs in C++ "
        "and never calls back into Python during a step. Run the Python code between steps and feed its result "
        "through a tf.placeholder, or produce input elements with tf.data.Dataset.from_generator")


py_function = numpy_function = py_func
