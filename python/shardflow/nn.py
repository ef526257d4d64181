"""Neural-network helpers with TensorFlow's names, over the generated ops."""

from . import _core
from . import errors
from . import graph as _graph
from . import ops

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add", "l2_loss", "dropout",
           "conv2d", "max_pool", "avg_pool",
           "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits"]

relu = ops.relu


def leaky_relu(features, alpha=0.2, name=None):
    """features where > 0, else alpha * features."""
    return ops.leaky_relu(features, alpha=float(alpha), name=name)


sigmoid = ops.sigmoid
tanh = ops.tanh
softmax = ops.softmax
log_softmax = ops.log_softmax
bias_add = ops.bias_add
l2_loss = ops.l2_loss


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example losses [batch] for class indices labels [batch] (the op's first output)."""
    return ops.sparse_softmax_cross_entropy_with_logits(logits, labels, name=name)[0]


def softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example losses [batch] for label probabilities [batch, classes] (the op's first output)."""
    return ops.softmax_cross_entropy_with_logits(logits, labels, name=name)[0]


def _nhwc_only(what, data_format, dilations=None):
    if data_format != "NHWC":
        raise errors.UnimplementedError(f"{what}: data_format {data_format!r} is not supported; only NHWC")
    if dilations is not None and [int(d) for d in dilations] != [1, 1, 1, 1]:
        raise errors.UnimplementedError(f"{what}: dilations {list(dilations)} are not supported; only [1, 1, 1, 1]")


def _four(value, what):
    if isinstance(value, int):  # TF's shorthand for the spatial dims
        value = [1, value, value, 1]
    return [int(v) for v in value]


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,  # noqa: A002 - TF 1.x's names
           data_format="NHWC", dilations=None, name=None, filters=None):
    """TF 1.x's tf.nn.conv2d(input, filter, strides, padding): NHWC input, HWIO filter, padding SAME or VALID."""
    _nhwc_only("conv2d", data_format, dilations)
    filter = filter if filter is not None else filters
    if filter is None or strides is None or padding is None:
        raise errors.InvalidArgumentError("conv2d needs input, filter, strides and padding (as TF 1.x)")
    return ops.conv2d(input, filter, strides=_four(strides, "strides"), padding=str(padding), name=name)


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):  # noqa: A002
    """TF 1.x's tf.nn.max_pool(value, ksize, strides, padding): the maximum over NHWC windows."""
    _nhwc_only("max_pool", data_format)
    return ops.max_pool(value if input is None else input, ksize=_four(ksize, "ksize"),
                        strides=_four(strides, "strides"), padding=str(padding), name=name)


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):  # noqa: A002
    """TF 1.x's tf.nn.avg_pool(value, ksize, strides, padding): the mean over NHWC windows (padding excluded)."""
    _nhwc_only("avg_pool", data_format)
    return ops.avg_pool(value if input is None else input, ksize=_four(ksize, "ksize"),
                        strides=_four(strides, "strides"), padding=str(padding), name=name)


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """TF 1.x's tf.nn.dropout: keeps each element with probability keep_prob and scales it by 1 / keep_prob.

    The second argument is keep_prob, as in TensorFlow 1.x (TF 2 renamed it to rate = 1 - keep_prob;
    give rate= by keyword for that). Exactly one of the two; either may be a float or a scalar float
    tensor (a fed placeholder). seed None or 0 derives one from the node's name. Raises
    InvalidArgumentError for both or neither, or a value outside keep_prob in (0, 1] / rate in [0, 1),
    and UnimplementedError for noise_shape.
    """
    if (keep_prob is None) == (rate is None):
        raise errors.InvalidArgumentError(
            "dropout takes exactly one of keep_prob (TF 1.x's second argument) and rate (= 1 - keep_prob)")
    if noise_shape is not None:
        raise errors.UnimplementedError("dropout's noise_shape is not supported: every element draws its own mask")
    x = _graph.convert_to_tensor(x)
    seed = 0 if seed is None else int(seed)
    given = keep_prob if keep_prob is not None else rate
    if isinstance(given, _graph.Tensor):
        g = x.graph
        with g.as_default():
            r = given if rate is not None else _graph.convert_to_tensor(1.0, dtype=given.dtype) - given
            op = g._add("Dropout", [x, r], [("seed", "int", seed)], name or "dropout")
        return op.outputs[0]
    try:
        value = float(given)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(f"dropout: keep_prob / rate must be a float or a scalar tensor, "
                                          f"got {given!r:.60}") from None
    if keep_prob is not None:
        if not 0.0 < value <= 1.0:
            raise errors.InvalidArgumentError(f"dropout: keep_prob must be in (0, 1], got {value}")
        value = 1.0 - value
    elif not 0.0 <= value < 1.0:
        raise errors.InvalidArgumentError(f"dropout: rate must be in [0, 1), got {value}")
    return _graph.Tensor(x.graph, *_core.dropout(x.graph._g, x._ref(), value, seed))
