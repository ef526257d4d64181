"""Random ops, seeded and reproducible (seed 0 derives one from the node's name)."""

from . import _core
from . import dtypes as _dt
from . import graph as _graph

__all__ = ["uniform", "normal", "truncated_normal"]


def _shape(shape):
    return [int(d) for d in shape]


def uniform(shape, minval=0.0, maxval=1.0, dtype=_dt.float32, seed=0):
    """Uniform values in [minval, maxval)."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "uniform", _shape(shape), float(minval), float(maxval), int(seed),
                                          _dt.as_dtype(dtype).value))


def normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=0):
    """Normal values."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "normal", _shape(shape), float(mean), float(stddev), int(seed),
                                          _dt.as_dtype(dtype).value))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=0):
    """Normal values redrawn until within 2 stddev of the mean."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "truncated_normal", _shape(shape), float(mean), float(stddev),
                                          int(seed), _dt.as_dtype(dtype).value))
