"""Graphs, their operations and symbolic tensors, as in TensorFlow 1.x.

    g = sf.Graph()
    with g.as_default(), g.name_scope("layer1"):
        x = sf.placeholder(sf.float32, [None, 784], name="x")
        y = x @ w + b          # operators add MatMul and Add nodes

A Graph wraps the C++ sf::Graph; a Tensor names one output of one node and
an Operation one node. A builder that fails raises at once (the C++ error
message, naming node, op and shapes) and leaves the graph usable.
Thread-safety: build a graph from one thread; do not add nodes while a
session runs a step on it from another thread.
"""

import contextlib
import threading

import numpy as np

from . import _core
from . import dtypes as _dt
from . import errors

__all__ = ["Graph", "Tensor", "Operation", "TensorShape", "Dimension", "get_default_graph",
           "reset_default_graph", "convert_to_tensor", "constant", "placeholder", "name_scope",
           "device", "control_dependencies", "group", "identity", "no_op"]


class TensorShape:
    """A partial shape: unknown rank (dims is None) or dims with None for unknown ones."""

    __slots__ = ("_dims",)

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims._dims
        if isinstance(dims, (int, np.integer)) and not isinstance(dims, (bool, np.bool_)):
            dims = (dims,)  # TF's shorthand: placeholder(shape=100) is a vector of 100
        if dims is None:
            self._dims = None
        else:
            dims = [d.value if isinstance(d, Dimension) else d for d in dims]
            self._dims = tuple(None if (d is None or int(d) < 0) else int(d) for d in dims)

    @property
    def dims(self):
        """The dims as a tuple of ints and None (None when the rank is unknown)."""
        return self._dims

    @classmethod
    def _from_core(cls, s):
        return cls(None if s is None else [None if d < 0 else d for d in s])

    def _to_core(self):
        return None if self._dims is None else [-1 if d is None else d for d in self._dims]

    @property
    def rank(self):
        """The number of dims, or None when unknown."""
        return None if self._dims is None else len(self._dims)

    ndims = rank

    def is_fully_defined(self):
        """True when the rank and every dim are known."""
        return self._dims is not None and all(d is not None for d in self._dims)

    def as_list(self):
        """The dims as a list; ValueError when the rank is unknown."""
        if self._dims is None:
            raise ValueError("as_list() is not defined on a shape of unknown rank")
        return list(self._dims)

    def num_elements(self):
        """The element count, or None when not fully defined."""
        return int(np.prod(self._dims)) if self.is_fully_defined() else None

    def __len__(self):
        if self._dims is None:
            raise ValueError("the rank of this shape is unknown")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("cannot iterate over a shape of unknown rank")
        return iter(self._dims)

    def __getitem__(self, i):
        if self._dims is None:
            return None
        return self._dims[i]

    def __eq__(self, other):
        if isinstance(other, TensorShape):
            return self._dims == other._dims
        if isinstance(other, (list, tuple)):
            return self._dims is not None and self._dims == tuple(getattr(d, "value", d) for d in other)
        return NotImplemented

    def __hash__(self):
        return hash(self._dims)

    def __repr__(self):
        if self._dims is None:
            return "TensorShape(None)"
        return "TensorShape([%s])" % ", ".join("None" if d is None else str(d) for d in self._dims)


class Dimension:
    """One dim of a TF 1.x shape (what get_shape()[i] gives): .value is an int, or None when unknown.

    As in TF 1.x, int() of an unknown one raises TypeError, and comparing or
    computing with an unknown one gives None (unknown).
    """

    __slots__ = ("_value",)

    def __init__(self, value):
        if isinstance(value, Dimension):
            value = value._value
        if value is not None:
            value = int(value)
            if value < 0:
                raise ValueError(f"a Dimension cannot be negative, got {value}")
        self._value = value

    @property
    def value(self):
        return self._value

    def __int__(self):
        if self._value is None:
            raise TypeError("int() of an unknown Dimension (its value is None)")
        return self._value

    __index__ = __int__

    def __repr__(self):
        return f"Dimension({self._value})"

    def __str__(self):
        return "?" if self._value is None else str(self._value)

    def __hash__(self):
        return hash(self._value)

    def _other(self, other):
        return other._value if isinstance(other, Dimension) else (None if other is None else int(other))

    def _compare(self, other, fn):
        o = self._other(other)
        return None if self._value is None or o is None else fn(self._value, o)

    def __eq__(self, other):
        try:
            return self._compare(other, lambda a, b: a == b)
        except (TypeError, ValueError):
            return NotImplemented

    def __ne__(self, other):
        try:
            return self._compare(other, lambda a, b: a != b)
        except (TypeError, ValueError):
            return NotImplemented

    def __lt__(self, other): return self._compare(other, lambda a, b: a < b)
    def __le__(self, other): return self._compare(other, lambda a, b: a <= b)
    def __gt__(self, other): return self._compare(other, lambda a, b: a > b)
    def __ge__(self, other): return self._compare(other, lambda a, b: a >= b)

    def _arith(self, other, fn):
        o = self._other(other)
        return Dimension(None if self._value is None or o is None else fn(self._value, o))

    def __add__(self, o): return self._arith(o, lambda a, b: a + b)
    def __radd__(self, o): return self._arith(o, lambda a, b: b + a)
    def __sub__(self, o): return self._arith(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._arith(o, lambda a, b: b - a)
    def __mul__(self, o): return self._arith(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._arith(o, lambda a, b: b * a)
    def __floordiv__(self, o): return self._arith(o, lambda a, b: a // b)
    def __rfloordiv__(self, o): return self._arith(o, lambda a, b: b // a)
    def __mod__(self, o): return self._arith(o, lambda a, b: a % b)


class _TF1Shape(TensorShape):
    """TensorShape as TF 1.x's get_shape() gave it: indexing gives Dimension objects (with .value)."""

    __slots__ = ()

    @property
    def dims(self):
        """The dims as a list of Dimension (None when the rank is unknown)."""
        return None if self._dims is None else [Dimension(d) for d in self._dims]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return _TF1Shape(None if self._dims is None else self._dims[i])
        return Dimension(None if self._dims is None else self._dims[i])

    def __iter__(self):
        if self._dims is None:
            raise ValueError("cannot iterate over a shape of unknown rank")
        return iter([Dimension(d) for d in self._dims])


def _as_core_shape(shape):
    if shape is None:
        return None
    return TensorShape(shape)._to_core()


# ---- the default graph ------------------------------------------------------

class _DefaultStack(threading.local):
    def __init__(self):
        super().__init__()
        self.stack = []


_default = _DefaultStack()
_global_default = None


def get_default_graph():
    """The innermost graph of `with g.as_default()`, else the process's global graph."""
    global _global_default
    if _default.stack:
        return _default.stack[-1]
    if _global_default is None:
        _global_default = Graph()
    return _global_default


def reset_default_graph():
    """Replaces the global default graph by a new empty one; error inside as_default()."""
    global _global_default
    if _default.stack:
        raise AssertionError("reset_default_graph() called inside a `with graph.as_default()` block")
    _global_default = Graph()


class Graph:
    """A dataflow graph over the standard ops (the C++ sf::Graph)."""

    def __init__(self, _core_graph=None):
        self._g = _core_graph if _core_graph is not None else _core.Graph()
        self._control_stack = []
        self._ops = {}  # node id -> Operation, so identities stay stable
        self._global_step = None  # tf.train.get_or_create_global_step's variable
        self._var_store = {}  # tf.get_variable's variables by full name
        self._var_scopes = []  # tf.variable_scope's open scopes, innermost last
        self._var_scope_counts = {}  # times each variable scope name was opened (unique default names)
        self._collections = {}  # tf.add_to_collection's lists by key
        self._name_scopes = []  # [name, core scope] of each open name_scope, innermost last
        self._device_fns = []  # tf.device(function)'s open functions, innermost last
        self._device_fns_done = 0  # nodes below this id have had the functions open at their creation
        self._device_fns_running = False

    # ---- scopes ----
    @contextlib.contextmanager
    def as_default(self):
        """Makes this the graph that sf.ops and friends build into, inside the block."""
        _default.stack.append(self)
        try:
            yield self
        finally:
            _default.stack.pop()

    @contextlib.contextmanager
    def name_scope(self, name):
        """Prefixes the names of nodes added inside the block with "name/" (scopes nest).

        Yields the full prefix ("outer/name/"), as TF 1.x's `with tf.name_scope(...) as scope`.
        """
        if not isinstance(name, str) or not name:
            raise errors.InvalidArgumentError(f"a name scope needs a non-empty string, got {name!r}")
        entry = [name, self._g.name_scope(name)]
        self._name_scopes.append(entry)
        try:
            yield self._g.scoped_name("")  # "outer/name/", as TF 1.x's `as scope`
        finally:
            entry[1].close()
            self._name_scopes.remove(entry)

    @contextlib.contextmanager
    def _absolute_name_scope(self, prefix):
        """Nodes added inside are named "prefix/..." whatever name scopes are open (tf.get_variable's names).

        When a C++ builder has a scope of its own open (a cond branch, a loop
        body), the open scopes are kept and prefix goes under them.
        """
        expected = "".join(n + "/" for n, _ in self._name_scopes)
        lifted = self._g.scoped_name("") == expected
        if lifted:
            for entry in reversed(self._name_scopes):
                entry[1].close()
        inner = self._g.name_scope(prefix) if prefix else None
        try:
            yield
        finally:
            if inner is not None:
                inner.close()
            if lifted:
                for entry in self._name_scopes:
                    entry[1] = self._g.name_scope(entry[0])

    @contextlib.contextmanager
    def device(self, device_name):
        """Requests device_name ("/job:worker/task:1/device:CPU:0", partial names too) for nodes added inside.

        device_name may also be a function, as TF 1.x's tf.device(function):
        it gets each Operation made inside (innermost function first, each
        seeing the device the previous one gave) and returns its device name
        (a string, an object with to_string(), or None for none). The graph's
        C++ builders add nodes without calling back, so the functions run on
        the nodes made under them when a device scope opens or closes, when
        an Operation's device is read and before a session runs the graph.
        """
        if device_name is None:
            device_name = ""
        self._apply_device_functions()
        if callable(device_name):
            self._device_fns.append(device_name)
            try:
                yield
            finally:
                self._apply_device_functions()
                self._device_fns.pop()
            return
        if not isinstance(device_name, str):
            to_string = getattr(device_name, "to_string", None)
            if to_string is None:
                raise errors.InvalidArgumentError(f"a device must be a string or a function, got {device_name!r}")
            device_name = to_string()
        s = self._g.device_scope(device_name)
        try:
            yield
        finally:
            self._apply_device_functions()
            s.close()

    def _apply_device_functions(self):
        """Gives the nodes made since the last call the devices the open device functions choose."""
        n = self._g.num_nodes()
        if self._device_fns and not self._device_fns_running:
            self._device_fns_running = True  # a function reading op.device must not start another pass
            try:
                self._run_device_functions(n)
            finally:
                self._device_fns_running = False
        self._device_fns_done = n

    def _run_device_functions(self, n):
        # A variable made beside another one (an optimizer's slot: one update op takes both handles) goes
        # where that one went without asking the functions, as TF 1.x's colocate_with does for slots.
        done = self._device_fns_done
        beside = {}
        for nid in range(done, n):
            handles = sorted({src for src, _ in self._g.node_inputs(nid) if self._g.node_op(src) == "VarHandle"})
            for h in handles[1:]:
                if h >= done:
                    beside.setdefault(h, beside.get(handles[0], handles[0]))
        for nid in range(done, n):
            if nid in beside:
                d = self._g.node_device(beside[nid])
                if d != self._g.node_device(nid):
                    self._g.set_device(nid, d)
                continue
            op = self._op(nid)
            for fn in reversed(self._device_fns):
                d = fn(op)
                if d is None:
                    d = ""
                elif not isinstance(d, str):
                    to_string = getattr(d, "to_string", None)
                    if to_string is None:
                        raise errors.InvalidArgumentError(
                            f"a device function returned {d!r} for {op.name!r}: expected a device name")
                    d = to_string()
                if d != self._g.node_device(nid):
                    self._g.set_device(nid, d)

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        """Nodes added inside run after every given Operation or Tensor's node (None clears)."""
        if control_inputs is None:
            saved, self._control_stack = self._control_stack, []
            try:
                yield
            finally:
                self._control_stack = saved
            return
        ids = []
        for c in control_inputs:
            ids.append(_node_of(c, self, "control_dependencies"))
        self._control_stack.append(ids)
        try:
            yield
        finally:
            self._control_stack.pop()

    def _current_control_inputs(self):
        out = []
        for ids in self._control_stack:
            out.extend(ids)
        return out

    # ---- nodes ----
    def _add(self, op, inputs, attrs, name=None):
        """Adds a node: inputs are Tensors of this graph; attrs (name, kind, value) triples."""
        core_inputs = []
        for t in inputs:
            if t.graph is not self:
                raise errors.InvalidArgumentError(
                    f"input {t.name!r} of {op} belongs to another graph than the one being built")
            core_inputs.append((t._node, t._index))
        nid = self._g.add_node(op, core_inputs, attrs, name or "", self._current_control_inputs())
        return self._op(nid)

    def _op(self, nid):
        op = self._ops.get(nid)
        if op is None:
            op = Operation(self, nid)
            self._ops[nid] = op
        return op

    def get_operations(self):
        """Every Operation in id order."""
        return [self._op(i) for i in range(self._g.num_nodes())]

    def get_operation_by_name(self, name):
        """The Operation named name; NotFoundError otherwise."""
        return self._op(self._g.find_node(name))

    def get_tensor_by_name(self, name):
        """The Tensor "name" (output 0) or "name:k"; NotFoundError otherwise."""
        n, i = self._g.find_output(name)
        return Tensor(self, n, i)

    def as_graph_element(self, obj):
        """obj (Tensor, Operation or name) as a Tensor or Operation of this graph."""
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise errors.InvalidArgumentError(f"{obj.name!r} belongs to another graph")
            return obj
        if isinstance(obj, str):
            if ":" in obj:
                return self.get_tensor_by_name(obj)
            op = self.get_operation_by_name(obj)
            return op.outputs[0] if op.outputs else op
        raise TypeError(f"cannot interpret {obj!r} as an element of the graph")

    @property
    def num_nodes(self):
        """The number of nodes in the graph."""
        return self._g.num_nodes()

    # ---- save / load ----
    def save(self, path):
        """Writes the graph as a GraphDef file (what sf::SaveGraph writes); raises naming the file."""
        self._g.save(str(path))

    def to_bytes(self):
        """The GraphDef bytes save() would write."""
        return self._g.to_bytes()

    @classmethod
    def load(cls, path):
        """A graph read from a GraphDef file written by Python or C++ (sf::LoadGraph)."""
        return cls(_core.Graph.load(str(path)))

    @classmethod
    def from_bytes(cls, data, source="<graph bytes>"):
        """A graph read from GraphDef bytes."""
        return cls(_core.Graph.from_bytes(bytes(data), source))

    def __repr__(self):
        return f"<sf.Graph with {self.num_nodes} nodes>"


def _node_of(x, graph, what):
    if isinstance(x, Operation):
        if x.graph is not graph:
            raise errors.InvalidArgumentError(f"{what}: {x.name!r} belongs to another graph")
        return x._node
    if isinstance(x, Tensor):
        if x.graph is not graph:
            raise errors.InvalidArgumentError(f"{what}: {x.name!r} belongs to another graph")
        return x._node
    if isinstance(x, str):
        return graph._g.find_node(x)
    raise TypeError(f"{what} takes Operations or Tensors, got {type(x).__name__}")


class Operation:
    """One node of a graph: its name, op type, inputs, outputs, device and attributes."""

    __slots__ = ("graph", "_node", "__weakref__")

    def __init__(self, graph, node):
        self.graph = graph
        self._node = node

    @property
    def name(self):
        return self.graph._g.node_name(self._node)

    @property
    def type(self):
        """The op's name ("MatMul")."""
        return self.graph._g.node_op(self._node)

    @property
    def device(self):
        """The device requested for the node ("" when the placer chooses)."""
        self.graph._apply_device_functions()
        return self.graph._g.node_device(self._node)

    @property
    def inputs(self):
        """The Tensors this node reads, in input order."""
        return [Tensor(self.graph, n, i) for n, i in self.graph._g.node_inputs(self._node)]

    @property
    def control_inputs(self):
        """The Operations this node runs after."""
        return [self.graph._op(n) for n in self.graph._g.node_control_inputs(self._node)]

    @property
    def outputs(self):
        """The node's outputs as Tensors (empty for a node run for its effect)."""
        return [Tensor(self.graph, self._node, i) for i in range(self.graph._g.node_num_outputs(self._node))]

    def get_attr(self, name):
        """The value of attribute name; NotFoundError when the node has none of that name."""
        attrs = self.graph._g.node_attrs(self._node)
        if name not in attrs:
            raise errors.NotFoundError(f"node '{self.name}' (op {self.type}) has no attribute '{name}'")
        kind, value = attrs[name]
        return _attr_from_core(kind, value)

    @property
    def node_def(self):
        """{attribute: value} of the node."""
        return {k: _attr_from_core(kind, v) for k, (kind, v) in self.graph._g.node_attrs(self._node).items()}

    def run(self, feed_dict=None, session=None):
        """Runs this operation in session (default: the default session), as TF 1.x's Operation.run."""
        from . import session as _session
        _session._run_in_default(self, feed_dict, session, "execute operation")

    def __eq__(self, other):
        return isinstance(other, Operation) and other.graph is self.graph and other._node == self._node

    def __hash__(self):
        return hash((id(self.graph), self._node))

    def __repr__(self):
        return f"<sf.Operation '{self.name}' type={self.type}>"


def _attr_from_core(kind, value):
    if kind == "dtype":
        return _dt.DType(value)
    if kind == "dtype list":
        return [_dt.DType(v) for v in value]
    if kind == "shape":
        return TensorShape._from_core(value)
    return value


class Tensor:
    """One output of one node: a symbolic value computed when a session runs it."""

    __slots__ = ("graph", "_node", "_index", "__weakref__")
    # NumPy must defer to our operators (ndarray + Tensor -> Tensor.__radd__).
    __array_priority__ = 100

    def __init__(self, graph, node, index=0):
        self.graph = graph
        self._node = node
        self._index = index

    @property
    def op(self):
        return self.graph._op(self._node)

    @property
    def value_index(self):
        return self._index

    @property
    def name(self):
        """"node" for output 0, "node:k" otherwise (what Session.run and feeds accept)."""
        return self.graph._g.output_name((self._node, self._index))

    @property
    def dtype(self):
        return _dt.DType(self.graph._g.output_dtype((self._node, self._index)))

    @property
    def shape(self):
        return TensorShape._from_core(self.graph._g.output_shape((self._node, self._index)))

    def get_shape(self):
        """The static shape as TF 1.x gave it: as_list(), ndims, and Dimension objects (.value) by index."""
        return _TF1Shape(self.shape)

    def eval(self, feed_dict=None, session=None):
        """This tensor's value in session (default: the default session), as TF 1.x's Tensor.eval."""
        from . import session as _session
        return _session._run_in_default(self, feed_dict, session, "evaluate tensor")

    @property
    def device(self):
        return self.op.device

    def _ref(self):
        return (self._node, self._index)

    def __eq__(self, other):
        # Identity, as in TensorFlow 1.x: Tensors are dict keys (feed_dict).
        return isinstance(other, Tensor) and other.graph is self.graph and other._ref() == self._ref()

    def __hash__(self):
        return hash((id(self.graph), self._node, self._index))

    def __bool__(self):
        raise TypeError("a symbolic sf.Tensor has no truth value; use sf.cond for graph conditionals")

    def __len__(self):
        d = self.shape
        if d.rank is None or d.rank == 0 or d[0] is None:
            raise TypeError(f"len() of {self.name!r} is unknown (shape {d})")
        return d[0]

    def __iter__(self):
        raise TypeError("a symbolic sf.Tensor is not iterable")

    def __array__(self, dtype=None):
        raise TypeError(f"{self.name!r} is a symbolic sf.Tensor with no value: run it in a Session "
                        "(session.run) to get a NumPy array")

    def __repr__(self):
        return f"<sf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    # ---- operators ----
    def __add__(self, o): return _binary("Add", self, o)
    def __radd__(self, o): return _binary("Add", o, self)
    def __sub__(self, o): return _binary("Sub", self, o)
    def __rsub__(self, o): return _binary("Sub", o, self)
    def __mul__(self, o): return _binary("Mul", self, o)
    def __rmul__(self, o): return _binary("Mul", o, self)
    def __truediv__(self, o): return _binary("Div", self, o, true_div=True)
    def __rtruediv__(self, o): return _binary("Div", o, self, true_div=True)
    def __floordiv__(self, o): return _binary("FloorDiv", self, o)
    def __rfloordiv__(self, o): return _binary("FloorDiv", o, self)
    def __mod__(self, o): return _binary("FloorMod", self, o)
    def __rmod__(self, o): return _binary("FloorMod", o, self)
    def __pow__(self, o): return _binary("Pow", self, o)
    def __rpow__(self, o): return _binary("Pow", o, self)
    def __lt__(self, o): return _binary("Less", self, o)
    def __le__(self, o): return _binary("LessEqual", self, o)
    def __gt__(self, o): return _binary("Greater", self, o)
    def __ge__(self, o): return _binary("GreaterEqual", self, o)
    def __and__(self, o): return _binary("LogicalAnd", self, o)
    def __rand__(self, o): return _binary("LogicalAnd", o, self)
    def __or__(self, o): return _binary("LogicalOr", self, o)
    def __ror__(self, o): return _binary("LogicalOr", o, self)
    def __invert__(self): return _unary("LogicalNot", self)
    def __neg__(self): return _unary("Neg", self)
    def __abs__(self): return _unary("Abs", self)

    def __matmul__(self, o):
        return _matmul(self, o)

    def __rmatmul__(self, o):
        return _matmul(o, self)

    def __getitem__(self, key):
        return _strided_slice(self, key)


# ---- converting values to tensors ------------------------------------------

def _numpy_value(value, dtype=None):
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
        npd = dtype.as_numpy_dtype
        if npd is None:
            raise errors.InvalidArgumentError(f"cannot make a constant of dtype {dtype.name}")
        arr = np.asarray(value)
        if arr.dtype.kind in "fc" and dtype.is_integer:
            if not np.all(np.isfinite(arr)) or not np.all(np.equal(np.mod(arr, 1), 0)):
                raise errors.InvalidArgumentError(
                    f"cannot convert {value!r} to {dtype.name} without losing its fractional part")
        return np.asarray(arr, dtype=npd), dtype
    arr = np.asarray(value)
    if arr.dtype == np.float64 and not isinstance(value, (np.ndarray, np.floating)):
        arr = arr.astype(np.float32)  # Python floats are float32 by default, as in TensorFlow
    elif arr.dtype == np.int64 and not isinstance(value, (np.ndarray, np.integer)):
        if arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31):
            arr = arr.astype(np.int32)
    elif arr.dtype == object or arr.dtype.kind in "USV":
        raise errors.InvalidArgumentError(f"cannot convert a {type(value).__name__} to a tensor: {value!r:.80}")
    return arr, _dt.as_dtype(arr.dtype)


def constant(value, dtype=None, shape=None, name="Const"):
    """A Const node holding value (array-like, copied); shape reshapes or broadcasts a scalar."""
    g = get_default_graph()
    arr, dtype = _numpy_value(value, dtype)
    if shape is not None:
        shape = [int(d) for d in shape]
        arr = np.broadcast_to(arr, shape) if arr.size == 1 else arr.reshape(shape)
    arr = np.require(arr, requirements="C")
    return g._add("Const", [], [("value", "tensor", (arr, dtype.value))], name).outputs[0]


def convert_to_tensor(value, dtype=None, name=None, graph=None):
    """value as a Tensor: Tensors (and Variables) pass through, anything array-like becomes a Const."""
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != _dt.as_dtype(dtype):
            raise errors.InvalidArgumentError(
                f"{value.name!r} is {value.dtype.name}, but {_dt.as_dtype(dtype).name} is needed")
        return value
    conv = getattr(value, "_as_graph_tensor", None)
    if conv is not None:
        return conv()
    if graph is not None and graph is not get_default_graph():
        with graph.as_default():
            return constant(value, dtype=dtype, name=name or "Const")
    return constant(value, dtype=dtype, name=name or "Const")


def _ref_in(value, graph, what, dtype=None):
    """(node, index) of value as a tensor of graph; InvalidArgumentError naming what when it belongs to another graph."""
    with graph.as_default():
        t = convert_to_tensor(value, dtype=dtype)
    if t.graph is not graph:
        raise errors.InvalidArgumentError(f"{what} {t.name!r} belongs to another graph")
    return t._ref()


def _graph_of(*values):
    for v in values:
        if isinstance(v, Tensor):
            return v.graph
        conv = getattr(v, "_as_graph_tensor", None)
        if conv is not None:
            return conv().graph
    return get_default_graph()


def _binary(op, a, b, true_div=False):
    g = _graph_of(a, b)
    with g.as_default():
        # A plain number takes the dtype of the tensor on the other side (x * 2 stays float64).
        if isinstance(a, Tensor) or hasattr(a, "_as_graph_tensor"):
            a = convert_to_tensor(a)
            b = b if isinstance(b, Tensor) else convert_to_tensor(b, dtype=_scalar_dtype(b, a.dtype))
        else:
            b = convert_to_tensor(b)
            a = convert_to_tensor(a, dtype=_scalar_dtype(a, b.dtype))
        if true_div and a.dtype == b.dtype and a.dtype.is_integer:
            # Python's / on integers is true division, as in TensorFlow: int8, int16 and uint8
            # become float32 first, int32 and int64 float64 (the Div op itself truncates integers).
            to = _dt.float32 if a.dtype.size <= 2 else _dt.float64
            a, b = _cast(g, a, to), _cast(g, b, to)
        return _small_int_op(g, op, [a, b])


# Integer ops whose kernels exist for int32 and int64 only: on int8, int16 and uint8 they run in int32 and
# the result is cast back (exact for FloorDiv, FloorMod and Div's truncation; Neg, Abs and Square wrap on
# overflow as TF's and NumPy's do).
_WIDENED_OPS = ("FloorDiv", "FloorMod", "Div", "Neg", "Abs", "Square", "Sign")


def _small_int_op(g, op, inputs):
    """op on inputs, run in int32 and cast back when they are int8, int16 or uint8 and op is one of
    _WIDENED_OPS; raises what g._add raises."""
    dt = inputs[0].dtype
    if op in _WIDENED_OPS and dt in (_dt.int8, _dt.int16, _dt.uint8) and all(x.dtype == dt for x in inputs):
        out = g._add(op, [_cast(g, x, _dt.int32) for x in inputs], []).outputs[0]
        return _cast(g, out, dt)
    return g._add(op, inputs, []).outputs[0]


def _cast(g, x, dtype):
    return g._add("Cast", [x], [("DstT", "dtype", dtype.value)]).outputs[0]


def _scalar_dtype(value, like):
    if hasattr(value, "_as_graph_tensor"):
        return None
    if isinstance(value, (bool, np.bool_)):
        return like if like == _dt.bool_ else None
    if isinstance(value, (int, float, np.integer, np.floating)):
        if isinstance(value, (float, np.floating)) and like.is_integer and not float(value).is_integer():
            return None
        # A NumPy scalar says its kind: np.int32(5) stays an integer beside a float tensor (an op's
        # count or limit), where a plain 5 takes the other side's dtype.
        if isinstance(value, np.integer) and not like.is_integer:
            return None
        if isinstance(value, np.floating) and not like.is_floating:
            return None
        return like
    return like if isinstance(value, (list, tuple)) and like.is_floating else None


def _unary(op, x):
    return _small_int_op(x.graph, op, [x])


def _matmul(a, b):
    g = _graph_of(a, b)
    with g.as_default():
        a, b = convert_to_tensor(a), convert_to_tensor(b)
        ra, rb = a.shape.rank, b.shape.rank
        op = "MatMul" if (ra in (2, None) and rb in (2, None)) else "BatchMatMul"
        return g._add(op, [a, b], [("transpose_a", "bool", False), ("transpose_b", "bool", False)]).outputs[0]


def _strided_slice(x, key):
    if not isinstance(key, tuple):
        key = (key,)
    rank = x.shape.rank
    if any(k is Ellipsis for k in key):
        if rank is None:
            raise errors.InvalidArgumentError(f"indexing {x.name!r} with ... needs a known rank")
        i = key.index(Ellipsis)
        fill = rank - (len(key) - 1)
        key = key[:i] + (slice(None),) * fill + key[i + 1:]
    begin, end, strides = [], [], []
    begin_mask = end_mask = shrink = 0
    for axis, k in enumerate(key):
        if isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise errors.InvalidArgumentError("a slice step cannot be zero")
            begin.append(0 if k.start is None else int(k.start))
            end.append(0 if k.stop is None else int(k.stop))
            strides.append(step)
            if k.start is None:
                begin_mask |= 1 << axis
            if k.stop is None:
                end_mask |= 1 << axis
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            begin.append(k)
            end.append(k + 1 if k != -1 else 0)
            strides.append(1)
            if k == -1:
                end_mask |= 1 << axis
            shrink |= 1 << axis
        else:
            raise TypeError(f"sf.Tensor indices must be ints, slices or ..., got {type(k).__name__}")
    attrs = [("begin", "int list", begin), ("end", "int list", end), ("strides", "int list", strides),
             ("begin_mask", "int", begin_mask), ("end_mask", "int", end_mask),
             ("shrink_axis_mask", "int", shrink)]
    return x.graph._add("StridedSlice", [x], attrs, "strided_slice").outputs[0]


# ---- module-level helpers over the default graph ----------------------------

def placeholder(dtype, shape=None, name="Placeholder"):
    """A value fed at run time; shape None (any) or dims with None for unknown ones."""
    dtype = _dt.as_dtype(dtype)
    g = get_default_graph()
    return g._add("Placeholder", [], [("dtype", "dtype", dtype.value), ("shape", "shape", _as_core_shape(shape))],
                  name).outputs[0]


def name_scope(name, default_name=None, values=None):
    """get_default_graph().name_scope(name or default_name), TF 1.x's signature (values is not used)."""
    return get_default_graph().name_scope(name or default_name)


def device(device_name):
    """get_default_graph().device(device_name)."""
    return get_default_graph().device(device_name)


def control_dependencies(control_inputs):
    """get_default_graph().control_dependencies(control_inputs)."""
    return get_default_graph().control_dependencies(control_inputs)


def no_op(name="NoOp"):
    """A node that does nothing (a target grouping control inputs)."""
    return get_default_graph()._add("NoOp", [], [], name)


def group(*inputs, name="group"):
    """An Operation that runs after every input (Operations or Tensors)."""
    flat = []
    for x in inputs:
        flat.extend(x if isinstance(x, (list, tuple)) else [x])
    g = _graph_of(*flat) if flat else get_default_graph()
    with g.as_default(), g.control_dependencies(flat):
        return no_op(name)


def identity(x, name="Identity"):
    """x unchanged, as a new node."""
    x = convert_to_tensor(x)
    return x.graph._add("Identity", [x], [], name).outputs[0]
