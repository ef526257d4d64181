"""TF 1.x's tf.data: Dataset.from_tensor_slices / from_tensors / range / from_generator, map, filter,
shuffle, repeat, take, batch, padded_batch, zip, flat_map, interleave, prefetch, and one-shot or
initializable iterators.

    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.map(lambda x, y: (x / 255.0, y)).shuffle(1000, seed=1).repeat(2).batch(32)
    next_x, next_y = dataset.make_one_shot_iterator().get_next()
    while True:
        try:
            sess.run(train, {x: sess.run(next_x), ...})   # or train on next_x directly
        except tf.errors.OutOfRangeError:
            break

A Dataset only describes the pipeline. Making an iterator builds it into the
graph as a small state machine over items (the indices of the source tensors'
rows, or a generator's elements): every run of get_next() takes the
iterator's state (the captured tensors, positions, the shuffle buffer, the
open datasets of flat_map and interleave) from a one-element queue of the
session, computes the next element, and puts the new state back, so
concurrent runs of get_next() take turns and each session has its own
iterator. Elements are made only when they come out or a stage needs them:
map's function is built once into the graph (TF 1.x's graph-mode map) and runs
on each element as it is produced; flat_map's and interleave's functions
build their datasets from the element where the machine needs them.

The meanings are TF 1.x's: shuffle keeps a buffer of buffer_size elements and
gives a uniformly chosen one of them each time (refilling from its input), so
a buffer smaller than the data mixes only locally; repeat after shuffle
reshuffles each epoch; batch gives a smaller final batch unless
drop_remainder; padded_batch pads to the longest element of the batch or to
padded_shapes; zip ends with its shortest input; interleave follows TF's
InterleaveDataset; the end of the data raises tf.errors.OutOfRangeError,
again on every later run. The random streams are not TensorFlow's: a seed (or
none, which here also gives a repeatable order) fixes the order, not TF's
order.

from_generator runs its generator on the host, not in the graph: for each
session that runs the graph a thread of this process calls the generator and
feeds its elements into a queue of two by steps of that session (_HostFeeder),
and the machine takes them from there.

Differences, each refused by name or documented here: no file datasets
(shardflow has no string tensors; Criteo-format files come from
sf.ops.criteo_reader, or shared among workers from sf.data.shared_criteo_batch_queue,
shared_input.py); shuffle(reshuffle_each_iteration=False) is refused;
from_generator without output_shapes gives elements of unknown shape, which
get_next and map take but batch, padded_batch and shuffle refuse (they need
each component's rank); a repeat after it calls the generator again for each
epoch (a repeat of a from_generator dataset applies to every pipeline that
reads that dataset, as they share its host thread);
get_next() on an initializable iterator whose initializer has not run raises
UnavailableError naming the node "GetNext_before_the_iterator_initializer_ran"
(TF raises FailedPreconditionError).
"""

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api as _tf
from .control_flow import cond, while_loop
from .queues import FIFOQueue
from .shared_input import (CriteoChunkPlan, SharedCriteoInput, plan_criteo_chunks, chunk_queue,  # noqa: F401
                           shared_criteo_batch_queue, is_lost_chunk, is_moved)

import atexit as _atexit
import weakref as _weakref

_LIVE_FEEDERS = _weakref.WeakSet()  # every from_generator dataset, for _stop_live_feeders at exit

__all__ = ["Dataset", "Iterator", "CriteoChunkPlan", "SharedCriteoInput", "plan_criteo_chunks", "chunk_queue",
           "shared_criteo_batch_queue", "is_lost_chunk", "is_moved"]

_I32 = _dt.int32


# ---- element structures (a Tensor, a tuple or a dict of them, nested) -----------------------

def _flatten(s):
    if isinstance(s, dict):
        return [x for k in sorted(s) for x in _flatten(s[k])]
    if isinstance(s, tuple):
        return [x for v in s for x in _flatten(v)]
    return [s]


def _pack(structure, flat):
    flat = list(flat)

    def pack(s):
        if isinstance(s, dict):
            return {k: pack(s[k]) for k in sorted(s)}
        if isinstance(s, tuple):
            return tuple(pack(v) for v in s)
        return flat.pop(0)
    return pack(structure)


def _as_structure(value):
    """TF 1.x's rule: a tuple or dict is a structure; anything else (a list too) is one tensor."""
    if isinstance(value, dict):
        return {k: _as_structure(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_as_structure(v) for v in value)
    return _graph.convert_to_tensor(value)


def _call(fn, element):
    out = fn(*element) if isinstance(element, tuple) else fn(element)
    if isinstance(out, list):
        out = tuple(out)
    return _as_structure(out)


def _with_shape(t, dims):
    """t reshaped to dims (None: unknown), so static shapes show: all of them when at most one is unknown,
    else the rank."""
    if dims is None or (t.shape.rank is not None and list(t.shape.dims) == list(dims)):
        return t
    if sum(d is None for d in dims) > 1:
        if t.shape.rank is not None:
            return t
        shape = _tf.shape(t)
        return _tf.reshape(t, _tf.stack([shape[i] for i in range(len(dims))]))
    return _tf.reshape(t, [-1 if d is None else int(d) for d in dims])


def _at(values, k, item, count):
    """values with row k replaced by item (rows of a fixed-size buffer; k an int32 scalar)."""
    if values.dtype in (_dt.bool_, _dt.int8, _dt.int16, _dt.uint8):  # no arithmetic kernels: via int32, exactly
        return _tf.cast(_at(_tf.cast(values, _I32), k, _tf.cast(item, _I32), count), values.dtype)
    hit = _tf.equal(_tf.range(count), k)
    for _ in range(values.shape.rank - 1):
        hit = _tf.expand_dims(hit, -1)
    return _tf.where(_tf.logical_and(hit, _tf.ones_like(values, name="ones") > 0),
                     _tf.expand_dims(item, 0) + _tf.zeros_like(values), values)


# ---- the index machines: each stage turns its state into (has, item, new state) -------------
#
# An item is a list of tensors (spec() gives their shapes and dtypes): for in-memory sources the indices
# of rows, for a generator the element's values. element(ctx, item) builds the element an item stands
# for (gathering rows, calling map functions); it runs only when an element comes out, or when a stage
# needs its value (filter, padded_batch, flat_map). ctx says where each source's tensors are.

def _zeros(shape, dtype, keep_static=True):
    """Zeros of shape; None dims are 0, and then the static shape hides them (None), so that a loop or a
    cond may give the same variable another size; the other dims stay static unless keep_static is False.
    A shape of None (unknown rank): a scalar zero whose static rank is unknown."""
    if shape is None:
        zero = _tf.size(_tf.zeros([0], _I32))
        return _tf.reshape(_tf.zeros([1], dtype), _tf.fill(_tf.stack([zero]), 1))
    dims = list(shape)
    if all(d is not None for d in dims):
        return _tf.zeros(dims, dtype)
    zero = _tf.size(_tf.zeros([0], _I32))  # 0, not a constant: the dims stay unknown statically
    t = _tf.fill(_tf.stack([zero + (0 if d is None else int(d)) for d in dims]),
                 _graph.constant(np.zeros((), _dt.as_dtype(dtype).as_numpy_dtype)))
    return _with_shape(t, dims) if keep_static else t


def _empty(dims, dtype):
    """No rows of elements of shape dims (None: unknown): [0] + dims with the row count unknown statically,
    the start of a batch that grows in a loop."""
    dims = list(dims)
    t = _zeros([None] + [0 if d is None else d for d in dims], dtype, keep_static=False)
    return _with_shape(t, [None] + dims) if all(d is not None for d in dims) else t


def _known_rank(stage, what):
    """Raises UnimplementedError when an element component of stage has no known rank (a from_generator
    without output_shapes), naming what and output_shapes."""
    if any(shape is None for shape, _ in stage.spec()):
        raise errors.UnimplementedError(
            f"{what} needs elements of known rank: give Dataset.from_generator its output_shapes (each "
            "component's rank at least, e.g. [None] for vectors of any length)")


def _static_spec(stage, what):
    _known_rank(stage, what)
    for shape, _ in stage.spec():
        if any(d is None for d in shape):
            raise errors.UnimplementedError(
                f"{what} needs elements of static shape here (got {shape}); give from_generator fully defined "
                "output_shapes, or use padded_batch")


class _Stage:
    """A stage that passes its input's items through (the defaults)."""

    batchable = property(lambda self: self.up.batchable)

    def sources(self):
        return self.up.sources()

    def spec(self):
        return self.up.spec()

    def initial(self):
        return self.up.initial()

    def element(self, ctx, item, batched=False):
        return self.up.element(ctx, item, batched)


class _Source(_Stage):
    """Items are the indices 0..N-1 of the tensors' rows."""

    batchable = True

    def __init__(self, data, structure):
        self.data, self.structure = data, structure

    def sources(self):
        return [self]

    def spec(self):
        return [([], _I32)]

    def initial(self):
        return [_graph.constant(0)]

    def pull(self, ctx, state):
        (pos,) = state
        has = pos < ctx.rows(self)
        return has, [pos], [pos + _tf.cast(has, _I32)]

    def element(self, ctx, item, batched=False):
        out = []
        for d, orig in zip(ctx.data(self), self.data):
            dims = None if orig.shape.rank is None else list(orig.shape.dims[1:])
            out.append(_with_shape(_tf.gather(d, item[0]), None if dims is None else ([None] if batched else []) + dims))
        return _pack(self.structure, out)


class _Map(_Stage):
    batchable = False

    def __init__(self, up, fn):
        self.up, self.fn = up, fn

    def pull(self, ctx, state):
        return self.up.pull(ctx, state)

    def element(self, ctx, item, batched=False):
        return _call(self.fn, self.up.element(ctx, item))


class _Repeat(_Stage):
    def __init__(self, up, count):
        self.up, self.count = up, count
        for src in up.sources():
            if isinstance(src, _GeneratorSource):  # its host thread calls the generator once per epoch
                src.feeder.repeat(count)

    def initial(self):
        return [_graph.constant(0)] + self.up.initial()

    def pull(self, ctx, state):
        epoch, us = state[0], state[1:]
        has, item, us1 = self.up.pull(ctx, us)
        n_item = len(item)

        def again():
            h2, it2, us2 = self.up.pull(ctx, self.up.initial())
            return [h2] + it2 + us2 + [epoch + 1]

        def keep():
            return [has] + item + us1 + [epoch]

        more = _tf.logical_not(has)
        if isinstance(self.count, _graph.Tensor):  # a count known at run time (-1: forever)
            more = _tf.logical_and(more, _tf.logical_or(self.count < 0, epoch + 1 < self.count))
        elif self.count >= 0:
            more = _tf.logical_and(more, epoch + 1 < self.count)
        out = cond(more, again, keep)
        has = out[0]
        if isinstance(self.count, _graph.Tensor):
            has = _tf.logical_and(has, _tf.not_equal(self.count, 0))  # repeat(0): nothing
        elif self.count == 0:
            has = _graph.constant(False)
        return has, out[1:1 + n_item], [out[-1]] + list(out[1 + n_item:-1])


class _Take(_Stage):
    def __init__(self, up, count):
        self.up, self.count = up, count

    def initial(self):
        return [_graph.constant(0)] + self.up.initial()

    def pull(self, ctx, state):
        taken, us = state[0], state[1:]
        n_item = len(self.spec())

        def pull_up():
            h, it, us1 = self.up.pull(ctx, us)
            return [h] + it + us1 + [taken + _tf.cast(h, _I32)]

        def stop():
            zeros = [_zeros(shape, dtype) for shape, dtype in self.spec()]
            return [_graph.constant(False)] + zeros + list(us) + [taken]

        if isinstance(self.count, _graph.Tensor):  # a count known at run time (-1: all)
            out = cond(_tf.logical_or(self.count < 0, taken < self.count), pull_up, stop)
            return out[0], out[1:1 + n_item], [out[-1]] + list(out[1 + n_item:-1])
        if self.count < 0:
            h, it, us1 = self.up.pull(ctx, us)
            return h, it, [taken] + us1
        out = cond(taken < self.count, pull_up, stop)
        return out[0], out[1:1 + n_item], [out[-1]] + list(out[1 + n_item:-1])


class _Shuffle(_Stage):
    """TF's buffered shuffle: fill the buffer (buffer_size items) from the input, give a uniformly
    chosen item of it, and put the last buffered item in its place."""

    def __init__(self, up, size, seed):
        self.up, self.size, self.seed = up, size, seed
        _static_spec(up, "shuffle")

    def initial(self):
        bufs = [_tf.zeros([self.size] + list(shape), dtype) for shape, dtype in self.spec()]
        return bufs + [_graph.constant(0), _graph.constant(False)] + self.up.initial()

    def pull(self, ctx, state):
        nb = len(self.spec())
        bufs, count, done, us = list(state[:nb]), state[nb], state[nb + 1], list(state[nb + 2:])

        def more(count, done, *rest):
            return _tf.logical_and(count < self.size, _tf.logical_not(done))

        def fill(count, done, *rest):
            bs, u = list(rest[:nb]), list(rest[nb:])
            h, it, u1 = self.up.pull(ctx, u)
            k = _tf.where(h, count, _graph.constant(-1))  # -1 matches no row: nothing written
            bs = [_at(b, k, x, self.size) for b, x in zip(bs, it)]
            return [count + _tf.cast(h, _I32), _tf.logical_not(h)] + bs + u1

        res = while_loop(more, fill, [count, done] + bufs + us)
        count, done, bufs, us = res[0], res[1], list(res[2:2 + nb]), list(res[2 + nb:])
        has = count > 0
        u = _tf.random_uniform([], seed=self.seed)
        pick = _tf.minimum(_tf.cast(u * _tf.cast(count, _dt.float32), _I32), _tf.maximum(count - 1, 0))
        last = _tf.maximum(count - 1, 0)
        item = [_tf.gather(b, pick) for b in bufs]
        bufs = [_at(b, pick, _tf.gather(b, last), self.size) for b in bufs]
        return has, item, bufs + [count - _tf.cast(has, _I32), done] + us


class _Filter(_Stage):
    """The input's items whose element satisfies the predicate: pulls from the input until one does or
    the input ends."""

    def __init__(self, up, predicate):
        self.up, self.predicate = up, predicate

    def pull(self, ctx, state):
        n_item = len(self.spec())

        def more(found, done, *rest):
            return _tf.logical_and(_tf.logical_not(found), _tf.logical_not(done))

        def step(found, done, *rest):
            h, it, u1 = self.up.pull(ctx, list(rest[n_item:]))
            ok = cond(h, lambda: self._keep(ctx, it), lambda: _graph.constant(False))
            return [ok, _tf.logical_not(h)] + list(it) + list(u1)

        zeros = [_zeros(shape, dtype) for shape, dtype in self.spec()]
        res = while_loop(more, step, [_graph.constant(False), _graph.constant(False)] + zeros + list(state))
        return res[0], list(res[2:2 + n_item]), list(res[2 + n_item:])

    def _keep(self, ctx, item):
        out = _call(self.predicate, self.up.element(ctx, item))
        if not isinstance(out, _graph.Tensor) or out.dtype != _dt.bool_ or out.shape.rank not in (0, None):
            raise ValueError(f"`predicate` must return a scalar boolean tensor, got {out!r}")
        return out


class _Zip(_Stage):
    """Items of every input side by side; ends when the first input ends (TF's zip)."""

    def __init__(self, ups, structure):
        self.ups, self.structure = ups, structure  # structure: a tuple or dict of indices into ups

    batchable = property(lambda self: all(u.batchable for u in self.ups))

    def sources(self):
        out = []
        for u in self.ups:
            out.extend(s for s in u.sources() if all(s is not o for o in out))
        return out

    def spec(self):
        return [x for u in self.ups for x in u.spec()]

    def _split(self, flat, of):
        out, i = [], 0
        for u in self.ups:
            n = len(of(u))
            out.append(list(flat[i:i + n]))
            i += n
        return out

    def initial(self):
        return [x for u in self.ups for x in u.initial()]

    def pull(self, ctx, state):
        has, items, states = None, [], []
        for u, st in zip(self.ups, self._split(state, lambda u: u.initial())):
            h, it, st1 = u.pull(ctx, st)
            has = h if has is None else _tf.logical_and(has, h)
            items.extend(it)
            states.extend(st1)
        return has, items, states

    def element(self, ctx, item, batched=False):
        parts = [u.element(ctx, it, batched) for u, it in zip(self.ups, self._split(item, lambda u: u.spec()))]
        return _pack(self.structure, [parts[i] for i in _flatten(self.structure)])


def _call_dataset(fn, element, what):
    out = fn(*element) if isinstance(element, tuple) else fn(element)
    if not isinstance(out, Dataset):
        raise TypeError(f"`map_func` of {what} must return a tf.data.Dataset, got {type(out).__name__}")
    for s in out._stage.sources():
        if not isinstance(s, _Source):
            raise errors.UnimplementedError(f"{what}: the datasets map_func returns must be made of tensors "
                                            "(from_tensor_slices, from_tensors, range), not from_generator")
    return out


class _FlatMap(_Stage):
    """Each input element's dataset (map_func's), one after another: the state holds the current input item
    and its dataset's state; the dataset is rebuilt from the item wherever it is needed."""

    batchable = False

    def __init__(self, up, fn, what="flat_map"):
        self.up, self.fn, self.what = up, fn, what
        # the inner datasets' item and state layout, from one built here (never run); every stage starts
        # from zeros, so zeros of that layout start an inner dataset
        probe = self._inner(_Context(), [_zeros(s, d) for s, d in up.spec()])
        self.inner_spec = probe._stage.spec()
        self.inner_state = [(list(t.shape.dims), t.dtype) for t in probe._stage.initial()]

    def _inner(self, ctx, outer_item):
        return _call_dataset(self.fn, self.up.element(ctx, outer_item), self.what)

    def spec(self):
        return self.up.spec() + self.inner_spec

    def initial(self):
        return ([_graph.constant(False)] + [_zeros(s, d) for s, d in self.up.spec()] +
                [_zeros(s, d) for s, d in self.inner_state] + self.up.initial())

    def _layout(self, flat):
        n_out, n_in = len(self.up.spec()), len(self.inner_state)
        return flat[0], list(flat[1:1 + n_out]), list(flat[1 + n_out:1 + n_out + n_in]), list(flat[1 + n_out + n_in:])

    def pull(self, ctx, state):
        n_item = len(self.inner_spec)

        def more(found, done, *rest):
            return _tf.logical_and(_tf.logical_not(found), _tf.logical_not(done))

        def body(found, done, *rest):
            active, outer, inner_st, up_st = self._layout(list(rest[n_item:]))

            def step():  # the next element of the current input element's dataset
                inner = self._inner(ctx, outer)
                h, it, st1 = inner._stage.pull(ctx, inner_st)
                return [h, _graph.constant(False)] + list(it) + [h] + outer + list(st1) + up_st

            def start():  # the next input element, and its dataset from the start
                h, it, up1 = self.up.pull(ctx, up_st)
                inner0 = [_zeros(s, d) for s, d in self.inner_state]
                zeros = [_zeros(s, d) for s, d in self.inner_spec]
                return [_graph.constant(False), _tf.logical_not(h)] + zeros + [h] + list(it) + inner0 + list(up1)

            out = cond(active, step, start)
            return out

        zeros = [_zeros(s, d) for s, d in self.inner_spec]
        res = while_loop(more, body, [_graph.constant(False), _graph.constant(False)] + zeros + list(state))
        found, item = res[0], list(res[2:2 + n_item])
        active, outer, inner_st, up_st = self._layout(list(res[2 + n_item:]))
        return found, outer + item, [active] + outer + inner_st + up_st

    def element(self, ctx, item, batched=False):
        n_out = len(self.up.spec())
        inner = self._inner(ctx, list(item[:n_out]))
        return inner._stage.element(ctx, list(item[n_out:]))


class _Batch(_Stage):
    """batch_size consecutive elements stacked; padded_shapes given: padded_batch.

    Items whose shapes are static are kept (batch_size of each) and the elements made when the batch
    comes out: rows gathered at once when the input is rows, else one element after another. Otherwise
    (padded_batch, or a generator's elements of unknown shape) each element is made as it is pulled and
    appended to the batch, which grows to the largest element (padded) as it goes."""

    batchable = False

    def __init__(self, up, size, drop_remainder, padded_shapes=None, padding_values=None, structure=None):
        self.up, self.size, self.drop = up, size, drop_remainder
        _known_rank(up, "padded_batch" if padded_shapes is not None else "batch")
        self.padded = padded_shapes is not None
        self.eager = self.padded or any(d is None for s, _ in up.spec() for d in s)
        probe = up.element(_Context(), [_zeros(s, d) for s, d in up.spec()])  # for shapes and types only
        self.structure = probe
        flat = _flatten(probe)
        pads = [None] * len(flat)
        if self.padded:
            pads = _flatten_like(probe, padded_shapes, "padded_shapes")
            pads = [_padded_dims(p, t) for p, t in zip(pads, flat)]
        self.components = [(p, None if t.shape.rank is None else list(t.shape.dims), t.dtype)
                           for p, t in zip(pads, flat)]
        for p, shape, _ in self.components:
            if shape is None:
                raise errors.UnimplementedError("batch needs elements of known rank")
        values = [0] * len(flat) if padding_values is None else _flatten_like(probe, padding_values, "padding_values")
        self.padding_values = values

    def spec(self):
        if self.eager:
            return [([None] + ([None] * len(p) if p is not None else list(s)), d)
                    for (p, s, d) in self._components()] + [([], _I32)]
        return [([self.size] + list(s), d) for s, d in self.up.spec()] + [([], _I32)]

    def _components(self):
        """(padded shape or None, element shape, dtype) of each flat component of the element."""
        return self.components

    def initial(self):
        return self.up.initial()

    def pull(self, ctx, state):
        if self.eager:
            return self._pull_eager(ctx, state)

        def more(k, done, *rest):
            return _tf.logical_and(k < self.size, _tf.logical_not(done))

        nb = len(self.up.spec())

        def take(k, done, *rest):
            bufs, u = list(rest[:nb]), list(rest[nb:])
            h, it, u1 = self.up.pull(ctx, u)
            bufs = [_at(b, _tf.where(h, k, _graph.constant(-1)), x, self.size) for b, x in zip(bufs, it)]
            return [k + _tf.cast(h, _I32), _tf.logical_not(h)] + bufs + u1

        bufs = [_tf.zeros([self.size] + list(s), d) for s, d in self.up.spec()]
        res = while_loop(more, take, [_graph.constant(0), _graph.constant(False)] + bufs + list(state))
        k, bufs, us = res[0], list(res[2:2 + nb]), list(res[2 + nb:])
        has = _tf.equal(k, self.size) if self.drop else k > 0
        return has, bufs + [k], us

    def _pull_eager(self, ctx, state):
        comps = self._components()
        nc = len(comps)

        def more(k, done, *rest):
            return _tf.logical_and(k < self.size, _tf.logical_not(done))

        def take(k, done, *rest):
            accs, u = list(rest[:nc]), list(rest[nc:])
            h, it, u1 = self.up.pull(ctx, u)

            def add():
                one = _flatten(self.up.element(ctx, it))
                return [self._append(acc, x, c, i) for i, (acc, x, c) in enumerate(zip(accs, one, comps))]

            accs = cond(h, add, lambda: list(accs)) if accs else []
            accs = accs if isinstance(accs, list) else [accs]
            return [k + _tf.cast(h, _I32), _tf.logical_not(h)] + accs + u1

        accs = [_empty([None] * len(p) if p is not None else s, d) for p, s, d in comps]
        res = while_loop(more, take, [_graph.constant(0), _graph.constant(False)] + accs + list(state))
        k, accs, us = res[0], list(res[2:2 + nc]), list(res[2 + nc:])
        if self.padded:
            # dims padded_shapes fixes are that size even when every element is shorter
            accs = [self._pad_to(a, [None] + list(c[0]), i) for i, (a, c) in enumerate(zip(accs, comps))]
        has = _tf.equal(k, self.size) if self.drop else k > 0
        return has, accs + [k], us

    def _pad_value(self, i, dtype):
        v = self.padding_values[i]
        if isinstance(v, _graph.Tensor):
            return v if v.dtype == dtype else _tf.cast(v, dtype)
        return _graph.constant(np.asarray(v, dtype.as_numpy_dtype))

    def _pad_to(self, x, dims, i):
        """x padded at the end of each axis to dims (a list of int, None for x's own size, or scalar tensors)."""
        value = self._pad_value(i, x.dtype)
        shape = _tf.shape(x)
        for a, want in enumerate(dims):
            if want is None:
                continue
            need = want - shape[a]
            check = _assert_not_negative(need)
            with _graph.control_dependencies([check]):
                pad_shape = _tf.stack([need if j == a else shape[j] for j in range(len(dims))])
                x = _tf.concat([x, _tf.fill(pad_shape, value)], a)
            shape = _tf.shape(x)
        return x

    def _append(self, acc, x, comp, i):
        padded, _, _ = comp
        if padded is None:
            return _stack_onto(acc, x, _tf.shape(acc)[0])
        x = _tf.expand_dims(x, 0)
        sa, sx = _tf.shape(acc), _tf.shape(x)
        dims = [None]
        for a, p in enumerate(padded):
            if p is None:
                dims.append(_tf.maximum(sa[a + 1], sx[a + 1]))
            else:
                dims.append(int(p))
        return _tf.concat([self._pad_to(acc, dims, i), self._pad_to(x, dims, i)], 0)

    def element(self, ctx, item, batched=False):
        bufs, k = list(item[:-1]), item[-1]
        if self.eager:
            size = self.size if self.drop else None
            element = _pack(self.structure, [_with_shape(b, [size] + (p if p is not None else s))
                                             for b, (p, s, _) in zip(bufs, self._components())])
        elif self.up.batchable:
            element = self.up.element(ctx, [_tf.gather(b, _tf.range(k)) for b in bufs], batched=True)
        else:
            element = self._stack(ctx, bufs, k)
        if self.drop and not self.eager:  # every batch is full: its size is static, as in TF
            element = _pack(element, [_with_shape(t, None if t.shape.rank is None else [self.size] + list(t.shape.dims[1:]))
                                      for t in _flatten(element)])
        return element

    def _stack(self, ctx, bufs, k):
        """Each of the batch's elements made (in a loop: a map function takes one element), then stacked."""
        structure = self.structure
        accs = [_empty(s, d) for _, s, d in self._components()]

        def more(j, *a):
            return j < k

        def body(j, *a):
            one = _flatten(self.up.element(ctx, [_tf.gather(b, j) for b in bufs]))
            return [j + 1] + [_stack_onto(acc, x, j) for acc, x in zip(a, one)]

        res = while_loop(more, body, [_graph.constant(0)] + accs)
        return _pack(structure, [_with_shape(r, [None] + list(s)) if all(d is not None for d in s) else r
                                 for r, (_, s, _) in zip(res[1:], self._components())])


def _stack_onto(acc, x, rows):
    """acc (rows elements so far) with x appended as its last row; the first row sets the shape when the
    elements' shape is not known statically."""
    one = _tf.expand_dims(x, 0)
    if all(d is not None for d in (acc.shape.dims or [None])[1:]) and acc.shape.rank is not None:
        return _tf.concat([acc, one], 0)
    return cond(_tf.equal(rows, 0), lambda: one, lambda: _tf.concat([acc, one], 0))


def _assert_not_negative(need):
    from .debugging import Assert
    return Assert(need >= 0, ["Attempted to pad to a smaller size than the input element."])


def _flatten_like(structure, value, what):
    """value (a structure matching structure's, a list or TensorShape being one leaf) flattened."""
    if isinstance(structure, dict):
        if not isinstance(value, dict) or set(value) != set(structure):
            raise ValueError(f"{what} must have the structure of the elements (keys {sorted(structure)})")
        return [x for k in sorted(structure) for x in _flatten_like(structure[k], value[k], what)]
    if isinstance(structure, tuple):
        if not isinstance(value, tuple) or len(value) != len(structure):
            raise ValueError(f"{what} must have the structure of the elements (a tuple of {len(structure)})")
        return [x for s, v in zip(structure, value) for x in _flatten_like(s, v, what)]
    return [value]


def _padded_dims(p, t):
    """A padded shape (list, TensorShape, or a rank-1 int tensor-like) as a list of int and None (-1: None)."""
    dims = _graph.TensorShape(p).dims if not isinstance(p, _graph.TensorShape) else p.dims
    if dims is None:
        raise ValueError("padded_shapes entries must have a known rank")
    dims = [None if d is None or int(d) < 0 else int(d) for d in dims]
    if t.shape.rank is not None and len(dims) != t.shape.rank:
        raise ValueError(f"The padded shape {dims} is not compatible with the corresponding input component shape "
                         f"{t.shape}")
    for d, e in zip(dims, t.shape.dims or []):
        if d is not None and e is not None and d < e:
            raise ValueError(f"The padded shape {dims} is not compatible with the corresponding input component "
                             f"shape {t.shape}")
    return dims


class _GeneratorSource(_Stage):
    """A Python generator's elements, which a thread of the host puts in a queue for each session
    (_HostFeeder): items are the elements' values; the end comes as an element marked as the end. Each run
    of the generator in a session is a generation (0 for a one-shot iterator, one more at each run of an
    initializable iterator's initializer); the state names the generation it reads and elements of
    others (the rest of an earlier run) are passed over."""

    batchable = False

    def __init__(self, feeder, structure, shapes, dtypes):
        self.feeder, self.structure, self.shapes, self.dtypes = feeder, structure, shapes, dtypes

    def sources(self):
        return [self]

    def spec(self):
        return [(s, d) for s, d in zip(self.shapes, self.dtypes)]

    def initial(self):
        return [_graph.constant(False), self.feeder.generation]

    def pull(self, ctx, state):
        done, gen = state
        q = self.feeder.queue
        n = len(self.shapes)

        def get():
            def more(found, *rest):
                return _tf.logical_not(found)

            def body(found, *rest):
                vals = q.dequeue(name="from_generator")
                vals = vals if isinstance(vals, list) else [vals]
                comps = [_with_shape(v, s) for v, s in zip(vals[:n], self.shapes)]
                return [_tf.equal(vals[n + 2], gen)] + comps + [vals[n], vals[n + 1]]

            zeros = [_zeros(s, d) for s, d in self.spec()]
            res = while_loop(more, body, [_graph.constant(False)] + zeros + [_graph.constant(False)] * 2)
            comps, end, error = list(res[1:1 + n]), res[1 + n], res[2 + n]
            from .debugging import Assert
            ok = Assert(_tf.logical_not(error), [
                "from_generator: the generator raised or gave an element that does not match output_types and "
                "output_shapes (the traceback is in the log of the process that ran get_next)"])
            with _graph.control_dependencies([ok]):
                end = _graph.identity(end)
            return [_tf.logical_not(end)] + comps + [end]

        def ended():
            return [_graph.constant(False)] + [_zeros(s, d) for s, d in self.spec()] + [_graph.constant(True)]

        out = cond(done, ended, get)
        return out[0], list(out[1:1 + n]), [out[-1], gen]

    def element(self, ctx, item, batched=False):
        return _pack(self.structure, list(item))


# ---- Dataset -------------------------------------------------------------------------------

class Dataset:
    """A description of an input pipeline (TF 1.x's tf.data.Dataset): tensors or a Python generator, and
    the stages after them."""

    def __init__(self, stage):
        self._stage = stage

    @staticmethod
    def from_tensor_slices(tensors):
        """The rows (slices along dimension 0) of tensors, one element each; every component must have
        the same size along dimension 0."""
        structure = _as_structure(tensors)
        flat = _flatten(structure)
        if any(t.shape.rank == 0 for t in flat):
            raise ValueError("from_tensor_slices needs tensors of rank 1 or more")
        sizes = {t.shape[0] for t in flat if t.shape.rank is not None and t.shape[0] is not None}
        if len(sizes) > 1:
            raise ValueError(f"Dimensions {sorted(sizes)} in from_tensor_slices' components are not equal")
        return Dataset(_Source(flat, structure))

    @staticmethod
    def from_tensors(tensors):
        """tensors as one element."""
        structure = _as_structure(tensors)
        flat = [_tf.expand_dims(t, 0) for t in _flatten(structure)]
        return Dataset(_Source(flat, structure))

    @staticmethod
    def range(*args):
        """int64 elements start, start + step, ... below stop: range(stop), range(start, stop[, step])."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"Dataset.range takes 1 to 3 arguments, got {len(args)}")
        if any(isinstance(a, _graph.Tensor) for a in args):  # bounds known at run time (inside flat_map)
            full = (0,) + tuple(args) + (1,) if len(args) == 1 else tuple(args) + ((1,) if len(args) == 2 else ())
            start, stop, step = [a if isinstance(a, _graph.Tensor) and a.dtype == _dt.int64
                                 else _tf.cast(a, _dt.int64) if isinstance(a, _graph.Tensor)
                                 else _graph.constant(np.int64(a)) for a in full]
            return Dataset.from_tensor_slices(_tf.range(start, stop, step, dtype=_dt.int64))
        return Dataset.from_tensor_slices(np.arange(*[int(a) for a in args], dtype=np.int64))

    @staticmethod
    def zip(datasets):
        """Elements of the datasets side by side, in datasets' structure (a tuple or dict of Datasets,
        nested); it ends with the shortest."""
        flat = _flatten_datasets(datasets)
        if not flat:
            raise ValueError("Dataset.zip needs at least one dataset")
        for d in flat:
            if not isinstance(d, Dataset):
                raise TypeError(f"Dataset.zip takes a tuple or dict of Datasets, got a {type(d).__name__} in it")
        index = iter(range(len(flat)))
        structure = _map_structure(datasets, lambda d: next(index))
        return Dataset(_Zip([d._stage for d in flat], structure))

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None):
        """The elements a Python generator yields (generator(*args) is called for each session that runs the
        iterator, from a thread of this process that feeds them to the graph: see _HostFeeder), converted to
        output_types and checked against output_shapes."""
        if not callable(generator):
            raise TypeError("`generator` must be callable.")
        types = _map_structure(output_types, _dt.as_dtype, leaf=lambda x: not isinstance(x, (tuple, dict)))
        flat_types = _flatten(types)
        if output_shapes is None:  # TF's unknown shapes: get_next and map work, batch and shuffle need ranks
            output_shapes = _map_structure(types, lambda _: None)
        flat_shapes = _flatten_like(types, output_shapes, "output_shapes")
        shapes = []
        for sh in flat_shapes:
            dims = _graph.TensorShape(sh).dims if not isinstance(sh, _graph.TensorShape) else sh.dims
            shapes.append(None if dims is None else list(dims))
        feeder = _HostFeeder(generator, tuple(args or ()), flat_types, shapes, types)
        return Dataset(_GeneratorSource(feeder, types, shapes, flat_types))

    def map(self, map_func, num_parallel_calls=None):
        """map_func applied to each element (its components as arguments for a tuple), built once into
        the graph as TF 1.x's graph-mode map."""
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        return Dataset(_Map(self._stage, map_func))

    def flat_map(self, map_func):
        """The elements of map_func(element)'s dataset for each element, one dataset after another.
        map_func must return a Dataset made of tensors (from_tensor_slices of the element, ...)."""
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        return Dataset(_FlatMap(self._stage, map_func))

    def interleave(self, map_func, cycle_length, block_length=1, num_parallel_calls=None):
        """TF 1.x's interleave: cycle_length input elements' datasets open at once, block_length elements
        from each in turn; a dataset that ends is replaced by the next input element's."""
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        if int(cycle_length) < 1 or int(block_length) < 1:
            raise errors.InvalidArgumentError("cycle_length and block_length must be positive")
        if int(cycle_length) == 1:
            return Dataset(_FlatMap(self._stage, map_func, "interleave"))
        return Dataset(_Interleave(self._stage, map_func, int(cycle_length), int(block_length)))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None):
        """The elements in a random order drawn through a buffer of buffer_size elements."""
        if reshuffle_each_iteration is False:
            raise errors.UnimplementedError("shuffle(reshuffle_each_iteration=False) is not supported: each "
                                            "repeat reshuffles")
        if int(buffer_size) < 1:
            raise errors.InvalidArgumentError(f"buffer_size must be greater than zero, got {buffer_size}")
        from .random import op_seed
        return Dataset(_Shuffle(self._stage, int(buffer_size), op_seed(seed)))

    def repeat(self, count=None):
        """The elements count times (forever when None or -1)."""
        return Dataset(_Repeat(self._stage, -1 if count is None else _count(count)))

    def take(self, count):
        """The first count elements (all for -1)."""
        return Dataset(_Take(self._stage, _count(count)))

    def filter(self, predicate):
        """The elements for which predicate (a function of the element's components to a bool scalar) is true;
        built once into the graph and run on each element as it is pulled."""
        if not callable(predicate):
            raise TypeError("predicate must be callable")
        return Dataset(_Filter(self._stage, predicate))

    def batch(self, batch_size, drop_remainder=False):
        """batch_size consecutive elements stacked (the last batch smaller unless drop_remainder)."""
        if int(batch_size) < 1:
            raise errors.InvalidArgumentError(f"batch_size must be greater than zero, got {batch_size}")
        return Dataset(_Batch(self._stage, int(batch_size), bool(drop_remainder)))

    def padded_batch(self, batch_size, padded_shapes, padding_values=None, drop_remainder=False):
        """batch_size consecutive elements, each component padded at the end of each axis to padded_shapes
        (a dim of None or -1: the longest in the batch) with padding_values (0 by default), then stacked."""
        if int(batch_size) < 1:
            raise errors.InvalidArgumentError(f"batch_size must be greater than zero, got {batch_size}")
        return Dataset(_Batch(self._stage, int(batch_size), bool(drop_remainder), padded_shapes, padding_values))

    def prefetch(self, buffer_size):
        """The same elements (shardflow computes each when get_next runs)."""
        return self

    def make_one_shot_iterator(self):
        """An Iterator that needs no initializer (it starts on its first get_next)."""
        for src in self._stage.sources():
            if isinstance(src, _GeneratorSource):
                src.feeder.one_shot = True
        for src in self._stage.sources():
            for t in getattr(src, "data", []):
                if t.op.type == "Placeholder":
                    raise ValueError("Failed to create a one-shot iterator for a dataset that captures a placeholder "
                                     f"({t.name!r}); use make_initializable_iterator() and feed it to the initializer")
        return Iterator(self, one_shot=True)

    def make_initializable_iterator(self, shared_name=None):
        """An Iterator whose .initializer (re)starts it, capturing the tensors (feed placeholders there)."""
        return Iterator(self, one_shot=False, shared_name=shared_name)

    def __iter__(self):
        raise TypeError("a tf.data.Dataset is not iterable in graph mode: use make_one_shot_iterator().get_next()")


def _count(count):
    """An int, or an int32 scalar tensor for a count known at run time (TF's tf.int64 count)."""
    if isinstance(count, _graph.Tensor):
        return count if count.dtype == _I32 else _tf.cast(count, _I32)
    return int(count)


def _as_list(x):
    return x if isinstance(x, list) else [x]


def _flatten_datasets(s):
    if isinstance(s, dict):
        return [x for k in sorted(s) for x in _flatten_datasets(s[k])]
    if isinstance(s, (tuple, list)):
        return [x for v in s for x in _flatten_datasets(v)]
    return [s]


def _map_structure(s, fn, leaf=None):
    if isinstance(s, dict):
        return {k: _map_structure(s[k], fn, leaf) for k in sorted(s)}
    if isinstance(s, (tuple, list)) and (leaf is None or not leaf(s)):
        return tuple(_map_structure(v, fn, leaf) for v in s)
    return fn(s)


class _HostFeeder:
    """Runs a from_generator's generator for sessions, in threads of this process: each element is
    converted to the output types, checked against the output shapes and put in the dataset's queue by a
    step of that session (a feed), tagged with its generation; after the last one an element marked as
    the end follows, or one marked as an error when the generator raised or yielded a wrong element (which
    is logged, and fails the get_next that reaches it). The queue holds 2 elements, so the generator runs
    at most that far ahead of get_next.

    A session's generation 0 starts with its first step when a one-shot iterator reads the dataset; each
    run of an initializable iterator's initializer (as a target of Session.run) starts the next one and
    stops the thread of the one before once its pending element is taken. Session.run feeds the
    generation placeholder (host_feeds)."""

    def __init__(self, generator, args, dtypes, shapes, structure):
        import threading
        import weakref
        self.generator, self.args, self.dtypes, self.shapes, self.structure = generator, args, dtypes, shapes, structure
        self.one_shot = False
        self.epochs = 1  # runs of the generator per generation, each ended by an end marker (-1: forever)
        g = _graph.get_default_graph()
        with g.as_default(), _graph.name_scope("from_generator"):
            self.placeholders = [_graph.placeholder(d, s, name="element") for d, s in zip(dtypes, shapes)]
            self.end = _graph.placeholder(_dt.bool_, [], name="end")
            self.error = _graph.placeholder(_dt.bool_, [], name="error")
            self.tag = _graph.placeholder(_I32, [], name="tag")
            self.generation = _graph.placeholder(_I32, [], name="generation")  # the one a new iterator reads
            self.queue = FIFOQueue(list(dtypes) + [_dt.bool_, _dt.bool_, _I32], capacity=2, name="elements")
            self.enqueue = self.queue.enqueue(self.placeholders + [self.end, self.error, self.tag])
            # Unblocks a feeder waiting on a full queue when the process exits.
            self.cancel = self.queue.close(cancel_pending_enqueues=True)
        self._lock = threading.Lock()
        self._sessions = weakref.WeakKeyDictionary()  # session -> [generation, stop event or None]
        self._threads = []  # (session weak reference, stop event, thread) of the feeders started
        g.__dict__.setdefault("_host_feeders", []).append(self)
        _LIVE_FEEDERS.add(self)

    def repeat(self, count):
        """A repeat(count) reads this dataset: each generation runs the generator count times over (as TF calls
        generator(*args) again for each epoch), forever when count is negative or known only at run time."""
        if isinstance(count, _graph.Tensor) or count < 0 or self.epochs < 0:
            self.epochs = -1
        else:
            self.epochs *= count

    def feeds(self, sess, restart):
        """{generation placeholder: sess's current generation}, starting generation 0 (one-shot readers) or,
        with restart (an initializer runs), the next generation first."""
        import threading
        with self._lock:
            st = self._sessions.get(sess)
            if st is None:
                st = self._sessions[sess] = [0, None]
                if self.one_shot and not restart:
                    st[1] = threading.Event()
                    self._launch(sess, 0, st[1])
            if restart:
                if st[1] is not None:
                    st[1].set()
                st[0] += 1
                st[1] = threading.Event()
                self._launch(sess, st[0], st[1])
            return {self.generation: st[0]}

    def _launch(self, sess, generation, stop):
        import threading
        import weakref
        t = threading.Thread(target=self._feed, args=(sess, generation, stop), daemon=True, name="from_generator")
        t.start()
        self._threads = [x for x in self._threads if x[2].is_alive()] + [(weakref.ref(sess), stop, t)]

    def stop_feeders(self, timeout_s=5.0):
        """Stops this dataset's generator threads: each stops before its next element, and one waiting on
        the full queue is released by closing it (its session's later reads of the dataset end). Waits up
        to timeout_s for each."""
        for ref, stop, t in list(self._threads):
            if not t.is_alive():
                continue
            stop.set()
            sess = ref()
            if sess is not None:
                try:
                    sess.run(self.cancel)
                except Exception:  # noqa: BLE001 - a closed session has released its feeder already
                    pass
            t.join(timeout_s)
        self._threads = []

    def _marker(self, end, error, generation):
        feed = {p: np.zeros([] if s is None else [0 if d is None else d for d in s], d_.as_numpy_dtype)
                for p, s, d_ in zip(self.placeholders, self.shapes, self.dtypes)}
        feed.update({self.end: end, self.error: error, self.tag: generation})
        return feed

    def _convert(self, value):
        if isinstance(value, list) and isinstance(self.structure, tuple):
            value = tuple(value)  # TF's nest takes a list for a tuple of components
        flat = _flatten_like(self.structure, value, "the element")
        out = []
        for v, d, s in zip(flat, self.dtypes, self.shapes):
            arr = np.asarray(v, dtype=d.as_numpy_dtype)
            if s is not None and (arr.ndim != len(s) or any(w is not None and w != a for w, a in zip(s, arr.shape))):
                raise ValueError(f"`generator` yielded an element of shape {list(arr.shape)} where an element of "
                                 f"shape {s} was expected.")
            out.append(arr)
        return out

    def _feed(self, sess, generation, stop):
        from . import tf_logging
        try:
            epoch = 0
            while self.epochs < 0 or epoch < max(self.epochs, 1):
                for value in (self.generator(*self.args) if self.epochs != 0 else ()):
                    if stop.is_set():
                        return
                    arrays = self._convert(value)
                    feed = dict(zip(self.placeholders, arrays))
                    feed.update({self.end: False, self.error: False, self.tag: generation})
                    sess.run(self.enqueue, feed)
                if stop.is_set():
                    return
                sess.run(self.enqueue, self._marker(True, False, generation))  # the end of one epoch
                epoch += 1
        except errors.OpError:
            return  # the session closed
        except Exception as e:  # noqa: BLE001 - the generator's own errors go to the step that reaches them
            tf_logging.error("from_generator: %s: %s", type(e).__name__, e, exc_info=True)
            try:
                sess.run(self.enqueue, self._marker(False, True, generation))
            except errors.OpError:
                pass


def _stop_live_feeders():
    # Before the interpreter tears the runtime down: a generator thread left
    # blocked inside a step (its queue full) would outlive the session it runs
    # in, and the process would abort at exit.
    for f in list(_LIVE_FEEDERS):
        f.stop_feeders()


def host_feeds(graph, sess, target_names):
    """The feeds a step of sess needs for the graph's from_generator datasets (their generation), starting
    their generators' threads as needed (see _HostFeeder); {} when the graph has none."""
    feeders = graph.__dict__.get("_host_feeders")
    if not feeders:
        return {}
    restart = set()
    inits = graph.__dict__.get("_generator_initializers", {})
    for name in target_names:
        for f in inits.get(name, ()):
            restart.add(id(f))
    out = {}
    for f in feeders:
        out.update(f.feeds(sess, id(f) in restart))
    return out


class _Interleave(_Stage):
    """TF 1.x's interleave over cycle_length slots, each holding an input item and its dataset's state."""

    batchable = False

    def __init__(self, up, fn, cycle, block):
        self.up, self.cycle, self.block = up, cycle, block
        self.flat = _FlatMap(up, fn, "interleave")  # the inner datasets' layout and builders

    def spec(self):
        return self.flat.spec()

    def _slot_layout(self):
        return 1 + len(self.up.spec()) + len(self.flat.inner_state)  # active, outer item, inner state

    def initial(self):
        slot = [_graph.constant(False)] + [_zeros(s, d) for s, d in self.up.spec()] + \
            [_zeros(s, d) for s, d in self.flat.inner_state]
        # cur (the slot whose turn it is), taken (of its block), up_done, the slots, the input's state
        return [_graph.constant(0), _graph.constant(0), _graph.constant(False)] + slot * self.cycle + \
            self.up.initial()

    def pull(self, ctx, state):
        n_item = len(self.spec())
        n_slot = self._slot_layout()
        n_out = len(self.up.spec())
        cycle, block = self.cycle, self.block

        def split(rest):
            cur, taken, up_done = rest[0], rest[1], rest[2]
            slots = [list(rest[3 + i * n_slot:3 + (i + 1) * n_slot]) for i in range(cycle)]
            return cur, taken, up_done, slots, list(rest[3 + cycle * n_slot:])

        def any_active(slots):
            act = slots[0][0]
            for sl in slots[1:]:
                act = _tf.logical_or(act, sl[0])
            return act

        def more(found, *rest):
            cur, taken, up_done, slots, _ = split(list(rest[n_item:]))
            return _tf.logical_and(_tf.logical_not(found),
                                   _tf.logical_or(_tf.logical_not(up_done), any_active(slots)))

        def body(found, *rest):
            cur, taken, up_done, slots, up_st = split(list(rest[n_item:]))

            def on_slot(i):
                def run():
                    active, outer, inner_st = slots[i][0], slots[i][1:1 + n_out], slots[i][1 + n_out:]

                    def step():
                        inner = self.flat._inner(ctx, outer)
                        h, it, st1 = inner._stage.pull(ctx, inner_st)
                        nxt = _tf.logical_or(_tf.logical_not(h), _tf.equal(taken + 1, block))
                        new_cur = _tf.where(nxt, _tf.floormod(cur + 1, cycle), cur)
                        new_taken = _tf.where(nxt, _graph.constant(0), taken + 1)
                        new_slot = [h] + list(outer) + list(st1)
                        return [h] + list(outer) + list(it), [new_cur, new_taken, up_done], new_slot, up_st

                    def open_next():
                        h, it, up1 = self.up.pull(ctx, up_st)
                        zeros_item = [_zeros(s, d) for s, d in self.spec()]
                        inner0 = [_zeros(s, d) for s, d in self.flat.inner_state]
                        new_slot = [h] + list(it) + inner0
                        # an opened slot keeps its turn; at the input's end the turn moves on
                        new_cur = _tf.where(h, cur, _tf.floormod(cur + 1, cycle))
                        new_taken = _tf.where(h, taken, _graph.constant(0))
                        return [_graph.constant(False)] + zeros_item, [new_cur, new_taken, _tf.logical_not(h)], \
                            new_slot, list(up1)

                    def skip():
                        zeros_item = [_zeros(s, d) for s, d in self.spec()]
                        return [_graph.constant(False)] + zeros_item, \
                            [_tf.floormod(cur + 1, cycle), _graph.constant(0), up_done], list(slots[i]), up_st

                    def flat_of(fn):
                        def f():
                            a, b, c, d = fn()
                            return list(a) + list(b) + list(c) + list(d)
                        return f

                    return cond(active, flat_of(step),
                                lambda: cond(up_done, flat_of(skip), flat_of(open_next)))
                return run

            # the slot whose turn it is: a chain of conds on cur
            def pick(i):
                if i == cycle - 1:
                    return on_slot(i)()
                return cond(_tf.equal(cur, i), on_slot(i), lambda: pick(i + 1))

            out = pick(0)
            res_found, item = out[0], list(out[1:1 + n_item])
            k = 1 + n_item
            new_cur, new_taken, new_done = out[k], out[k + 1], out[k + 2]
            new_slot = list(out[k + 3:k + 3 + n_slot])
            new_up = list(out[k + 3 + n_slot:])
            slots = [_as_list(cond(_tf.equal(cur, i), lambda: list(new_slot), lambda sl=sl: list(sl)))
                     for i, sl in enumerate(slots)]
            return [res_found] + item + [new_cur, new_taken, new_done] + [x for sl in slots for x in sl] + new_up

        zeros = [_zeros(s, d) for s, d in self.spec()]
        res = while_loop(more, body, [_graph.constant(False)] + zeros + list(state))
        return res[0], list(res[1:1 + n_item]), list(res[1 + n_item:])

    def element(self, ctx, item, batched=False):
        return self.flat.element(ctx, item)


class Iterator:
    """TF 1.x's iterator over a Dataset: get_next() gives the next element's tensors (OutOfRangeError
    at the end); an initializable one has .initializer."""

    def __init__(self, dataset, one_shot, shared_name=None):
        self._ds = dataset
        self._one_shot = one_shot
        g = _graph.get_default_graph()
        self._graph = g
        # A one-shot iterator reads its sources' tensors directly; an initializable one keeps the
        # tensors it captured when its initializer ran in its state.
        self._sources = [] if one_shot else [src for src in dataset._stage.sources() if isinstance(src, _Source)]
        self._captured = [t for src in self._sources for t in src.data]
        with g.as_default(), _graph.name_scope("Iterator"):
            probe = self._initial()
            self._queue = FIFOQueue([t.dtype for t in probe], capacity=1, shared_name=shared_name or "",
                                    name="state")
            if not one_shot:
                clear = cond(self._queue.size() > 0, self._discard, lambda: _graph.constant(0))
                with _graph.control_dependencies([clear]):
                    self.initializer = self._queue.enqueue(self._initial(), name="initializer")
                feeders = [src.feeder for src in dataset._stage.sources() if isinstance(src, _GeneratorSource)]
                if feeders:  # running the initializer starts the generators again (host_feeds)
                    g.__dict__.setdefault("_generator_initializers", {})[self.initializer.name] = feeders
        self._next = None

    def _initial(self):
        return list(self._captured) + self._ds._stage.initial()

    def _discard(self):
        old = self._queue.dequeue()
        with _graph.control_dependencies(old if isinstance(old, list) else [old]):
            return _graph.constant(0)

    @property
    def output_shapes(self):
        return _pack(self._element_structure(), [t.get_shape() for t in _flatten(self._element_structure())])

    @property
    def output_types(self):
        return _pack(self._element_structure(), [t.dtype for t in _flatten(self._element_structure())])

    def _element_structure(self):
        return self.get_next()

    def get_next(self, name=None):
        """The next element (a structure of Tensors, built once: each run advances the iterator)."""
        if self._next is None:
            with self._graph.as_default(), _graph.name_scope(name or "IteratorGetNext"):
                self._next = self._build_next()
        return self._next

    def _state(self):
        q = self._queue
        if self._one_shot:
            starting = self._initial
        else:
            def starting():
                return q.dequeue(timeout_ms=1, name="GetNext_before_the_iterator_initializer_ran")
        out = cond(_tf.equal(q.size(), 0), starting, lambda: q.dequeue())
        return out if isinstance(out, list) else [out]

    def _build_next(self):
        stage = self._ds._stage
        n = len(self._captured)
        state = self._state()
        probe = self._initial()
        state = [s if i < n else _with_shape(s, None if p.shape.rank is None else list(p.shape.dims))
                 for i, (s, p) in enumerate(zip(state, probe))]
        mapping, i = {}, 0
        for src in self._sources:
            mapping[id(src)] = state[i:i + len(src.data)]
            i += len(src.data)
        ctx = _Context(mapping)
        has, item, new_state = stage.pull(ctx, state[n:])
        put = self._queue.enqueue(state[:n] + list(new_state))
        with _graph.control_dependencies([put]):
            has = _graph.identity(has)  # the state is back before an element is made or the end raised

        structure = stage.element(ctx, [_graph.identity(x) for x in item])  # for shapes and types only
        flat = _flatten(structure)
        ended = FIFOQueue([t.dtype for t in flat], name="end_of_sequence")

        def end():  # the runtime's end-of-input error: a dequeue from a closed, empty queue
            with _graph.control_dependencies([ended.close()]):
                out = ended.dequeue()
            return out

        out = cond(has, lambda: _flatten(stage.element(ctx, item)), end)
        out = out if isinstance(out, list) else [out]
        return _pack(structure, [_with_shape(o, list(t.shape.dims) if t.shape.rank is not None else None)
                                 for o, t in zip(out, flat)])


class _Context:
    """Where an iterator reads each source's tensors: those its state captured (initializable iterators),
    else those the source was made with."""

    def __init__(self, mapping=None):
        self._mapping = mapping or {}

    def data(self, src):
        return self._mapping.get(id(src), src.data)

    def rows(self, src):
        return _tf.shape(self.data(src)[0])[0]


_atexit.register(_stop_live_feeders)
