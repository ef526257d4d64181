"""TF 1.x's tf.metrics, streamed over batches as TF 1.x evaluation loops do, against NumPy."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def _np_auc(labels, scores, num_thresholds=200, curve="ROC"):
    eps = 1e-7
    th = [0.0 - eps] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1.0 + eps]
    tp = np.array([((scores > t) & labels).sum() for t in th], float)
    fp = np.array([((scores > t) & ~labels).sum() for t in th], float)
    fn = np.array([((scores <= t) & labels).sum() for t in th], float)
    tn = np.array([((scores <= t) & ~labels).sum() for t in th], float)
    if curve == "ROC":
        x, y = fp / (fp + tn + eps), (tp + eps) / (tp + fn + eps)
    else:
        x, y = (tp + eps) / (tp + fn + eps), (tp + eps) / (tp + fp + eps)
    return np.sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2)


def test_streaming_metrics_over_batches_as_tf1():
    rs = np.random.RandomState(0)
    labels_all = rs.randint(0, 2, size=60).astype(bool)
    scores_all = np.clip(labels_all * 0.3 + rs.rand(60) * 0.7, 0, 1).astype(np.float32)
    preds_all = scores_all > 0.5
    y = tf.placeholder(tf.bool, [None])
    s = tf.placeholder(tf.float32, [None])
    w = tf.placeholder(tf.float32, [None])
    p = s > 0.5
    metrics = {
        "accuracy": tf.metrics.accuracy(y, p),
        "weighted_accuracy": tf.metrics.accuracy(y, p, weights=w),
        "precision": tf.metrics.precision(y, p),
        "recall": tf.metrics.recall(y, p),
        "tp": tf.metrics.true_positives(y, p),
        "mse": tf.metrics.mean_squared_error(tf.cast(y, tf.float32), s),
        "rmse": tf.metrics.root_mean_squared_error(tf.cast(y, tf.float32), s),
        "mae": tf.metrics.mean_absolute_error(tf.cast(y, tf.float32), s),
        "mean": tf.metrics.mean(s),
        "auc": tf.metrics.auc(y, s),
        "pr_auc": tf.metrics.auc(y, s, curve="PR", num_thresholds=50),
    }
    assert all(not v.name.startswith("accuracy") for v in tf.trainable_variables())
    weights_all = rs.rand(60).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        assert sess.run(metrics["accuracy"][0]) == 0.0  # nothing seen: 0, as TF
        for i in range(0, 60, 20):
            b = slice(i, i + 20)
            sess.run([u for _, u in metrics.values()], {y: labels_all[b], s: scores_all[b], w: weights_all[b]})
        got = {k: sess.run(v) for k, (v, _) in metrics.items()}
        sess.run(tf.local_variables_initializer())  # resets every metric
        assert sess.run(metrics["tp"][0]) == 0.0
    tp = (labels_all & preds_all).sum()
    want = {"accuracy": (labels_all == preds_all).mean(),
            "weighted_accuracy": ((labels_all == preds_all) * weights_all).sum() / weights_all.sum(),
            "precision": tp / preds_all.sum(), "recall": tp / labels_all.sum(), "tp": tp,
            "mse": ((labels_all - scores_all) ** 2).mean(), "rmse": np.sqrt(((labels_all - scores_all) ** 2).mean()),
            "mae": np.abs(labels_all - scores_all).mean(), "mean": scores_all.mean(),
            "auc": _np_auc(labels_all, scores_all), "pr_auc": _np_auc(labels_all, scores_all, 50, "PR")}
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), k


def test_metric_update_returns_the_value_after_it_and_collections():
    v = tf.placeholder(tf.float32, [None])
    m, update = tf.metrics.mean(v, metrics_collections=["my_metrics"], updates_collections=["my_updates"])
    assert tf.get_collection("my_metrics") == [m] and tf.get_collection("my_updates") == [update]
    assert len(tf.get_collection(tf.GraphKeys.LOCAL_VARIABLES)) == 2
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        assert sess.run(update, {v: [1.0, 3.0]}) == 2.0
        assert sess.run(update, {v: [8.0]}) == 4.0
        assert sess.run(m) == 4.0
    with pytest.raises(tf.errors.UnimplementedError, match="careful_interpolation"):
        tf.metrics.auc(tf.constant([True]), tf.constant([0.5]), summation_method="careful_interpolation")
    with pytest.raises(AttributeError, match="tf.metrics.mean_iou"):
        tf.metrics.mean_iou
