#!/usr/bin/env python3
"""Writes ops.pyi, the type stubs of the generated sf.ops, from the op registry.

    gen_stubs.py OUT_DIR      (with the built package on PYTHONPATH)

Editors read the stubs to complete sf.ops.<name> with its inputs,
attributes and documentation; the functions themselves are made at import.
Exit code 1 naming the problem when the package cannot be imported.
"""

import os
import sys

KIND = {"int": "int", "float": "float", "bool": "bool", "string": "str", "dtype": "DTypeLike",
        "int list": "Sequence[int]", "float list": "Sequence[float]",
        "shape": "Optional[Sequence[Optional[int]]]", "tensor": "ArrayLike", "dtype list": "Sequence[DTypeLike]"}

HEADER = '''"""Type stubs of sf.ops, generated from the op registry by python/tools/gen_stubs.py."""

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from .dtypes import DType
from .graph import Operation, Tensor
from .variables import Variable

TensorLike = Union[Tensor, Variable, np.ndarray, float, int, bool, Sequence[Any]]
DTypeLike = Union[DType, np.dtype, type, str]
ArrayLike = Union[np.ndarray, float, int, bool, Sequence[Any]]
OpResult = Union[Tensor, Tuple[Tensor, ...], Operation]

OP_NAMES: Dict[str, str]


def snake_case(op_name: str) -> str: ...
def op_def(op_type: str) -> Dict[str, Any]: ...
def add_op(op_type: str, inputs: Sequence[TensorLike] = ..., attrs: Optional[Dict[str, Any]] = ...,
           name: Optional[str] = ...) -> OpResult: ...

'''


def stub(fn, d):
    import inspect
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            params.append(f"*{p.name}: TensorLike")
        elif p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            params.append(f"{p.name}: TensorLike")
    kw = [] if any(s.startswith("*") for s in params) else ["*"]
    kinds = {a[0]: a[1] for a in d["attrs"]}
    for aname, kind, default, required in d["attrs"]:
        kw.append(f"{aname}: {KIND[kind]}" + ("" if required else " = ..."))
    kw.append("name: Optional[str] = ...")
    doc = (fn.__doc__ or "").replace('"""', "'''").strip()
    doc = "\n    ".join(doc.splitlines())
    return f'def {fn.__name__}({", ".join(params + kw)}) -> OpResult:\n    """{doc}"""\n    ...\n'


def main():
    if len(sys.argv) != 2:
        print("usage: gen_stubs.py OUT_DIR", file=sys.stderr)
        return 2
    try:
        import shardflow as sf
    except ImportError as e:
        print(f"gen_stubs.py: cannot import shardflow: {e}", file=sys.stderr)
        return 1
    defs = {d["name"]: d for d in sf._core.op_defs()}
    body = [HEADER]
    for pyname in sorted(sf.ops.OP_NAMES):
        body.append(stub(getattr(sf.ops, pyname), defs[sf.ops.OP_NAMES[pyname]]))
    out = os.path.join(sys.argv[1], "ops.pyi")
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n\n".join(body))
    os.replace(tmp, out)
    open(os.path.join(sys.argv[1], "py.typed"), "a").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
