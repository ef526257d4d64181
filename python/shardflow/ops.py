"""Every op of the C++ registry as a Python function, generated at import.

    y = sf.ops.mat_mul(x, w, transpose_b=True)
    s = sf.ops.sum(y, axes=[1], keep_dims=True)

Each function is made from the op's registration (OpDef: input count,
declared attributes with their kinds and defaults, summary), so an op
registered in C++ appears here without Python code: its name is the op's in
snake_case ("SparseSoftmaxCrossEntropyWithLogits" ->
sparse_softmax_cross_entropy_with_logits), inputs are positional (any
array-like becomes a constant), attributes are keywords, and `name=` names
the node. It returns the Tensor of a one-output op, a tuple for several
outputs, and the Operation for an op with none. A wrong attribute, a missing
required one or a shape error raises sf.errors.InvalidArgumentError naming
the op.
"""

import inspect
import re

import numpy as np

from . import _core
from . import dtypes as _dt
from . import errors
from . import graph as _graph

_DEFS = {d["name"]: d for d in _core.op_defs()}


def snake_case(op_name):
    """The Python name of an op: "MatMul" -> "mat_mul", "Conv2D" -> "conv2d", "_Send" -> "_send"."""
    lead = "_" if op_name.startswith("_") else ""
    s = op_name.lstrip("_")
    s = re.sub(r"(\d)D(?=[A-Z]|$)", r"\1d", s)
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", s)
    return lead + s.lower()


def _convert_attr(op, name, kind, value):
    """The attribute value in the form _core expects for its kind; InvalidArgumentError otherwise."""
    try:
        if kind == "dtype":
            return _dt.as_dtype(value).value
        if kind == "dtype list":
            return [_dt.as_dtype(v).value for v in value]
        if kind == "shape":
            return _graph._as_core_shape(value)
        if kind == "int":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError
            return int(value)
        if kind == "float":
            if isinstance(value, (bool, np.bool_)):
                raise TypeError
            return float(value)
        if kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError
            return bool(value)
        if kind == "string":
            if not isinstance(value, str):
                raise TypeError
            return value
        if kind == "int list":
            if isinstance(value, _graph.TensorShape):
                value = value.as_list()
            out = []
            for v in value:
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                    raise TypeError
                out.append(int(v))
            return out
        if kind == "float list":
            return [float(v) for v in value]
        if kind == "tensor":
            arr, dt = _graph._numpy_value(value)
            return (np.require(arr, requirements="C"), dt.value)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(
            f"op {op}: attribute '{name}' must be {kind}, got {value!r:.60}") from None
    raise errors.InvalidArgumentError(f"op {op}: attribute '{name}' has an unknown kind '{kind}'")


def _guess_kind(value):
    # Internal attributes ("_class", ...) are not declared; their kind follows the value.
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _dt.DType):
        return "dtype"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value):
        return "int list"
    if isinstance(value, (list, tuple)):
        return "float list"
    return "tensor"


def add_op(op_type, inputs=(), attrs=None, name=None):
    """Adds a node running op_type with inputs (array-likes allowed) and attrs; returns like the generated functions.

    Raises NotFoundError for an op that is not registered and InvalidArgumentError
    for a bad attribute or input.
    """
    d = _DEFS.get(op_type)
    if d is None:
        raise errors.NotFoundError(f"no op named '{op_type}' is registered")
    return _build(d, list(inputs), dict(attrs or {}), name)


def _build(d, inputs, attrs, name):
    op = d["name"]
    lo, hi = d["min_inputs"], d["max_inputs"]
    if len(inputs) < lo or (hi >= 0 and len(inputs) > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi < 0 else f"{lo} to {hi}")
        raise errors.InvalidArgumentError(f"op {op} takes {want} inputs, got {len(inputs)}")
    g = _graph._graph_of(*inputs)
    with g.as_default():
        tensors = []
        like = next((t.dtype for t in inputs if isinstance(t, _graph.Tensor)), None)
        for x in inputs:
            if isinstance(x, _graph.Tensor) or hasattr(x, "_as_graph_tensor"):
                tensors.append(_graph.convert_to_tensor(x))
            else:
                dt = _graph._scalar_dtype(x, like) if like is not None and np.ndim(x) == 0 else None
                tensors.append(_graph.convert_to_tensor(x, dtype=dt))
        declared = {a[0]: a for a in d["attrs"]}
        core_attrs = []
        for key, value in attrs.items():
            if key in declared:
                continue
            if not key.startswith("_"):
                known = ", ".join(declared) or "none"
                raise errors.InvalidArgumentError(
                    f"op {op} has no attribute '{key}' (its attributes: {known})")
            core_attrs.append((key, _guess_kind(value), _convert_attr(op, key, _guess_kind(value), value)))
        for aname, kind, default, required in d["attrs"]:
            if aname in attrs and attrs[aname] is not None:
                core_attrs.append((aname, kind, _convert_attr(op, aname, kind, attrs[aname])))
            elif required:
                raise errors.InvalidArgumentError(f"op {op} needs attribute '{aname}' ({kind})")
            elif kind == "dtype" and default == 0:
                continue  # "unset unless given" (OpDef's convention)
            else:
                core_attrs.append((aname, kind, default if kind != "tensor" else None))
        core_attrs = [a for a in core_attrs if not (a[1] == "tensor" and a[2] is None)]
        operation = g._add(op, tensors, core_attrs, name)
        outs = operation.outputs
        if not outs:
            return operation
        return outs[0] if len(outs) == 1 else tuple(outs)


def _input_names(d):
    names = list(d.get("input_names") or [])
    n = d["min_inputs"]
    default = ["x", "y", "z"] if n <= 3 else [f"input{i}" for i in range(n)]
    while len(names) < n:
        names.append(default[len(names)] if len(names) < len(default) else f"input{len(names)}")
    return [nm or f"input{i}" for i, nm in enumerate(names[:n])]


def _make(d):
    names = _input_names(d)
    fixed = d["min_inputs"] == d["max_inputs"]
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    if not fixed:
        params.append(inspect.Parameter("more_inputs", inspect.Parameter.VAR_POSITIONAL))
    for aname, kind, default, required in d["attrs"]:
        params.append(inspect.Parameter(aname, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if required else default))
    params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    sig = inspect.Signature(params)

    def op_function(*args, name=None, **kwargs):
        args = list(args)
        for n in names[len(args):]:
            if n in kwargs:
                args.append(kwargs.pop(n))
        if not fixed and len(args) == 1 and d["min_inputs"] <= 1 and isinstance(args[0], (list, tuple)) \
                and any(isinstance(a, _graph.Tensor) or hasattr(a, "_as_graph_tensor") for a in args[0]):
            args = list(args[0])  # add_n([a, b]) as in TensorFlow
        return _build(d, args, kwargs, name)

    pyname = snake_case(d["name"])
    op_function.__name__ = op_function.__qualname__ = pyname
    op_function.__signature__ = sig
    attrs_doc = "".join(
        f"\n    {a}: {k}" + (" (required)" if r else f" = {v!r}") for a, k, v, r in d["attrs"])
    n_in = (f"{d['min_inputs']}" if fixed else
            f"{d['min_inputs']} or more" if d["max_inputs"] < 0 else f"{d['min_inputs']} to {d['max_inputs']}")
    op_function.__doc__ = (f"{d['summary'] or d['name']}\n\nThe {d['name']} op: {n_in} inputs"
                           + (", stateful" if d["stateful"] else "")
                           + (", differentiable" if d["differentiable"] else "") + "."
                           + (f"\n\nAttributes:{attrs_doc}" if attrs_doc else ""))
    op_function.op_type = d["name"]
    return pyname, op_function


OP_NAMES = {}  # Python name -> op name
for _d in _DEFS.values():
    _pyname, _fn = _make(_d)
    if _pyname in globals():
        raise ImportError(f"two ops map to the Python name {_pyname}")
    globals()[_pyname] = _fn
    OP_NAMES[_pyname] = _d["name"]
del _d, _pyname, _fn


def op_def(op_type):
    """The registration of op_type as a dict (inputs, attrs, summary); NotFoundError otherwise."""
    if op_type not in _DEFS:
        raise errors.NotFoundError(f"no op named '{op_type}' is registered")
    return dict(_DEFS[op_type])


def __getattr__(name):
    raise AttributeError(f"shardflow has no op named '{name}' (sf.ops.OP_NAMES lists the {len(OP_NAMES)} ops)")


def __dir__():
    return sorted(list(OP_NAMES) + ["add_op", "op_def", "snake_case", "OP_NAMES"])
