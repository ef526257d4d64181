"""Element types: sf.float32, sf.int64, ... and conversion from NumPy's."""

import numpy as np

from . import _core

__all__ = ["DType", "as_dtype", "float32", "float64", "int32", "int64", "int16", "int8", "uint8", "bool_",
           "float16", "bfloat16", "resource"]


class DType:
    """A tensor element type; compares equal to its NumPy type where one exists."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = int(value)

    @property
    def name(self):
        return _core.dtype_name(self.value)

    @property
    def as_numpy_dtype(self):
        """The NumPy dtype, or None (bfloat16, resource handles are int64)."""
        return _TO_NUMPY.get(self.value)

    @property
    def size(self):
        return _core.dtype_size(self.value)

    @property
    def is_floating(self):
        return self.value in (1, 2, 6, 7)

    @property
    def is_integer(self):
        return self.value in (3, 4, 9, 10, 11)

    @property
    def is_unsigned(self):
        return self.value == 11

    @property
    def min(self):
        """The smallest value of the dtype (TF 1.x's DType.min); TypeError for bool and resource."""
        return self._limits()[0]

    @property
    def max(self):
        """The largest value of the dtype (TF 1.x's DType.max); TypeError for bool and resource."""
        return self._limits()[1]

    def _limits(self):
        npd = self.as_numpy_dtype
        if npd is None or self.value in (5, 8):
            raise TypeError(f"{self.name} has no minimum or maximum")
        if self.is_integer:
            info = np.iinfo(npd)
            return int(info.min), int(info.max)
        info = np.finfo(npd)
        return float(info.min), float(info.max)

    def __eq__(self, other):
        try:
            return as_dtype(other).value == self.value
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "sf." + ("bool_" if self.name == "bool" else self.name)

    def __str__(self):
        return self.name


float32 = DType(1)
float64 = DType(2)
int32 = DType(3)
int64 = DType(4)
bool_ = DType(5)
bfloat16 = DType(6)
float16 = DType(7)
resource = DType(8)
int8 = DType(9)
int16 = DType(10)
uint8 = DType(11)

_TO_NUMPY = {1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32),
             4: np.dtype(np.int64), 5: np.dtype(np.bool_), 7: np.dtype(np.float16),
             8: np.dtype(np.int64), 9: np.dtype(np.int8), 10: np.dtype(np.int16), 11: np.dtype(np.uint8)}
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
               np.dtype(np.int32): int32, np.dtype(np.int64): int64, np.dtype(np.bool_): bool_,
               np.dtype(np.float16): float16, np.dtype(np.int8): int8, np.dtype(np.int16): int16,
               np.dtype(np.uint8): uint8}
_BY_NAME = {"float32": float32, "f32": float32, "float": float32, "float64": float64,
            "f64": float64, "double": float64, "int32": int32, "i32": int32, "int64": int64,
            "i64": int64, "bool": bool_, "float16": float16, "half": float16,
            "bfloat16": bfloat16, "resource": resource, "int8": int8, "int16": int16, "uint8": uint8}


def as_dtype(x):
    """The DType of x (a DType, a NumPy dtype or type, or a name); TypeError otherwise."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if x is bool:
        return bool_
    if x is float:
        return float32
    if x is int:
        return int32
    try:
        d = np.dtype(x)
    except TypeError:
        raise TypeError(f"cannot interpret {x!r} as a shardflow dtype") from None
    if d.byteorder == ">":
        d = d.newbyteorder("=")
    if d in _FROM_NUMPY:
        return _FROM_NUMPY[d]
    raise TypeError(f"shardflow has no dtype for NumPy's {d} "
                    "(it has float32, float64, float16, int64, int32, int16, int8, uint8 and bool)")
