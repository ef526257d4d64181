"""Queues: state shared between steps (input pipelines, coordination), each a queue actor.

    q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[784], []], capacity=1000)
    enqueue = q.enqueue_many([images, labels])
    x, y = q.dequeue_many(128)

A dequeue on an empty queue waits without holding a thread; closing makes
dequeues that can never be served fail with OutOfRangeError.
"""

import numpy as np

from . import _core
from . import errors
from . import dtypes as _dt
from . import graph as _graph

__all__ = ["FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue"]


class _Queue:
    _kind = None

    def __init__(self, dtypes, shapes=None, capacity=-1, shared_name="", name="queue", min_after_dequeue=0,
                 seed=0, graph=None):
        g = graph or _graph.get_default_graph()
        self.dtypes = [_dt.as_dtype(d) for d in (dtypes if isinstance(dtypes, (list, tuple)) else [dtypes])]
        self.shapes = [None if s is None else list(_graph.TensorShape(s)) for s in (shapes or [])]
        core_shapes = [_graph._as_core_shape(s) for s in (shapes or [])]
        ref = _core.queue(g._g, self._kind, [d.value for d in self.dtypes], core_shapes, int(capacity), shared_name,
                          int(min_after_dequeue), int(seed), name)
        self.queue_ref = _graph.Tensor(g, *ref)
        self.graph = g

    def _comps(self, vals):
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        return [_graph._ref_in(v, self.graph, "enqueued value", dtype=d) for v, d in zip(vals, self.dtypes)] + \
            [_graph._ref_in(v, self.graph, "enqueued value") for v in vals[len(self.dtypes):]]

    def _after_deps(self, nid):
        # The C++ builders do not see Python's control_dependencies scopes: add them here, so
        # `with sf.control_dependencies([enq]): x = q.dequeue()` orders the two as TensorFlow does.
        for c in self.graph._current_control_inputs():
            if c not in self.graph._g.node_control_inputs(nid):
                self.graph._g.add_control_input(nid, c)
        return nid

    def enqueue(self, vals, timeout_ms=0, name="enqueue"):
        """An Operation adding one element (one value per component)."""
        return self.graph._op(self._after_deps(_core.queue_enqueue(
            self.graph._g, self.queue_ref._ref(), self._comps(vals), False, int(timeout_ms), name)))

    def enqueue_many(self, vals, timeout_ms=0, name="enqueue_many"):
        """An Operation adding dimension 0 of the components as that many elements."""
        return self.graph._op(self._after_deps(_core.queue_enqueue(
            self.graph._g, self.queue_ref._ref(), self._comps(vals), True, int(timeout_ms), name)))

    def _unpack(self, refs):
        for node in {r[0] for r in refs}:
            self._after_deps(node)
        outs = [_graph.Tensor(self.graph, *r) for r in refs]
        return outs[0] if len(outs) == 1 else outs

    def dequeue(self, timeout_ms=0, name="dequeue"):
        """One element: a Tensor per component (one Tensor for a one-component queue)."""
        return self._unpack(_core.queue_dequeue(self.graph._g, self.queue_ref._ref(), None, int(timeout_ms), name,
                                                False))

    def _dequeue_n(self, n, timeout_ms, name, up_to):
        n = n._ref() if isinstance(n, _graph.Tensor) else int(n)
        return self._unpack(_core.queue_dequeue(self.graph._g, self.queue_ref._ref(), n, int(timeout_ms), name,
                                                up_to))

    def dequeue_many(self, n, timeout_ms=0, name="dequeue_many"):
        """n elements stacked per component ([n, ...]); n an int or an int Tensor."""
        return self._dequeue_n(n, timeout_ms, name, False)

    def dequeue_up_to(self, n, timeout_ms=0, name="dequeue_up_to"):
        """As dequeue_many, but once the queue is closed it returns the fewer than n elements left
        ([?, ...]); OutOfRangeError only when the closed queue is empty (tf.QueueBase.dequeue_up_to)."""
        return self._dequeue_n(n, timeout_ms, name, True)

    def close(self, cancel_pending_enqueues=False, name="close"):
        """An Operation closing the queue."""
        return self.graph._op(self._after_deps(_core.queue_close(self.graph._g, self.queue_ref._ref(),
                                                                 bool(cancel_pending_enqueues), name)))

    def size(self, name="size"):
        """The number of elements (int32 scalar Tensor)."""
        ref = _core.queue_size(self.graph._g, self.queue_ref._ref(), name)
        self._after_deps(ref[0])
        return _graph.Tensor(self.graph, *ref)


def _tf_form(args, kwargs, what):
    """(dtypes, shapes, capacity, shared_name, name, graph) from shardflow's (dtypes, shapes=None, capacity=-1,
    ...) or TF 1.x's (capacity, dtypes, shapes=None, names=None, shared_name=None, name=...) arguments."""
    first = args[0] if args else kwargs.get("capacity", kwargs.get("dtypes"))
    tf_form = "capacity" in kwargs and not args or (
        isinstance(first, (int, np.integer)) and not isinstance(first, bool))
    if tf_form:
        names = ("capacity", "dtypes", "shapes", "names", "shared_name", "name", "graph")
    else:
        names = ("dtypes", "shapes", "capacity", "shared_name", "name", "graph")
    if len(args) > len(names):
        raise TypeError(f"{what}() takes at most {len(names)} positional arguments")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in given:
            raise TypeError(f"{what}() got multiple values for argument '{k}'")
        if k not in names:
            raise TypeError(f"{what}() got an unexpected keyword argument '{k}'")
        given[k] = v
    if given.get("names") is not None:
        raise errors.UnimplementedError(f"tf.{what}(names=...) is not supported: dequeue gives a list, not a dict")
    if "dtypes" not in given:
        raise TypeError(f"{what}() needs dtypes")
    return (given["dtypes"], given.get("shapes"), given.get("capacity", -1), given.get("shared_name") or "",
            given.get("name"), given.get("graph"))


class FIFOQueue(_Queue):
    """A first-in first-out queue: TF 1.x's FIFOQueue(capacity, dtypes, shapes=None, names=None, shared_name=None,
    name="fifo_queue"), or shardflow's FIFOQueue(dtypes, shapes=None, capacity=-1 (unbounded), ...)."""
    _kind = "fifo"

    def __init__(self, *args, **kwargs):
        dtypes, shapes, capacity, shared_name, name, graph = _tf_form(args, kwargs, "FIFOQueue")
        super().__init__(dtypes, shapes, capacity, shared_name, name or "fifo_queue", graph=graph)


class PaddingFIFOQueue(_Queue):
    """A FIFO queue whose dequeue_many pads each component to the batch's largest shape: TF 1.x's
    PaddingFIFOQueue(capacity, dtypes, shapes, ...), or shardflow's PaddingFIFOQueue(dtypes, shapes, capacity=-1)."""
    _kind = "padding_fifo"

    def __init__(self, *args, **kwargs):
        dtypes, shapes, capacity, shared_name, name, graph = _tf_form(args, kwargs, "PaddingFIFOQueue")
        if shapes is None:
            raise errors.InvalidArgumentError("PaddingFIFOQueue needs shapes (a None dimension is padded)")
        super().__init__(dtypes, shapes, capacity, shared_name, name or "padding_fifo_queue", graph=graph)


class RandomShuffleQueue(_Queue):
    """A queue dequeuing in a random order (seed != 0: deterministic); keeps min_after_dequeue to mix."""
    _kind = "random_shuffle"

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, seed=0, shared_name="",
                 name="random_shuffle_queue", graph=None):
        super().__init__(dtypes, shapes, capacity, shared_name, name, min_after_dequeue, seed, graph=graph)
