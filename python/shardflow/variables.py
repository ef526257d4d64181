"""Variables: state kept by the session's variable shard actors between steps.

    w = sf.Variable(sf.random.truncated_normal([784, 10], stddev=0.05), name="w")
    init = sf.global_variables_initializer()
    sess.run(init); sess.run(w.assign_add(0.1 * grad))

A Variable is used as the Tensor of its value (operators, ops, fetches) and
has .handle for ops that take the variable itself.
"""

import numpy as np

from . import _core
from . import errors
from . import graph as _graph

__all__ = ["Variable", "global_variables_initializer", "trainable_variables", "global_variables",
           "local_variables_initializer"]


class Variable:
    """A variable: a handle, an initializer (run by global_variables_initializer) and a read."""

    # NumPy must defer to our operators.
    __array_priority__ = 100

    def __init__(self, initial_value, name="Variable", trainable=True, dtype=None):
        if not isinstance(name, str) or not name:
            raise errors.InvalidArgumentError(f"a Variable needs a non-empty name, got {name!r}")
        init = _graph.convert_to_tensor(initial_value, dtype=dtype)
        g = init.graph
        read, handle = _core.variable(g._g, name, init._ref(), bool(trainable))
        self._read = _graph.Tensor(g, *read)
        self.handle = _graph.Tensor(g, *handle)
        self.trainable = bool(trainable)
        self.initial_value = init

    def _as_graph_tensor(self):
        # Inside control_dependencies a use reads anew, after those ops (as
        # TensorFlow's conversion does): the read built with the variable
        # sits outside them and could see the value from before an assign.
        g = self.graph
        if g._current_control_inputs():
            return self.read_value()
        return self._read

    @property
    def graph(self):
        return self._read.graph

    @property
    def name(self):
        """The name of the read (what fetching the variable by name gives)."""
        return self._read.name

    @property
    def shared_name(self):
        """The variable's name in the session and its checkpoints."""
        return self.handle.op.get_attr("shared_name")

    @property
    def dtype(self):
        return self._read.dtype

    @property
    def shape(self):
        return self._read.shape

    @property
    def op(self):
        return self._read.op

    def value(self):
        """The Tensor reading the variable (built with it)."""
        return self._read

    def read_value(self):
        """A new read of the variable (a fresh snapshot, e.g. after an assign in the same step)."""
        g = self.graph
        return g._add("ReadVariable", [self.handle], [("dtype", "dtype", self.dtype.value)], "read").outputs[0]

    def _assign(self, op, value, name):
        g = self.graph
        with g.as_default():
            value = _graph.convert_to_tensor(value, dtype=self.dtype)
            return g._add(op, [self.handle, value], [], name).outputs[0]

    def assign(self, value, name="Assign"):
        """A Tensor that assigns value and evaluates to the new value."""
        return self._assign("Assign", value, name)

    def assign_add(self, value, name="AssignAdd"):
        """A Tensor that adds value to the variable and evaluates to the new value."""
        return self._assign("AssignAdd", value, name)

    def assign_sub(self, value, name="AssignSub"):
        """A Tensor that subtracts value from the variable and evaluates to the new value."""
        return self._assign("AssignSub", value, name)

    def eval_in(self, session):
        """The variable's current value in session (a NumPy array)."""
        return session.run(self._read)

    def eval(self, session=None):
        """The variable's current value in session (default: the default session), as TF 1.x's Variable.eval."""
        return self._read.eval(session=session)

    def get_shape(self):
        """The shape as TF 1.x's get_shape() gave it (as_list(), ndims, Dimension objects by index)."""
        return self._read.get_shape()

    @property
    def initializer(self):
        """The Operation assigning the initial value (what global_variables_initializer runs for this variable)."""
        for op in self.graph.get_operations():
            if op.type == "Assign" and op.inputs and op.inputs[0] == self.handle and op.name.endswith("/Assign"):
                return op
        raise errors.NotFoundError(f"variable {self.shared_name!r} has no initializer node")

    def __repr__(self):
        return f"<sf.Variable '{self.shared_name}' shape={self.shape} dtype={self.dtype.name}>"

    def __hash__(self):
        return hash(self._read)

    def __eq__(self, other):
        return isinstance(other, Variable) and other._read == self._read

    def __getitem__(self, key):
        return self._read[key]


def _forward(opname):
    def method(self, *args):
        return getattr(self._read, opname)(*args)
    method.__name__ = opname
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__",
            "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(Variable, _op, _forward(_op))
del _op


def _handle_of(ref, what):
    """The VarHandle output of a Variable or of a variable's read Tensor (what tf.global_variables() gives)."""
    if isinstance(ref, Variable):
        return ref.handle
    t = _graph.convert_to_tensor(ref) if hasattr(ref, "_as_graph_tensor") else ref
    if isinstance(t, _graph.Tensor) and t.op.type == "ReadVariable" and t.op.inputs \
            and t.op.inputs[0].op.type == "VarHandle":
        return t.op.inputs[0]
    raise errors.InvalidArgumentError(f"{what} needs a variable (a tf.Variable or a read of one), got {ref!r}")


def _assign_op(op, ref, value, name):
    handle = _handle_of(ref, f"tf.{op.lower()}")
    g = handle.graph
    with g.as_default():
        read = [o for o in g.get_operations() if o.type == "ReadVariable" and o.inputs and o.inputs[0] == handle]
        value = _graph.convert_to_tensor(value, dtype=read[0].outputs[0].dtype if read else None)
        return g._add(op, [handle, value], [], name).outputs[0]


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    """TF 1.x's tf.assign: a Tensor that stores value in the variable ref and evaluates to the new value."""
    return _assign_op("Assign", ref, value, name or "Assign")


def assign_add(ref, value, use_locking=None, name=None):
    """TF 1.x's tf.assign_add: ref += value; evaluates to the new value."""
    return _assign_op("AssignAdd", ref, value, name or "AssignAdd")


def assign_sub(ref, value, use_locking=None, name=None):
    """TF 1.x's tf.assign_sub: ref -= value; evaluates to the new value."""
    return _assign_op("AssignSub", ref, value, name or "AssignSub")


def variables_initializer(var_list, name="init"):
    """TF 1.x's: an Operation running the initializers of var_list (Variables or their reads); a NoOp when
    var_list is empty."""
    var_list = list(var_list)
    if not var_list:
        return _graph.no_op(name)
    inits = []
    for v in var_list:
        handle = _handle_of(v, "variables_initializer")
        found = [op for op in handle.graph.get_operations() if op.type == "Assign" and op.inputs
                 and op.inputs[0] == handle and op.name.endswith("/Assign")]
        if not found:
            raise errors.NotFoundError(f"variable {handle.op.name!r} has no initializer node")
        inits.append(found[0])
    with handle.graph.as_default():
        return _graph.group(*inits, name=name)


def global_variables_initializer(graph=None, name="init"):
    """An Operation running the initializer of every variable (and table) built so far."""
    g = graph or _graph.get_default_graph()
    return g._op(_core.global_variables_initializer(g._g, name))


def local_variables_initializer(name="init_local"):
    """TF 1.x's: an Operation running the initializers of the variables in the LOCAL_VARIABLES collection
    (tf.train's epoch counters); a NoOp when there are none. Every variable, local ones included, is also
    initialized by global_variables_initializer (TF leaves local ones out of it)."""
    g = _graph.get_default_graph()
    local = [v for v in g._collections.get("local_variables", []) if isinstance(v, Variable)]
    if not local:
        return _graph.no_op(name)
    return _graph.group(*[v.initializer for v in local], name=name)


def _variable_reads(g, trainable_only):
    reads = {}
    for op in g.get_operations():
        if op.type == "ReadVariable" and op.inputs:
            h = op.inputs[0].op
            if h.type == "VarHandle" and h not in reads:
                reads[h] = op.outputs[0]
    return [r for h, r in reads.items() if not trainable_only or h.node_def.get("trainable", False)]


def trainable_variables(graph=None, scope=None):
    """The reads of the graph's trainable variables, as Tensors (what minimize() updates by default);
    scope: only those whose name starts with it."""
    g = graph or _graph.get_default_graph()
    return [r for r in _variable_reads(g, True) if scope is None or r.name.startswith(scope)]


def global_variables(graph=None, scope=None):
    """The reads of every variable of the graph (trainable or not; optimizer slots too), as Tensors;
    scope: only those whose name starts with it."""
    g = graph or _graph.get_default_graph()
    return [r for r in _variable_reads(g, False) if scope is None or r.name.startswith(scope)]
