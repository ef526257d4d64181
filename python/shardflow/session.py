"""Sessions: run a graph in this process (Session) or on cluster nodes (ClusterSession).

    with sf.Session(g) as sess:
        sess.run(init)
        loss_value, _ = sess.run([loss, train], feed_dict={x: batch, y: labels})

run() takes fetches as TensorFlow does: a Tensor, an Operation, a name, or
nested lists, tuples, namedtuples and dicts of them; the result has the same
structure with NumPy arrays for tensors and None for operations. Feeds may be
any array-like; a C-contiguous NumPy array of the placeholder's dtype is lent
to the step without a copy (do not modify it while the step runs). Fetched
arrays share the tensor's buffer; an array whose buffer another holder shares
(a variable's value) is read-only: copy it to modify it. The GIL is released
while a step runs, so several Python threads may run steps at once.
"""

import collections.abc
import contextlib
import threading

import numpy as np

from . import _core
from . import dtypes as _dt
from . import errors
from . import graph as _graph

__all__ = ["Session", "ClusterSession", "SessionOptions", "InteractiveSession", "get_default_session", "ConfigProto",
           "GPUOptions"]


class _SessionStack(threading.local):
    def __init__(self):
        super().__init__()
        self.stack = []


_default_sessions = _SessionStack()


def get_default_session():
    """The innermost session of `with sess:` or `with sess.as_default():` in this thread, or None (TF 1.x's)."""
    return _default_sessions.stack[-1] if _default_sessions.stack else None


def _run_in_default(element, feed_dict, session, what):
    """Runs element (a Tensor or Operation) in session or the default one, with TF 1.x's errors."""
    if session is None:
        session = get_default_session()
        if session is None:
            raise ValueError(f"Cannot {what} using `{'eval' if what.startswith('evaluate') else 'run'}()`: "
                             "No default session is registered. Use `with sess.as_default():` or "
                             f"pass an explicit session (session=sess)")
    if session.graph is not element.graph:
        raise ValueError(f"Cannot use the given session to {what}: the {what.split()[-1]}'s graph is "
                         "different from the session's graph.")
    return session.run(element, feed_dict)


class SessionOptions:
    """Options of a local Session; every field defaults like the C++ SessionOptions."""

    def __init__(self, compute_threads=0, scheduler_threads=0, num_cpu_devices=1):
        self.compute_threads = compute_threads      # 0: one per core
        self.scheduler_threads = scheduler_threads  # 0: 2
        self.num_cpu_devices = num_cpu_devices      # CPU devices to place and partition over


class RunOptions:
    """Options of one step, like the C++ RunOptions (shardflow/run_args.h).

    trace_file: write the step's timeline there as Chrome trace-event JSON
    (open it in https://ui.perfetto.dev); None or "": no trace.
    trace_max_events: events kept per process; the rest are counted in the
    file's "droppedEvents".
    """

    def __init__(self, trace_file=None, trace_max_events=100000):
        self.trace_file = trace_file
        self.trace_max_events = trace_max_events


class _FetchPlan:
    """Flattens a nested fetch structure into fetch and target names, and rebuilds it."""

    def __init__(self, graph, fetches):
        self.graph = graph
        self.fetch_names = []
        self.target_names = []
        self._index = {}
        self.structure = self._flatten(fetches)

    def _leaf(self, x):
        g = self.graph
        if isinstance(x, str):
            x = g.as_graph_element(x)
        conv = getattr(x, "_as_graph_tensor", None)
        if conv is not None:
            x = conv()
        if isinstance(x, _graph.Tensor):
            if x.graph is not g:
                raise errors.InvalidArgumentError(f"fetch {x.name!r} belongs to another graph than the session's")
            name = x.name
            if name not in self._index:
                self._index[name] = len(self.fetch_names)
                self.fetch_names.append(name)
            return ("fetch", self._index[name])
        if isinstance(x, _graph.Operation):
            if x.graph is not g:
                raise errors.InvalidArgumentError(f"target {x.name!r} belongs to another graph than the session's")
            self.target_names.append(x.name)
            return ("target", None)
        raise TypeError(f"cannot fetch a {type(x).__name__}: fetches are Tensors, Operations, names, "
                        "or lists, tuples and dicts of them")

    def _flatten(self, f):
        if f is None:
            return ("none", None)
        if hasattr(f, "_fetch_structure"):  # a tf.SparseTensor: its three tensors, rebuilt as SparseTensorValue
            return self._flatten(f._fetch_structure())
        if isinstance(f, (_graph.Tensor, _graph.Operation, str)) or hasattr(f, "_as_graph_tensor"):
            return ("leaf", self._leaf(f))
        if isinstance(f, collections.abc.Mapping):
            return ("dict", type(f), [(k, self._flatten(v)) for k, v in f.items()])
        if isinstance(f, tuple) and hasattr(f, "_fields"):
            return ("namedtuple", type(f), [self._flatten(v) for v in f])
        if isinstance(f, (list, tuple)):
            return ("seq", type(f), [self._flatten(v) for v in f])
        raise TypeError(f"cannot fetch a {type(f).__name__}: fetches are Tensors, Operations, names, "
                        "or lists, tuples and dicts of them")

    def builder(self):
        """build as a function of the values alone, made once: plain indexing for a leaf or a list or
        tuple of leaves (what a make_callable function returns each step), else build itself."""
        def index(node):  # the value's index, or None where the structure holds None
            if node[0] == "leaf" and node[1][0] == "fetch":
                return node[1][1]
            return None
        s = self.structure
        if s[0] in ("none", "leaf"):
            i = index(s)
            return (lambda values: None) if i is None else (lambda values: values[i])
        if s[0] == "seq" and s[1] in (list, tuple) and all(n[0] in ("none", "leaf") for n in s[2]):
            picks = [index(n) for n in s[2]]
            if s[1] is list:
                return lambda values: [None if i is None else values[i] for i in picks]
            return lambda values: tuple(None if i is None else values[i] for i in picks)
        return self.build

    def build(self, values, node=None):
        node = self.structure if node is None else node
        kind = node[0]
        if kind == "none":
            return None
        if kind == "leaf":
            what, i = node[1]
            return values[i] if what == "fetch" else None
        if kind == "dict":
            t, items = node[1], node[2]
            out = {k: self.build(values, v) for k, v in items}
            try:
                return t(out)
            except TypeError:
                return out
        if kind == "namedtuple":
            return node[1](*[self.build(values, v) for v in node[2]])
        t, items = node[1], node[2]
        return t(self.build(values, v) for v in items)


def _feed_value(key, value, name):
    """value as an ndarray of the key's dtype, by NumPy's same-kind casting; InvalidArgumentError otherwise."""
    want = key.dtype
    npd = want.as_numpy_dtype
    if npd is None:
        raise errors.InvalidArgumentError(f"cannot feed {name!r}: its dtype {want.name} cannot be fed from Python")
    conv = getattr(value, "_as_graph_tensor", None)
    if isinstance(value, _graph.Tensor) or conv is not None:
        raise errors.InvalidArgumentError(f"cannot feed {name!r} with a symbolic tensor; feed a value (array-like)")
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except Exception as e:  # noqa: BLE001 - NumPy raises many kinds for odd objects
        raise errors.InvalidArgumentError(f"cannot feed {name!r}: {type(value).__name__} is not array-like ({e})") from None
    if arr.dtype != npd:
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise errors.InvalidArgumentError(
                f"cannot feed {name!r} ({want.name}) with a {arr.dtype} value: it is not numeric")
        ok = np.can_cast(arr.dtype, npd, casting="same_kind")
        if not ok and not isinstance(value, np.ndarray) and arr.dtype.kind in "iub" and want.is_integer:
            ok = True  # Python ints: checked for range below
        if not ok:
            raise errors.InvalidArgumentError(
                f"cannot feed {name!r}: it is {want.name} but the value is {arr.dtype} "
                f"(convert it explicitly, e.g. np.asarray(value, np.{npd}))")
        if want.is_integer and arr.dtype.kind in "iu" and arr.size:
            info = np.iinfo(npd)
            if arr.min() < info.min or arr.max() > info.max:
                raise errors.InvalidArgumentError(f"cannot feed {name!r}: a value does not fit in {want.name}")
        arr = arr.astype(npd)
    shape = key.shape
    if shape.rank is not None:
        ok = arr.ndim == shape.rank and all(d is None or d == a for d, a in zip(shape.dims, arr.shape))
        if not ok:
            raise errors.InvalidArgumentError(
                f"cannot feed {name!r}: it has shape {shape} but the value has shape {list(arr.shape)}")
    return arr


def _trace_args(options):
    """(trace_file, trace_max_events) of a step run with options (an sf.RunOptions; others are ignored)."""
    if isinstance(options, RunOptions):
        return str(options.trace_file or ""), int(options.trace_max_events)
    return "", 100000


class _BaseSession:
    def __init__(self, graph):
        self.graph = graph
        self._s = None

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Runs one step; returns fetches' structure with arrays (None for operations) or raises sf.errors.*."""
        # options: an sf.RunOptions (its trace_file is honoured; other objects,
        # such as TensorFlow's, are ignored); run_metadata is accepted for
        # TensorFlow code and ignored.
        if self._s is None or self._s.closed:
            raise errors.FailedPreconditionError("the session is closed")
        self.graph._apply_device_functions()
        plan = _FetchPlan(self.graph, fetches)
        feeds = []
        host = self._host_feeds(plan.target_names)
        if host:
            host.update(feed_dict or {})
            feed_dict = host
        for key, value in (feed_dict or {}).items():
            key = self._feed_key(key, "feed_dict keys")
            arr = _feed_value(key, value, key.name)
            feeds.append((key.name, arr, key.dtype.value))
        values = self._s.run(feeds, plan.fetch_names, plan.target_names, *_trace_args(options))
        return plan.build(values)

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """A function running run(fetches, feed_dict) with the feeds given positionally, as in TensorFlow 1.x.

        f = sess.make_callable([loss, train], [x, labels]); loss_value, _ = f(xb, yb)

        fetches are what run() takes (the result has their structure); feed_list
        holds the tensors (or names) fed, in the order the function takes their
        values. Names, dtypes, shapes and the step's fetch and target lists are
        resolved here, once: a call converts its values by run()'s rules (an
        ndarray of the feed's dtype and shape is lent as it is, and a scalar for
        a scalar feed is made without calling back into Python) and runs the step.
        With accept_options the function also takes options= (sf.RunOptions)
        and run_metadata= (ignored) as keywords. A call with the wrong number
        of values raises InvalidArgumentError; the errors of run() otherwise.
        """
        if self._s is None or self._s.closed:
            raise errors.FailedPreconditionError("the session is closed")
        self.graph._apply_device_functions()
        if self.graph.__dict__.get("_host_feeders"):
            # Dataset.from_generator: each step feeds the generators' generation (run() does it)
            def run_fed(*feed_values, options=None, run_metadata=None):
                if len(feed_values) != len(feed_list or []):
                    raise errors.InvalidArgumentError(f"the callable takes {len(feed_list or [])} values, "
                                                      f"got {len(feed_values)}")
                return self.run(fetches, dict(zip(feed_list or [], feed_values)), options)
            return run_fed
        plan = _FetchPlan(self.graph, fetches)
        keys = [self._feed_key(k, "feed_list entries") for k in (feed_list or [])]
        names = [k.name for k in keys]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise errors.InvalidArgumentError(f"feed_list names {name!r} twice")
        feeds = []
        for k in keys:
            npd = k.dtype.as_numpy_dtype
            shape = k.shape
            dims = None if shape.rank is None else [-1 if d is None else d for d in shape.dims]
            feeds.append((k.name, k.dtype.value, None if npd is None else np.dtype(npd), dims))

        def convert(i, value):
            return _feed_value(keys[i], value, names[i])

        step = _core.Callable(self._s, feeds, plan.fetch_names, plan.target_names, convert)
        build = plan.builder()
        if accept_options:
            def run_callable(*feed_values, options=None, run_metadata=None):
                return build(step(feed_values, *_trace_args(options)))
        else:
            def run_callable(*feed_values):
                return build(step(feed_values))
        return run_callable

    def _host_feeds(self, target_names):
        # Dataset.from_generator: its generator runs in a thread of this process for each session.
        if not self.graph.__dict__.get("_host_feeders"):
            return {}
        from .data import host_feeds
        return host_feeds(self.graph, self, target_names)

    def _feed_key(self, key, what):
        """key (a Tensor, something convertible to one, or a name) as a Tensor of the session's graph."""
        if isinstance(key, str):
            key = self.graph.get_tensor_by_name(key)
        conv = getattr(key, "_as_graph_tensor", None)
        if conv is not None:
            key = conv()
        if not isinstance(key, _graph.Tensor):
            raise TypeError(f"{what} are Tensors or names, got {type(key).__name__}")
        if key.graph is not self.graph:
            raise errors.InvalidArgumentError(f"feed {key.name!r} belongs to another graph than the session's")
        return key

    def close(self):
        """Stops the session: a step another thread runs that waits on a queue ends with AbortedError
        (as TensorFlow's close cancels pending steps), and the variables (local) go with the last
        step still running. Idempotent."""
        if self._s is not None:
            self._s.close()

    @property
    def closed(self):
        return self._s is None or self._s.closed

    @contextlib.contextmanager
    def as_default(self):
        """Makes this the default session inside the block: Tensor.eval() and Operation.run() use it (TF 1.x)."""
        _default_sessions.stack.append(self)
        try:
            yield self
        finally:
            stack = _default_sessions.stack
            if stack and stack[-1] is self:
                stack.pop()
            elif self in stack:
                stack.remove(self)

    def __enter__(self):
        # As TF 1.x: inside `with sess:` the session is the default one and its graph the default graph.
        self._entered = [self.graph.as_default(), self.as_default()]
        for cm in self._entered:
            cm.__enter__()
        return self

    def __exit__(self, *exc):
        for cm in reversed(getattr(self, "_entered", [])):
            cm.__exit__(None, None, None)
        self._entered = []
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _save(self, directory, global_step, keep_last, incremental):
        return self._s.save_checkpoint(str(directory), int(global_step), int(keep_last), bool(incremental))

    def _restore(self, directory, checkpoint_id):
        return self._s.restore_checkpoint(str(directory), int(checkpoint_id))


def _session_args(what, args, kwargs):
    """(graph, options, config, target) of Session(...): shardflow's order (graph, options, config, target)
    or, when the first argument is a string, TF 1.x's (target, graph, config); the rest stays in kwargs."""
    order = ("target", "graph", "config") if args and isinstance(args[0], str) else \
        ("graph", "options", "config", "target")
    if len(args) > len(order):
        raise TypeError(f"{what}() takes at most {len(order)} positional arguments ({len(args)} given)")
    bound = dict(zip(order, args))
    for k in ("graph", "options", "config", "target"):
        if k in kwargs:
            if k in bound:
                raise TypeError(f"{what}() got multiple values for argument '{k}'")
            bound[k] = kwargs.pop(k)
    return bound.get("graph"), bound.get("options"), bound.get("config"), bound.get("target") or ""


class Session(_BaseSession):
    """Runs a graph on the embedded in-process actor runtime (the C++ sf::Session).

    options: a SessionOptions, a dict of its fields, or its fields as keywords;
    TypeError for an unknown one. With a target (a tf.train.Server's,
    "shardflow://..."), the session runs on that server's ps nodes as a
    cluster session instead (TF 1.x's tf.Session(server.target)).
    """

    def __init__(self, *args, **kwargs):
        graph, options, config, target = _session_args("Session", args, kwargs)
        graph = graph if graph is not None else _graph.get_default_graph()
        if target:
            # A tf.train.Server's target: the session runs on its ps nodes (shardflow/distribute.py).
            from . import distribute
            super().__init__(graph)
            self.options = None
            self._s = distribute._connect(graph, target)
            return
        super().__init__(graph)
        if config is not None:
            if options is not None or kwargs:
                raise TypeError("give config (TF 1.x's ConfigProto) or options, not both")
            if not isinstance(config, ConfigProto):
                raise TypeError(f"config must be a tf.ConfigProto, got {type(config).__name__}")
            options = config._options()
        if options is None:
            options = SessionOptions(**kwargs)
        elif kwargs:
            raise TypeError("give either options or keyword options, not both")
        elif isinstance(options, dict):
            options = SessionOptions(**options)
        self.options = options
        self._s = _core.local_session(graph._g, options.compute_threads, options.scheduler_threads,
                                      options.num_cpu_devices)


class GPUOptions:
    """TF 1.x's GPUOptions; accepted for programs that set them, and without effect (shardflow runs on CPUs)."""

    def __init__(self, allow_growth=False, per_process_gpu_memory_fraction=1.0, visible_device_list="",
                 allocator_type="", force_gpu_compatible=False):
        self.allow_growth = allow_growth
        self.per_process_gpu_memory_fraction = per_process_gpu_memory_fraction
        self.visible_device_list = visible_device_list
        self.allocator_type = allocator_type
        self.force_gpu_compatible = force_gpu_compatible


class ConfigProto:
    """TF 1.x's session configuration, as Session(config=) takes it.

    intra_op_parallelism_threads sets the compute threads and
    inter_op_parallelism_threads the scheduler threads (0: the defaults);
    device_count={"CPU": n} the CPU devices to place over. GPU settings
    (gpu_options, device_count's "GPU"), allow_soft_placement and
    log_device_placement are accepted without effect: shardflow places every
    op on a CPU device. Another field raises ValueError, as the protocol
    message does.
    """

    def __init__(self, intra_op_parallelism_threads=0, inter_op_parallelism_threads=0, device_count=None,
                 allow_soft_placement=False, log_device_placement=False, gpu_options=None, **unknown):
        if unknown:
            raise ValueError(f'Protocol message ConfigProto has no "{next(iter(unknown))}" field.')
        self.intra_op_parallelism_threads = intra_op_parallelism_threads
        self.inter_op_parallelism_threads = inter_op_parallelism_threads
        self.device_count = dict(device_count or {})
        self.allow_soft_placement = allow_soft_placement
        self.log_device_placement = log_device_placement
        self.gpu_options = gpu_options if gpu_options is not None else GPUOptions()

    def _options(self):
        return SessionOptions(compute_threads=int(self.intra_op_parallelism_threads),
                              scheduler_threads=int(self.inter_op_parallelism_threads),
                              num_cpu_devices=int(self.device_count.get("CPU", 1)))


class InteractiveSession(Session):
    """A Session that makes itself the default session when made, until closed (TF 1.x's, for shells and notebooks).

    x.eval() and op.run() then need no session. Given a graph, that graph is
    also the default graph until close().
    """

    def __init__(self, *args, **kwargs):
        graph, options, config, target = _session_args("InteractiveSession", args, kwargs)
        explicit_graph = graph is not None
        super().__init__(graph, options, config=config, target=target, **kwargs)
        self._interactive = [self.as_default()]
        if explicit_graph:
            self._interactive.insert(0, self.graph.as_default())
        for cm in self._interactive:
            cm.__enter__()

    def close(self):
        """Closes the session and stops it being the default one (and its graph the default graph)."""
        for cm in reversed(getattr(self, "_interactive", [])):
            try:
                cm.__exit__(None, None, None)
            except (IndexError, ValueError):  # already left, e.g. from another thread's close
                pass
        self._interactive = []
        super().close()


class ClusterSession(_BaseSession):
    """Runs a graph on the nodes of a cluster (the C++ sf::ClusterSession).

    address: any member's "HOST:PORT"; tls_dir: the cluster's credentials
    directory (`shardflow certs init DIR`; the session uses its credential
    tls_name, default "session"), or insecure=True for plaintext nodes.
    step_progress_timeout_ms: a step fails with DeadlineExceededError once
    none of its ops finished on any node for this long (0: never).
    Raises UnavailableError when a member cannot be reached and
    PermissionDeniedError when TLS with it fails.
    """

    def __init__(self, graph=None, address=None, tls_dir=None, tls_name="", insecure=False, tasks=0, max_tasks=0,
                 request_timeout_ms=10000, checkpoint_dir="", elastic=True, cluster=None,
                 step_progress_timeout_ms=60000):
        graph = graph if graph is not None else _graph.get_default_graph()
        super().__init__(graph)
        if cluster is not None:
            address = address or cluster.address
            tls_dir = tls_dir if tls_dir is not None else cluster.tls_dir
        if not address:
            raise errors.InvalidArgumentError("ClusterSession needs an address (HOST:PORT) or a cluster")
        if not tls_dir and not insecure:
            raise errors.InvalidArgumentError("ClusterSession needs tls_dir (shardflow certs init) or insecure=True")
        self._s = _core.cluster_session(graph._g, address, str(tls_dir or ""), tls_name, bool(insecure), tasks,
                                        max_tasks, request_timeout_ms, checkpoint_dir, elastic,
                                        step_progress_timeout_ms)

    @property
    def tasks(self):
        """The members steps run on, by task index (HOST:PORT)."""
        return self._s.tasks()
