"""Random ops, seeded and reproducible (seed 0 derives one from the node's name).

tf.set_random_seed(seed) sets the default graph's seed, with TF 1.x's rules: an op
without a seed then gets one from the graph's seed and how many seeded ops the
graph has (so rebuilding the same program repeats its values), and an op with a
seed combines the two. Without a graph seed an op's own seed (or its name) decides.
The streams themselves are shardflow's, not TensorFlow's.
"""

from . import _core
from . import dtypes as _dt
from . import graph as _graph

__all__ = ["uniform", "normal", "truncated_normal", "set_random_seed", "op_seed"]


def set_random_seed(seed):
    """TF 1.x's tf.set_random_seed: the default graph's seed (None clears it)."""
    g = _graph.get_default_graph()
    g._graph_seed = None if seed is None else int(seed)
    g._seeded_ops = 0


def op_seed(seed):
    """The seed to give an op asked for with seed (None or 0: none), under the default graph's seed."""
    g = _graph.get_default_graph()
    graph_seed = getattr(g, "_graph_seed", None)
    own = int(seed or 0)
    if graph_seed is None:
        return own
    if not own:
        g._seeded_ops = getattr(g, "_seeded_ops", 0) + 1
        own = g._seeded_ops
    mixed = (graph_seed * 0x9E3779B1 + own * 0x85EBCA77 + 0x2545F491) & 0x7FFFFFFFFFFFFFFF
    return mixed or 1


def _shape(shape):
    return [int(d) for d in shape]


def uniform(shape, minval=0.0, maxval=1.0, dtype=_dt.float32, seed=0):
    """Uniform values in [minval, maxval)."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "uniform", _shape(shape), float(minval), float(maxval), op_seed(seed),
                                          _dt.as_dtype(dtype).value))


def normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=0):
    """Normal values."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "normal", _shape(shape), float(mean), float(stddev), op_seed(seed),
                                          _dt.as_dtype(dtype).value))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=0):
    """Normal values redrawn until within 2 stddev of the mean."""
    g = _graph.get_default_graph()
    return _graph.Tensor(g, *_core.random(g._g, "truncated_normal", _shape(shape), float(mean), float(stddev),
                                          op_seed(seed), _dt.as_dtype(dtype).value))
