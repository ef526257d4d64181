"""TF 1.x's tf.losses: the common losses with weights and TF's default reduction
(SUM_BY_NONZERO_WEIGHTS: the weighted sum over the number of non-zero weights), each added to the
LOSSES collection, and get_total_loss / get_regularization_loss(es) over the collections.
"""

from . import dtypes as _dt
from . import graph as _graph
from . import nn
from . import tf_api as _tf
from . import variable_scopes as vs

__all__ = ["Reduction", "compute_weighted_loss", "softmax_cross_entropy", "sparse_softmax_cross_entropy",
           "sigmoid_cross_entropy", "mean_squared_error", "absolute_difference", "log_loss", "hinge_loss",
           "huber_loss", "add_loss", "get_losses", "get_regularization_losses", "get_regularization_loss",
           "get_total_loss"]


class Reduction:
    """How a loss of many elements becomes one value (TF 1.x's tf.losses.Reduction)."""
    NONE = "none"
    SUM = "weighted_sum"
    MEAN = "weighted_mean"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_BY_NONZERO_WEIGHTS)


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """losses * weights (broadcast) reduced as reduction says; added to loss_collection."""
    if reduction not in Reduction.all():
        raise ValueError(f"Invalid Reduction Key {reduction}.")
    losses = _graph.convert_to_tensor(losses)
    with _graph.name_scope(scope or "weighted_loss"):
        if losses.dtype != _dt.float32 and losses.dtype != _dt.float64:
            losses = _tf.cast(losses, _dt.float32)
        w = _graph.convert_to_tensor(weights, dtype=losses.dtype)
        weighted = losses * w
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            total = _tf.reduce_sum(weighted)
            if reduction == Reduction.SUM:
                loss = total
            elif reduction == Reduction.MEAN:
                loss = _safe_div(total, _tf.reduce_sum(w * _tf.ones_like(losses)))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _safe_div(total, _tf.cast(_tf.size(losses), losses.dtype))
            else:
                nonzero = _tf.cast(_tf.not_equal(w * _tf.ones_like(losses), 0), losses.dtype)
                loss = _safe_div(total, _tf.reduce_sum(nonzero))
    if loss_collection:
        vs.add_to_collection(loss_collection, loss)
    return loss


def _safe_div(num, den):
    # TF's div_no_nan: 0 where the denominator is 0
    zero = _tf.equal(den, 0)
    return _tf.where(zero, _tf.zeros_like(num), num / _tf.where(zero, _tf.ones_like(den), den))


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=vs.GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of softmax(logits) against one-hot (or probability) labels, with label smoothing."""
    logits = _graph.convert_to_tensor(logits)
    labels = _tf.cast(onehot_labels, logits.dtype)
    with _graph.name_scope(scope or "softmax_cross_entropy_loss"):
        if label_smoothing:
            n = _tf.cast(_tf.shape(labels)[-1], logits.dtype)
            labels = labels * (1.0 - label_smoothing) + label_smoothing / n
        losses = nn.softmax_cross_entropy_with_logits_v2(labels=_tf.stop_gradient(labels), logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of softmax(logits) against class indices labels."""
    with _graph.name_scope(scope or "sparse_softmax_cross_entropy_loss"):
        losses = nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=vs.GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Element-wise logistic loss, labels smoothed towards 1/2 by label_smoothing."""
    logits = _graph.convert_to_tensor(logits)
    labels = _tf.cast(multi_class_labels, logits.dtype)
    with _graph.name_scope(scope or "sigmoid_cross_entropy_loss"):
        if label_smoothing:
            labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
        losses = nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def _pair(labels, predictions):
    predictions = _graph.convert_to_tensor(predictions)
    if not predictions.dtype.is_floating:
        predictions = _tf.cast(predictions, _dt.float32)
    return _tf.cast(labels, predictions.dtype), predictions


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """(predictions - labels)^2, weighted and reduced."""
    labels, predictions = _pair(labels, predictions)
    with _graph.name_scope(scope or "mean_squared_error"):
        return compute_weighted_loss(_tf.squared_difference(predictions, labels), weights, None, loss_collection,
                                     reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """|predictions - labels|, weighted and reduced."""
    labels, predictions = _pair(labels, predictions)
    with _graph.name_scope(scope or "absolute_difference"):
        return compute_weighted_loss(_tf.abs(predictions - labels), weights, None, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None, loss_collection=vs.GraphKeys.LOSSES,
             reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """-labels * log(predictions + epsilon) - (1 - labels) * log(1 - predictions + epsilon)."""
    labels, predictions = _pair(labels, predictions)
    with _graph.name_scope(scope or "log_loss"):
        losses = -labels * _tf.log(predictions + epsilon) - (1.0 - labels) * _tf.log(1.0 - predictions + epsilon)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """max(0, 1 - (2 * labels - 1) * logits) for 0/1 labels."""
    labels, logits = _pair(labels, logits)
    with _graph.name_scope(scope or "hinge_loss"):
        losses = nn.relu(1.0 - (2.0 * labels - 1.0) * logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None, loss_collection=vs.GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """0.5 * e^2 where |e| <= delta, else delta * (|e| - 0.5 * delta), for e = predictions - labels."""
    labels, predictions = _pair(labels, predictions)
    with _graph.name_scope(scope or "huber_loss"):
        err = _tf.abs(predictions - labels)
        quad = _tf.minimum(err, _graph.convert_to_tensor(delta, dtype=err.dtype))
        losses = 0.5 * quad * quad + delta * (err - quad)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def add_loss(loss, loss_collection=vs.GraphKeys.LOSSES):
    """Adds loss to loss_collection."""
    if loss_collection:
        vs.add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=vs.GraphKeys.LOSSES):
    """The losses of loss_collection (whose name matches scope)."""
    return vs.get_collection(loss_collection, scope)


def get_regularization_losses(scope=None):
    """The REGULARIZATION_LOSSES collection (whose name matches scope)."""
    return vs.get_collection(vs.GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    """The sum of the regularization losses, 0.0 when there are none."""
    losses = get_regularization_losses(scope)
    if not losses:
        return _graph.constant(0.0, name=name)
    return _tf.add_n(losses, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """The sum of the LOSSES collection and (by default) the regularization losses; ValueError when empty."""
    losses = get_losses(scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    if not losses:
        raise ValueError("No losses found in the collection.")
    return _tf.add_n(losses, name=name)


def __getattr__(name):
    raise AttributeError(f"shardflow has no tf.losses.{name} (tf.losses has the common losses: "
                         + ", ".join(__all__) + ")")
