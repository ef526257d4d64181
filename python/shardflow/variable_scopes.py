"""TF 1.x's variable sharing: tf.variable_scope, tf.get_variable and graph collections.

    with tf.variable_scope("layer1"):
        w = tf.get_variable("w", [784, 10], initializer=tf.truncated_normal_initializer(stddev=0.1))
    with tf.variable_scope("layer1", reuse=True):
        same = tf.get_variable("w")                       # the variable "layer1/w" again

As in TF 1.x: a variable scope names the variables tf.get_variable makes
("scope/name") and opens a name scope of the same name for other ops;
reuse=True returns existing variables (ValueError when missing), reuse=None
inherits the enclosing scope's (False does the same, as in TF 1.x), and
tf.AUTO_REUSE makes a variable once and returns it afterwards. Without reuse,
getting a name twice raises ValueError. The default initializer is
glorot_uniform for floats and zeros for integers. Scopes and the store of
variables belong to the graph (a graph's variables are shared within it only).
"""

import contextlib
import re

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import init_ops

__all__ = ["AUTO_REUSE", "VariableScope", "variable_scope", "get_variable", "get_variable_scope", "GraphKeys",
           "get_collection", "add_to_collection", "get_collection_ref"]


class _ReuseMode:
    def __repr__(self):
        return "tf.AUTO_REUSE"


AUTO_REUSE = _ReuseMode()


class VariableScope:
    """A variable scope: its name, reuse mode, default initializer and dtype (what `with ... as scope` gives)."""

    def __init__(self, reuse, name="", initializer=None, regularizer=None, dtype=_dt.float32, name_scope=""):
        self.name = name
        self.reuse = reuse
        self.initializer = initializer
        self.regularizer = regularizer
        self.dtype = _dt.as_dtype(dtype)
        self.original_name_scope = name_scope

    def reuse_variables(self):
        """Makes tf.get_variable in the rest of this scope return existing variables (reuse=True)."""
        self.reuse = True

    def set_initializer(self, initializer):
        self.initializer = initializer

    def get_variable(self, name, *args, **kwargs):
        with variable_scope(self):
            return get_variable(name, *args, **kwargs)

    def __repr__(self):
        return f"<VariableScope {self.name!r} reuse={self.reuse!r}>"


def _stack(g):
    if not g._var_scopes:
        g._var_scopes.append(VariableScope(False))
    return g._var_scopes


def get_variable_scope():
    """The innermost open variable scope of the default graph (the root scope, named "", when none is open)."""
    return _stack(_graph.get_default_graph())[-1]


def _unique_default(g, parent, prefix):
    full = f"{parent.name}/{prefix}" if parent.name else prefix
    if g._var_scope_counts.get(full, 0) == 0:
        return prefix
    i = 1
    while g._var_scope_counts.get(f"{full}_{i}", 0) > 0:
        i += 1
    return f"{prefix}_{i}"


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None, regularizer=None,
                   caching_device=None, partitioner=None, custom_getter=None, reuse=None, dtype=None,
                   use_resource=None, constraint=None, auxiliary_name_scope=True):
    """Opens a variable scope (and a name scope of its name) on the default graph; yields its VariableScope.

    name_or_scope: a name, or a VariableScope to re-enter; None with
    default_name picks a unique name ("dense", "dense_1", ...) as TF 1.x.
    partitioner, custom_getter and constraint raise UnimplementedError.
    """
    for what, v in (("partitioner", partitioner), ("custom_getter", custom_getter), ("constraint", constraint)):
        if v is not None:
            raise errors.UnimplementedError(f"variable_scope({what}=...) is not supported")
    if reuse not in (None, False, True) and reuse is not AUTO_REUSE:
        raise ValueError(f"reuse must be True, False, None or tf.AUTO_REUSE, got {reuse!r}")
    g = _graph.get_default_graph()
    stack = _stack(g)
    parent = stack[-1]
    if isinstance(name_or_scope, VariableScope):
        base = name_or_scope
        full = base.name
        short = full.rpartition("/")[2]
    else:
        if name_or_scope is None:
            if default_name is None:
                raise TypeError("If default_name is None then name_or_scope is required")
            short = _unique_default(g, parent, default_name)
        elif isinstance(name_or_scope, str) and name_or_scope:
            short = name_or_scope
        else:
            raise TypeError(f"VariableScope: name_or_scope must be a string or a VariableScope, got {name_or_scope!r}")
        full = f"{parent.name}/{short}" if parent.name else short
        base = parent
    scope = VariableScope(
        reuse=reuse or base.reuse,  # TF 1.x: reuse is inherited; False means the same as None
        name=full,
        initializer=initializer if initializer is not None else base.initializer,
        regularizer=regularizer if regularizer is not None else base.regularizer,
        dtype=dtype if dtype is not None else base.dtype,
        name_scope=full + "/")
    g._var_scope_counts[full] = g._var_scope_counts.get(full, 0) + 1
    saved_counts = dict(g._var_scope_counts) if isinstance(name_or_scope, VariableScope) else None
    stack.append(scope)
    try:
        if auxiliary_name_scope and short:
            with g.name_scope(short):
                yield scope
        else:
            yield scope
    finally:
        stack.pop()
        if saved_counts is not None:
            g._var_scope_counts = saved_counts
        else:
            # TF 1.x forgets the names used inside a closed scope: re-entering it names them afresh
            # (so a function building layers can be called again with reuse=True).
            for k in g._var_scope_counts:
                if k.startswith(full + "/"):
                    g._var_scope_counts[k] = 0


def _default_initializer(name, dtype):
    if dtype.is_floating:
        return init_ops.glorot_uniform_initializer()
    if dtype.is_integer or dtype == _dt.bool_:
        return init_ops.zeros_initializer()
    raise ValueError(f"An initializer for variable {name} of {dtype.name} is required")


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=None,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True, use_resource=None,
                 custom_getter=None, constraint=None, synchronization=None, aggregation=None):
    """The variable "scope/name": made with initializer, or the existing one under reuse (TF 1.x's rules).

    initializer: an initializer (called with shape and dtype), a Tensor or a
    value (then shape must be None); default the scope's, else glorot_uniform
    for floats and zeros for integers. regularizer(variable) goes to the
    "regularization_losses" collection. Raises ValueError as TF 1.x: a name
    taken without reuse, a missing one under reuse=True, a shape or dtype that
    differs from the shared variable's, a new variable without a full shape.
    """
    for what, v in (("partitioner", partitioner), ("custom_getter", custom_getter), ("constraint", constraint)):
        if v is not None:
            raise errors.UnimplementedError(f"get_variable({what}=...) is not supported")
    g = _graph.get_default_graph()
    scope = _stack(g)[-1]
    full = f"{scope.name}/{name}" if scope.name else name
    found = g._var_store.get(full)
    if found is not None:
        if scope.reuse is not True and scope.reuse is not AUTO_REUSE:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             "reuse=tf.AUTO_REUSE in VarScope?")
        if shape is not None and not _compatible(found.shape, shape):
            raise ValueError(f"Trying to share variable {full}, but specified shape {tuple(_graph.TensorShape(shape).as_list())} "
                             f"and found shape {tuple(found.shape.as_list())}.")
        if dtype is not None and _dt.as_dtype(dtype) != found.dtype:
            raise ValueError(f"Trying to share variable {full}, but specified dtype {_dt.as_dtype(dtype).name} "
                             f"and found dtype {found.dtype.name}.")
        return found
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). "
                         "Did you mean to set reuse=tf.AUTO_REUSE in VarScope?")
    dtype = _dt.as_dtype(dtype) if dtype is not None else scope.dtype
    if initializer is None:
        initializer = scope.initializer if scope.initializer is not None else _default_initializer(full, dtype)
    from .variables import Variable
    with g.control_dependencies(None), g._absolute_name_scope(scope.name):
        if callable(initializer) and not isinstance(initializer, _graph.Tensor) \
                and not hasattr(initializer, "_as_graph_tensor"):
            if isinstance(initializer, type):
                initializer = initializer()
            if shape is None or not _graph.TensorShape(shape).is_fully_defined():
                raise ValueError(f"Shape of a new variable ({full}) must be fully defined, but instead was {shape}.")
            with g.name_scope(name + "/Initializer"):
                value = initializer(_graph.TensorShape(shape).as_list(), dtype=dtype, partition_info=None)
            var = Variable(value, name=name, trainable=True if trainable is None else trainable)
        else:
            if shape is not None:
                raise ValueError("If initializer is a constant, do not specify shape.")
            var = Variable(initializer, name=name, trainable=True if trainable is None else trainable,
                           dtype=None if isinstance(initializer, _graph.Tensor) else dtype)
    g._var_store[full] = var
    regularizer = regularizer if regularizer is not None else scope.regularizer
    if regularizer is not None:
        with g.name_scope(name + "/Regularizer"):
            loss = regularizer(var)
        if loss is not None:
            add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return var


def _compatible(have, want):
    want = _graph.TensorShape(want)
    if have.rank is None or want.rank is None:
        return True
    return have.rank == want.rank and all(a is None or b is None or a == b for a, b in zip(have.dims, want.dims))


class GraphKeys:
    """TF 1.x's collection names; TRAINABLE_VARIABLES and GLOBAL_VARIABLES list the graph's variables."""

    GLOBAL_VARIABLES = "variables"
    VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    MODEL_VARIABLES = "model_variables"
    REGULARIZATION_LOSSES = "regularization_losses"
    LOSSES = "losses"
    UPDATE_OPS = "update_ops"
    SUMMARIES = "summaries"
    GLOBAL_STEP = "global_step"
    QUEUE_RUNNERS = "queue_runners"


def add_to_collection(name, value):
    """Appends value to the default graph's collection name."""
    get_collection_ref(name).append(value)


def get_collection_ref(key):
    """The default graph's list for collection key (made when missing)."""
    g = _graph.get_default_graph()
    return g._collections.setdefault(key, [])


def get_collection(key, scope=None):
    """A copy of collection key of the default graph; with scope, the items whose name re.match-es it (TF's rule).

    GLOBAL_VARIABLES and TRAINABLE_VARIABLES give the variables' reads, as
    tf.global_variables() and tf.trainable_variables() do; GLOBAL_STEP the
    global step variable, if made.
    """
    from .variables import global_variables, trainable_variables
    g = _graph.get_default_graph()
    if key == GraphKeys.TRAINABLE_VARIABLES:
        items = trainable_variables(g)
    elif key == GraphKeys.GLOBAL_VARIABLES:
        items = global_variables(g)
    elif key == GraphKeys.GLOBAL_STEP:
        items = [] if g._global_step is None else [g._global_step]
    else:
        items = list(g._collections.get(key, []))
    if scope is None:
        return items
    return [x for x in items if re.match(scope, getattr(x, "name", ""))]
