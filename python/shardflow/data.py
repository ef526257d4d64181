"""TF 1.x's tf.data for in-memory data: Dataset.from_tensor_slices / from_tensors / range, map, filter,
shuffle, repeat, take, batch, prefetch, and one-shot or initializable iterators.

    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.map(lambda x, y: (x / 255.0, y)).shuffle(1000, seed=1).repeat(2).batch(32)
    next_x, next_y = dataset.make_one_shot_iterator().get_next()
    while True:
        try:
            sess.run(train, {x: sess.run(next_x), ...})   # or train on next_x directly
        except tf.errors.OutOfRangeError:
            break

A Dataset only describes the pipeline. Making an iterator builds it into the
graph as a small state machine over element indices: every run of get_next()
takes the iterator's state (the captured tensors, positions, the shuffle
buffer) from a one-element queue of the session, computes the next element,
and puts the new state back, so concurrent runs of get_next() take turns and
each session has its own iterator. Elements are made only when they come out:
map's function is built once into the graph (TF 1.x's graph-mode map) and runs
on each element as it is produced, before batching when it was mapped before.

The meanings are TF 1.x's: shuffle keeps a buffer of buffer_size elements and
gives a uniformly chosen one of them each time (refilling from its input), so
a buffer smaller than the data mixes only locally; repeat after shuffle
reshuffles each epoch; batch gives a smaller final batch unless
drop_remainder; the end of the data raises tf.errors.OutOfRangeError, again on
every later run. The random streams are not TensorFlow's: a seed (or none,
which here also gives a repeatable order) fixes the order, not TF's order.

Differences, each refused by name or documented here: only batch once, filter
before batch, and no zip, flat_map, interleave, padded_batch, from_generator or file datasets (shardflow
has no string tensors; Criteo-format files come from sf.ops.criteo_reader);
shuffle(reshuffle_each_iteration=False) is refused; get_next() on an
initializable iterator whose initializer has not run raises
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

__all__ = ["Dataset", "Iterator"]

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
    """t reshaped to dims (None: unknown) when at most one is unknown, so static shapes show."""
    if dims is None or sum(d is None for d in dims) > 1:
        return t
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

class _Source:
    """Items are the indices 0..N-1 of the captured tensors' rows."""

    level = 0

    def spec(self):
        return [([], _I32)]

    def initial(self):
        return [_graph.constant(0)]

    def pull(self, ctx, state):
        (pos,) = state
        has = pos < ctx.rows
        return has, [pos], [pos + _tf.cast(has, _I32)]


class _Repeat:
    def __init__(self, up, count):
        self.up, self.count, self.level = up, count, up.level

    def spec(self):
        return self.up.spec()

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
        if self.count >= 0:
            more = _tf.logical_and(more, epoch + 1 < self.count)
        out = cond(more, again, keep)
        return out[0], out[1:1 + n_item], [out[-1]] + list(out[1 + n_item:-1])


class _Take:
    def __init__(self, up, count):
        self.up, self.count, self.level = up, count, up.level

    def spec(self):
        return self.up.spec()

    def initial(self):
        return [_graph.constant(0)] + self.up.initial()

    def pull(self, ctx, state):
        taken, us = state[0], state[1:]
        n_item = len(self.spec())

        def pull_up():
            h, it, us1 = self.up.pull(ctx, us)
            return [h] + it + us1 + [taken + _tf.cast(h, _I32)]

        def stop():
            zeros = [_tf.zeros(shape, dtype) for shape, dtype in self.spec()]
            return [_graph.constant(False)] + zeros + list(us) + [taken]

        if self.count < 0:
            h, it, us1 = self.up.pull(ctx, us)
            return h, it, [taken] + us1
        out = cond(taken < self.count, pull_up, stop)
        return out[0], out[1:1 + n_item], [out[-1]] + list(out[1 + n_item:-1])


class _Shuffle:
    """TF's buffered shuffle: fill the buffer (buffer_size items) from the input, give a uniformly
    chosen item of it, and put the last buffered item in its place."""

    def __init__(self, up, size, seed):
        self.up, self.size, self.seed, self.level = up, size, seed, up.level

    def spec(self):
        return self.up.spec()

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


class _Filter:
    """The input's items whose element (with the maps given before the filter) satisfies the predicate:
    pulls from the input until one does or the input ends."""

    level = 0

    def __init__(self, up, predicate, n_maps):
        self.up, self.predicate, self.n_maps = up, predicate, n_maps

    def spec(self):
        return self.up.spec()

    def initial(self):
        return self.up.initial()

    def pull(self, ctx, state):
        n_item = len(self.spec())

        def more(found, done, *rest):
            return _tf.logical_and(_tf.logical_not(found), _tf.logical_not(done))

        def step(found, done, *rest):
            h, it, u1 = self.up.pull(ctx, list(rest[n_item:]))
            ok = cond(h, lambda: self._keep(ctx, it[0]), lambda: _graph.constant(False))
            return [ok, _tf.logical_not(h)] + list(it) + list(u1)

        zeros = [_tf.zeros(shape, dtype) for shape, dtype in self.spec()]
        res = while_loop(more, step, [_graph.constant(False), _graph.constant(False)] + zeros + list(state))
        return res[0], list(res[2:2 + n_item]), list(res[2 + n_item:])

    def _keep(self, ctx, idx):
        out = _call(self.predicate, ctx.element(idx, self.n_maps))
        if not isinstance(out, _graph.Tensor) or out.dtype != _dt.bool_ or out.shape.rank not in (0, None):
            raise ValueError(f"`predicate` must return a scalar boolean tensor, got {out!r}")
        return out


class _Batch:
    """Items are ([batch_size] indices, how many of them are set)."""

    level = 1

    def __init__(self, up, size, drop_remainder):
        self.up, self.size, self.drop = up, size, drop_remainder

    def spec(self):
        return [([self.size], _I32), ([], _I32)]

    def initial(self):
        return self.up.initial()

    def pull(self, ctx, state):
        def more(k, done, idxs, *u):
            return _tf.logical_and(k < self.size, _tf.logical_not(done))

        def take(k, done, idxs, *u):
            h, it, u1 = self.up.pull(ctx, list(u))
            idxs = _at(idxs, _tf.where(h, k, _graph.constant(-1)), it[0], self.size)
            return [k + _tf.cast(h, _I32), _tf.logical_not(h), idxs] + u1

        res = while_loop(more, take, [_graph.constant(0), _graph.constant(False),
                                      _tf.zeros([self.size], _I32)] + list(state))
        k, idxs, us = res[0], res[2], list(res[3:])
        has = _tf.equal(k, self.size) if self.drop else k > 0
        return has, [idxs, k], us


# ---- Dataset -------------------------------------------------------------------------------

class Dataset:
    """A description of an input pipeline (TF 1.x's tf.data.Dataset, in-memory sources)."""

    def __init__(self, data, structure, stage, maps):
        self._data = data              # the captured tensors (their rows are the elements)
        self._structure = structure    # the structure of one source element
        self._stage = stage
        self._maps = maps              # per level: the map functions, in order

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
        return Dataset(flat, structure, _Source(), ([], []))

    @staticmethod
    def from_tensors(tensors):
        """tensors as one element."""
        structure = _as_structure(tensors)
        flat = [_tf.expand_dims(t, 0) for t in _flatten(structure)]
        return Dataset(flat, structure, _Source(), ([], []))

    def _then(self, stage=None, maps=None):
        return Dataset(self._data, self._structure, stage or self._stage, maps or self._maps)

    def map(self, map_func, num_parallel_calls=None):
        """map_func applied to each element (its components as arguments for a tuple), built once into
        the graph as TF 1.x's graph-mode map."""
        if not callable(map_func):
            raise TypeError("map_func must be callable")
        maps = (list(self._maps[0]), list(self._maps[1]))
        maps[self._stage.level].append(map_func)
        return self._then(maps=maps)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None):
        """The elements in a random order drawn through a buffer of buffer_size elements."""
        if reshuffle_each_iteration is False:
            raise errors.UnimplementedError("shuffle(reshuffle_each_iteration=False) is not supported: each "
                                            "repeat reshuffles")
        if int(buffer_size) < 1:
            raise errors.InvalidArgumentError(f"buffer_size must be greater than zero, got {buffer_size}")
        from .random import op_seed
        return self._then(_Shuffle(self._stage, int(buffer_size), op_seed(seed)))

    def repeat(self, count=None):
        """The elements count times (forever when None or -1)."""
        return self._then(_Repeat(self._stage, -1 if count is None else int(count)))

    def take(self, count):
        """The first count elements (all for -1)."""
        return self._then(_Take(self._stage, int(count)))

    def filter(self, predicate):
        """The elements for which predicate (a function of the element's components to a bool scalar) is true;
        built once into the graph and run on each element as it is pulled."""
        if not callable(predicate):
            raise TypeError("predicate must be callable")
        if self._stage.level > 0:
            raise errors.UnimplementedError("filter after batch is not supported: filter the elements, then batch")
        return self._then(_Filter(self._stage, predicate, len(self._maps[0])))

    @staticmethod
    def range(*args):
        """int64 elements start, start + step, ... below stop: range(stop), range(start, stop[, step])."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"Dataset.range takes 1 to 3 arguments, got {len(args)}")
        return Dataset.from_tensor_slices(np.arange(*[int(a) for a in args], dtype=np.int64))

    def batch(self, batch_size, drop_remainder=False):
        """batch_size consecutive elements stacked (the last batch smaller unless drop_remainder)."""
        if self._stage.level > 0:
            raise errors.UnimplementedError("batching a batched Dataset is not supported")
        if int(batch_size) < 1:
            raise errors.InvalidArgumentError(f"batch_size must be greater than zero, got {batch_size}")
        return self._then(_Batch(self._stage, int(batch_size), bool(drop_remainder)))

    def prefetch(self, buffer_size):
        """The same elements (shardflow computes each when get_next runs)."""
        return self

    def make_one_shot_iterator(self):
        """An Iterator that needs no initializer (it starts on its first get_next)."""
        for t in self._data:
            if t.op.type == "Placeholder":
                raise ValueError("Failed to create a one-shot iterator for a dataset that captures a placeholder "
                                 f"({t.name!r}); use make_initializable_iterator() and feed it to the initializer")
        return Iterator(self, one_shot=True)

    def make_initializable_iterator(self, shared_name=None):
        """An Iterator whose .initializer (re)starts it, capturing the tensors (feed placeholders there)."""
        return Iterator(self, one_shot=False, shared_name=shared_name)

    def __iter__(self):
        raise TypeError("a tf.data.Dataset is not iterable in graph mode: use make_one_shot_iterator().get_next()")

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None):
        raise errors.UnimplementedError(
            "Dataset.from_generator is not supported: shardflow runs no Python inside a graph (TF wraps the "
            "generator in a py_func); build the arrays first and use from_tensor_slices, or feed a placeholder")

    @staticmethod
    def zip(datasets):
        raise errors.UnimplementedError("Dataset.zip is not supported: give from_tensor_slices a tuple of the "
                                        "components instead")

    def padded_batch(self, batch_size, padded_shapes, padding_values=None, drop_remainder=False):
        raise errors.UnimplementedError("Dataset.padded_batch is not supported: pad the arrays before "
                                        "from_tensor_slices, or use tf.train.batch(dynamic_pad=True)")

    def flat_map(self, map_func):
        raise errors.UnimplementedError("Dataset.flat_map is not supported (elements come from in-memory rows)")

    def interleave(self, map_func, cycle_length, block_length=1, num_parallel_calls=None):
        raise errors.UnimplementedError("Dataset.interleave is not supported (elements come from in-memory rows)")


class Iterator:
    """TF 1.x's iterator over a Dataset: get_next() gives the next element's tensors (OutOfRangeError
    at the end); an initializable one has .initializer."""

    def __init__(self, dataset, one_shot, shared_name=None):
        self._ds = dataset
        self._one_shot = one_shot
        g = _graph.get_default_graph()
        self._graph = g
        # A one-shot iterator reads its constant tensors directly; an initializable one keeps the
        # tensors it captured when its initializer ran in its state.
        self._captured = [] if one_shot else list(dataset._data)
        with g.as_default(), _graph.name_scope("Iterator"):
            probe = self._initial()
            self._queue = FIFOQueue([t.dtype for t in probe], capacity=1, shared_name=shared_name or "",
                                    name="state")
            if not one_shot:
                clear = cond(self._queue.size() > 0, self._discard, lambda: _graph.constant(0))
                with _graph.control_dependencies([clear]):
                    self.initializer = self._queue.enqueue(self._initial(), name="initializer")
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
        ds = self._ds
        n = len(self._captured)
        state = self._state()
        probe = self._initial()
        state = [s if i < n else _with_shape(s, list(p.shape.dims)) for i, (s, p) in enumerate(zip(state, probe))]
        ctx = _Context(state[:n] if n else ds._data, ds._data)
        ctx.element = lambda idx, n_maps: self._element(ctx, idx, n_maps)
        has, item, new_state = ds._stage.pull(ctx, state[n:])
        put = self._queue.enqueue(state[:n] + list(new_state))
        with _graph.control_dependencies([put]):
            has = _graph.identity(has)  # the state is back before an element is made or the end raised

        structure = self._materialize(ctx, [_graph.identity(x) for x in item])  # for shapes and types only
        flat = _flatten(structure)
        ended = FIFOQueue([t.dtype for t in flat], name="end_of_sequence")

        def end():  # the runtime's end-of-input error: a dequeue from a closed, empty queue
            with _graph.control_dependencies([ended.close()]):
                out = ended.dequeue()
            return out

        out = cond(has, lambda: _flatten(self._materialize(ctx, item)), end)
        out = out if isinstance(out, list) else [out]
        return _pack(structure, [_with_shape(o, list(t.shape.dims) if t.shape.rank is not None else None)
                                 for o, t in zip(out, flat)])

    def _rows(self, ctx, idx, batched):
        """The rows of the captured tensors at idx, with their static shapes."""
        out = []
        for d, orig in zip(ctx.data, ctx.static):
            dims = None if orig.shape.rank is None else list(orig.shape.dims[1:])
            out.append(_with_shape(_tf.gather(d, idx), None if dims is None else ([None] if batched else []) + dims))
        return out

    def _element(self, ctx, idx, n_maps=None):
        element = _pack(self._ds._structure, self._rows(ctx, idx, False))
        for fn in self._ds._maps[0][:n_maps]:
            element = _call(fn, element)
        return element

    def _materialize(self, ctx, item):
        if self._ds._stage.level == 0:
            return self._element(ctx, item[0])
        idxs, k = item
        if not self._ds._maps[0]:
            element = _pack(self._ds._structure, self._rows(ctx, _tf.gather(idxs, _tf.range(k)), True))
        else:
            element = self._map_then_stack(ctx, idxs, k)
        if self._batch_stage().drop:  # every batch is full: its size is static, as in TF
            size = self._batch_stage().size
            element = _pack(element, [_with_shape(t, None if t.shape.rank is None else [size] + list(t.shape.dims[1:]))
                                      for t in _flatten(element)])
        for fn in self._ds._maps[1]:
            element = _call(fn, element)
        return element

    def _batch_stage(self):
        stage = self._ds._stage
        while not isinstance(stage, _Batch):
            stage = stage.up
        return stage

    def _map_then_stack(self, ctx, idxs, k):
        """Each of the batch's elements mapped (in a loop: the function takes one element), then stacked."""
        size = self._batch_stage().size
        shape_of = self._element(ctx, _graph.constant(0))  # built only for its shapes and types
        flat = _flatten(shape_of)
        for t in flat:
            if t.shape.rank is None or any(d is None for d in t.shape.dims):
                raise errors.UnimplementedError(
                    f"batch after map needs map's outputs to have static shapes; {t.name!r} has {t.shape}")
        accs = [_tf.zeros([size] + list(t.shape.dims), t.dtype) for t in flat]

        def more(j, *a):
            return j < k

        def body(j, *a):
            one = _flatten(self._element(ctx, _tf.gather(idxs, j)))
            return [j + 1] + [_at(acc, j, x, size) for acc, x in zip(a, one)]

        res = while_loop(more, body, [_graph.constant(0)] + accs)
        res = res[1:]
        return _pack(shape_of, [_tf.gather(r, _tf.range(k)) for r in res])


class _Context:
    """The tensors an iterator reads rows from (data), and those the Dataset was made with (static)."""

    def __init__(self, data, static):
        self.data = data
        self.static = static
        self.rows = _tf.shape(data[0])[0]
