"""Neural-network helpers with TensorFlow's names, over the generated ops."""

from . import _core
from . import graph as _graph
from . import ops

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add", "l2_loss", "dropout",
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


def dropout(x, rate, seed=0):
    """Zeroes each element with probability rate and scales the rest by 1/(1-rate); seed 0 derives one."""
    x = _graph.convert_to_tensor(x)
    return _graph.Tensor(x.graph, *_core.dropout(x.graph._g, x._ref(), float(rate), int(seed)))
