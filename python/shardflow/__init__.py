"""shardflow from Python: dataflow graphs, sessions and clusters with NumPy.

    import numpy as np
    import shardflow as sf

    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None, 3], name="x")
        w = sf.Variable(np.ones((3, 1), np.float32), name="w")
        y = x @ w
        loss = sf.ops.mean(sf.ops.square(y))
        train = sf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = sf.global_variables_initializer()
    with sf.Session(g) as sess:
        sess.run(init)
        print(sess.run([loss, train], feed_dict={x: np.ones((4, 3), np.float32)}))

Every registered C++ op is in sf.ops (generated from the registry); errors
are sf.errors.* exceptions carrying the C++ message.
"""


def _built_for():
    """The interpreter this copy was built for (CMake's SF_PYTHON_EXECUTABLE), in words."""
    try:
        from ._build_info import PYTHON, PYTHON_VERSION
    except ImportError:
        return "the interpreter CMake was configured with (SF_PYTHON_EXECUTABLE, /usr/bin/python3 by default)"
    return f"{PYTHON} (Python {PYTHON_VERSION})"


try:
    import numpy as _np  # noqa: F401
    from . import _core  # noqa: F401  (the C++ module)
except ImportError as _e:  # pragma: no cover - only with another interpreter or without a build
    import sys as _sys
    _missing = " (not built? scripts/build makes it in build/python)" if _e.name == "shardflow._core" else ""
    raise ImportError(
        f"shardflow cannot load in {_sys.executable} (Python {_sys.version_info.major}.{_sys.version_info.minor}): "
        f"{_e}{_missing}. This build of shardflow is for {_built_for()}: run it with that interpreter, or "
        "pip install --no-build-isolation the repository into the Python or venv you use (docs/PYTHON.md)") from None
from . import errors
from .dtypes import (DType, as_dtype, float32, float64, int32, int64, int16, int8, uint8, bool_, float16,  # noqa: F401
                     bfloat16, resource)
from .graph import (Graph, Tensor, Operation, TensorShape, Dimension, get_default_graph, reset_default_graph,
                    convert_to_tensor, constant, placeholder, name_scope, device, control_dependencies,
                    group, identity, no_op)
from . import ops
from .ops import add_op
from .gradients import gradients
from .control_flow import cond, while_loop, case
from .variables import (Variable, global_variables_initializer, trainable_variables, global_variables,
                        local_variables_initializer)
initialize_all_variables = global_variables_initializer  # TF 1.x's older name
from .session import (Session, ClusterSession, SessionOptions, RunOptions, InteractiveSession, get_default_session,
                      ConfigProto, GPUOptions)
from . import train
from . import random
from . import embedding
from . import nn
from . import data  # noqa: F401 - tf.data
from . import summary  # noqa: F401 - tf.summary (TensorBoard event files)
from .summary import Summary  # noqa: F401 - tf.Summary
from . import flags, app, compat  # noqa: F401 - tf.flags, tf.app, tf.compat.v1
from .compat import disable_v2_behavior, disable_eager_execution  # noqa: F401 - tf.compat.v1's
from .variable_scopes import (AUTO_REUSE, VariableScope, variable_scope, get_variable, get_variable_scope,  # noqa: F401
                             GraphKeys, get_collection, get_collection_ref, add_to_collection)
from .init_ops import (zeros_initializer, ones_initializer, constant_initializer,  # noqa: F401 - TF 1.x's names
                       random_normal_initializer, truncated_normal_initializer, random_uniform_initializer,
                       variance_scaling_initializer, glorot_uniform_initializer, glorot_normal_initializer)
from . import layers, contrib  # noqa: F401 - tf.layers, tf.contrib.layers.xavier_initializer
from .queues import FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue
from .cluster import LocalCluster
from . import tf_api as math  # noqa: F401 - sf.math.floordiv etc., as tf.math
from .tf_api import (matmul, reshape, concat, stack, unstack, split, cast, reduce_sum, reduce_mean,  # noqa: F401
                     reduce_max, reduce_min, reduce_prod, reduce_all, reduce_any, argmax, argmin, range, zeros, ones, zeros_like, ones_like,
                     fill, transpose, expand_dims, squeeze, shape, size, rank, tile, gather, one_hot, where, unique,
                     unsorted_segment_sum, maximum, clip_by_norm, global_norm, clip_by_global_norm, bitcast,
                     minimum, add_n, clip_by_value, stop_gradient, floordiv, floormod, truediv, divide,
                     squared_difference, square, sqrt, exp, log, abs, sign, negative, sin, cos, tanh, sigmoid,
                     pow,  # noqa: A001 - tf.abs, tf.pow
                     # TF 1.x's names (tf.add, tf.random_normal, ...), with TF 1.x's meanings.
                     add, subtract, multiply, equal, not_equal, less, less_equal, greater, greater_equal,
                     logical_and, logical_or, logical_not, arg_max, arg_min, random_normal, random_uniform,
                     truncated_normal)

from . import tf_logging as logging  # noqa: F401 - tf.logging
from . import gfile, losses, metrics  # noqa: F401 - tf.gfile, tf.losses, tf.metrics
from .random import set_random_seed  # noqa: F401 - tf.set_random_seed
from .variables import assign, assign_add, assign_sub, variables_initializer  # noqa: F401 - TF 1.x's
from .tf1_more_ops import (einsum, scatter_update, scatter_add, scatter_sub, div, realdiv, truncatediv,  # noqa: F401
                           truncatemod, mod, floor_div, div_no_nan, py_func, py_function, numpy_function)
from . import sparse  # noqa: F401 - tf.sparse
from .sparse import (SparseTensor, SparseTensorValue, sparse_tensor_to_dense, sparse_to_dense,  # noqa: F401
                     sparse_tensor_dense_matmul, sparse_placeholder)
from .tf_api import (to_float, to_double, to_int32, to_int64, reduce_logsumexp, count_nonzero, cumsum,  # noqa: F401
                     cumprod, pad, slice, eye, sequence_mask, boolean_mask, is_nan, is_inf, is_finite)
from . import debugging  # noqa: F401 - tf.debugging
from .debugging import (Assert, assert_equal, assert_none_equal, assert_less, assert_less_equal,  # noqa: F401
                        assert_greater, assert_greater_equal, assert_positive, assert_negative, assert_non_negative,
                        assert_non_positive, assert_rank, assert_rank_at_least, assert_type, assert_integer,
                        assert_scalar, check_numerics, verify_tensor_all_finite, is_numeric_tensor)

bool = bool_  # noqa: A001 - sf.bool as in TensorFlow

_NO_DTYPES = ("uint16", "uint32", "uint64", "complex64", "complex128", "string", "qint8", "quint8", "qint32")


def __getattr__(name):
    # TF 1.x's dtypes the runtime lacks: say so and what to use, instead of a bare AttributeError.
    if name in _NO_DTYPES:
        raise AttributeError(
            f"shardflow has no {name} dtype: its tensors are float32, float64, float16, bfloat16, int64, int32, "
            "int16, int8, uint8 and bool. Use tf.int64 for wider unsigned data and tf.float32 for images")
    raise AttributeError(f"module 'shardflow' has no attribute '{name}'")

__version__ = "0.1.0"


def keep_tensor_memory_warm():
    """Keeps freed tensor memory in this process's heap (fewer page faults per step); idempotent, never fails."""
    _core.keep_tensor_memory_warm()


def load_graph(path):
    """A graph read from a GraphDef file (Python's Graph.save or C++'s sf::SaveGraph)."""
    return Graph.load(path)


def save_graph(graph, path):
    """Writes graph as a GraphDef file (readable by sf::LoadGraph and `shardflow graph`)."""
    graph.save(path)
