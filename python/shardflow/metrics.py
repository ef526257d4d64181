"""TF 1.x's tf.metrics: streaming metrics as (value, update_op) pairs over local variables.

    acc, acc_update = tf.metrics.accuracy(labels, predictions)
    sess.run(tf.local_variables_initializer())
    for batch in batches:
        sess.run(acc_update, feed(batch))
    print(sess.run(acc))

As TF 1.x: each metric keeps its running sums in non-trainable variables of the LOCAL_VARIABLES and
METRIC_VARIABLES collections (tf.local_variables_initializer() resets them), update_op adds a batch and
evaluates to the metric after it, value reads the metric without changing it, a metric of nothing is 0, and
metrics_collections / updates_collections receive the two tensors. auc is TF's: num_thresholds thresholds,
ROC or PR curve, trapezoidal sums by default.
"""

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api as _tf
from . import variable_scopes as _vs
from .variables import Variable

__all__ = ["mean", "accuracy", "mean_squared_error", "root_mean_squared_error", "mean_absolute_error",
           "true_positives", "false_positives", "true_negatives", "false_negatives", "precision", "recall", "auc"]

LOCAL_VARIABLES = "local_variables"
METRIC_VARIABLES = "metric_variables"


def _metric_variable(shape, dtype, name):
    g = _graph.get_default_graph()
    v = Variable(np.zeros(shape, _dt.as_dtype(dtype).as_numpy_dtype), name=name, trainable=False)
    g._collections.setdefault(LOCAL_VARIABLES, []).append(v)
    g._collections.setdefault(METRIC_VARIABLES, []).append(v)
    return v


def _div_no_nan(num, den):
    zero = _tf.equal(den, 0)
    return _tf.where(zero, _tf.zeros_like(num), num / _tf.where(zero, _tf.ones_like(den), den))


def _collect(value, update, metrics_collections, updates_collections):
    for key in metrics_collections or []:
        _vs.add_to_collection(key, value)
    for key in updates_collections or []:
        _vs.add_to_collection(key, update)
    return value, update


def _weights_like(values, weights):
    if weights is None:
        return _tf.ones_like(values)
    return _tf.cast(weights, values.dtype) * _tf.ones_like(values)


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of every value seen: (mean, update_op)."""
    values = _graph.convert_to_tensor(values)
    with _vs.variable_scope(name, default_name="mean"):
        values = _tf.cast(values, _dt.float32)
        total = _metric_variable([], _dt.float32, "total")
        count = _metric_variable([], _dt.float32, "count")
        w = _weights_like(values, weights)
        update_total = total.assign_add(_tf.reduce_sum(values * w))
        update_count = count.assign_add(_tf.reduce_sum(w))
        value = _div_no_nan(total.read_value(), count.read_value())
        update = _div_no_nan(update_total, update_count)
        return _collect(value, update, metrics_collections, updates_collections)


def accuracy(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """How often predictions equal labels (weighted): (accuracy, update_op)."""
    labels, predictions = _graph.convert_to_tensor(labels), _graph.convert_to_tensor(predictions)
    if labels.dtype != predictions.dtype:
        predictions = _tf.cast(predictions, labels.dtype)
    with _graph.name_scope(name or "accuracy"):
        correct = _tf.cast(_tf.equal(predictions, labels), _dt.float32)
    return mean(correct, weights, metrics_collections, updates_collections, name or "accuracy")


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                       name=None):
    """The (weighted) mean of (labels - predictions)^2 so far: (mse, update_op)."""
    predictions = _tf.cast(predictions, _dt.float32)
    return mean(_tf.squared_difference(predictions, _tf.cast(labels, _dt.float32)), weights, metrics_collections,
                updates_collections, name or "mean_squared_error")


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                            name=None):
    """sqrt of mean_squared_error: (rmse, update_op)."""
    mse, update = mean_squared_error(labels, predictions, weights, None, None, name or "root_mean_squared_error")
    return _collect(_tf.sqrt(mse), _tf.sqrt(update), metrics_collections, updates_collections)


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                        name=None):
    """The (weighted) mean of |labels - predictions| so far: (mae, update_op)."""
    predictions = _tf.cast(predictions, _dt.float32)
    return mean(_tf.abs(predictions - _tf.cast(labels, _dt.float32)), weights, metrics_collections,
                updates_collections, name or "mean_absolute_error")


def _as_bool(x):
    x = _graph.convert_to_tensor(x)
    return x if x.dtype == _dt.bool_ else _tf.not_equal(x, 0)


def _count(kind, labels, predictions, weights, metrics_collections, updates_collections, name):
    labels, predictions = _as_bool(labels), _as_bool(predictions)
    with _vs.variable_scope(name, default_name=kind):
        hit = {"true_positives": _tf.logical_and(labels, predictions),
               "false_positives": _tf.logical_and(_tf.logical_not(labels), predictions),
               "true_negatives": _tf.logical_and(_tf.logical_not(labels), _tf.logical_not(predictions)),
               "false_negatives": _tf.logical_and(labels, _tf.logical_not(predictions))}[kind]
        hit = _tf.cast(hit, _dt.float32)
        n = _metric_variable([], _dt.float32, "count")
        update = n.assign_add(_tf.reduce_sum(hit * _weights_like(hit, weights)))
        return _collect(n.read_value(), update, metrics_collections, updates_collections)


def true_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                   name=None):
    """The (weighted) count of labels and predictions both true: (count, update_op)."""
    return _count("true_positives", labels, predictions, weights, metrics_collections, updates_collections, name)


def false_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The (weighted) count of predictions true where labels are false."""
    return _count("false_positives", labels, predictions, weights, metrics_collections, updates_collections, name)


def true_negatives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                   name=None):
    """The (weighted) count of labels and predictions both false."""
    return _count("true_negatives", labels, predictions, weights, metrics_collections, updates_collections, name)


def false_negatives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The (weighted) count of predictions false where labels are true."""
    return _count("false_negatives", labels, predictions, weights, metrics_collections, updates_collections, name)


def precision(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """true_positives / (true_positives + false_positives) so far (0 with none): (precision, update_op)."""
    with _vs.variable_scope(name, default_name="precision"):
        tp, tp_up = true_positives(labels, predictions, weights)
        fp, fp_up = false_positives(labels, predictions, weights)
        return _collect(_div_no_nan(tp, tp + fp), _div_no_nan(tp_up, tp_up + fp_up), metrics_collections,
                        updates_collections)


def recall(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """true_positives / (true_positives + false_negatives) so far (0 with none): (recall, update_op)."""
    with _vs.variable_scope(name, default_name="recall"):
        tp, tp_up = true_positives(labels, predictions, weights)
        fn, fn_up = false_negatives(labels, predictions, weights)
        return _collect(_div_no_nan(tp, tp + fn), _div_no_nan(tp_up, tp_up + fn_up), metrics_collections,
                        updates_collections)


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None, updates_collections=None,
        curve="ROC", name=None, summation_method="trapezoidal", thresholds=None):
    """TF 1.x's approximate AUC: confusion counts at num_thresholds thresholds spread over [0, 1] (predictions
    in [0, 1]), summed over the ROC (or PR) curve by the trapezoidal rule (or minoring/majoring, as TF):
    (auc, update_op). summation_method="careful_interpolation" raises UnimplementedError."""
    if curve not in ("ROC", "PR"):
        raise ValueError(f"curve must be either ROC or PR, {curve} unknown")
    if summation_method == "careful_interpolation":
        raise errors.UnimplementedError("tf.metrics.auc(summation_method='careful_interpolation') is not supported; "
                                        "use trapezoidal, minoring or majoring")
    if summation_method not in ("trapezoidal", "minoring", "majoring"):
        raise ValueError(f"Invalid summation_method: {summation_method}")
    if thresholds is None:
        if num_thresholds < 2:
            raise ValueError("num_thresholds must be > 1.")
        kepsilon = 1e-7  # TF's: the end thresholds sit just outside [0, 1]
        thresholds = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        thresholds = [0.0 - kepsilon] + thresholds + [1.0 + kepsilon]
    else:
        thresholds = [0.0 - 1e-7] + list(thresholds) + [1.0 + 1e-7]
    t = len(thresholds)
    with _vs.variable_scope(name, default_name="auc"):
        p = _tf.reshape(_tf.cast(predictions, _dt.float32), [-1, 1])
        lab = _tf.reshape(_as_bool(labels), [-1, 1])
        w = _tf.ones_like(p) if weights is None else _tf.reshape(_tf.cast(weights, _dt.float32) *
                                                                 _tf.ones_like(_tf.reshape(p, [-1])), [-1, 1])
        above = _tf.greater(p, _graph.constant(np.array(thresholds, np.float32).reshape(1, t)))  # [n, t]
        pos = _tf.cast(lab, _dt.float32) * w
        neg = _tf.cast(_tf.logical_not(lab), _dt.float32) * w
        above_f = _tf.cast(above, _dt.float32)
        counts = {"tp": _tf.reduce_sum(above_f * pos, 0), "fn": _tf.reduce_sum((1.0 - above_f) * pos, 0),
                  "tn": _tf.reduce_sum((1.0 - above_f) * neg, 0), "fp": _tf.reduce_sum(above_f * neg, 0)}
        vars_ = {k: _metric_variable([t], _dt.float32, {"tp": "true_positives", "fn": "false_negatives",
                                                         "tn": "true_negatives", "fp": "false_positives"}[k])
                 for k in counts}
        updates = {k: vars_[k].assign_add(counts[k]) for k in counts}
        values = {k: v.read_value() for k, v in vars_.items()}

        def area(c):
            eps = 1e-7
            if curve == "ROC":
                x = c["fp"] / (c["fp"] + c["tn"] + eps)
                y = (c["tp"] + eps) / (c["tp"] + c["fn"] + eps)
            else:
                x = (c["tp"] + eps) / (c["tp"] + c["fn"] + eps)
                y = (c["tp"] + eps) / (c["tp"] + c["fp"] + eps)
            x0, x1, y0, y1 = x[:t - 1], x[1:], y[:t - 1], y[1:]
            if summation_method == "trapezoidal":
                heights = (y0 + y1) / 2.0
            elif summation_method == "minoring":
                heights = _tf.minimum(y0, y1)
            else:
                heights = _tf.maximum(y0, y1)
            return _tf.reduce_sum((x0 - x1) * heights)

        return _collect(area(values), area(updates), metrics_collections, updates_collections)


def __getattr__(name):
    raise AttributeError(f"shardflow has no tf.metrics.{name} (it has: {', '.join(__all__)})")

