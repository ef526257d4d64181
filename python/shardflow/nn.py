"""Neural-network helpers with TensorFlow's names, over the generated ops."""

from . import _core
from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import ops
from . import random as _random
from . import tf_api as _tf

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add", "l2_loss", "dropout",
           "conv2d", "max_pool", "avg_pool", "embedding_lookup", "in_top_k",
           "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
           "sigmoid_cross_entropy_with_logits", "log_uniform_candidate_sampler", "uniform_candidate_sampler",
           "softmax_cross_entropy_with_logits_v2", "relu6", "elu", "selu", "softplus", "xw_plus_b", "l2_normalize",
           "moments", "batch_normalization",
           "nce_loss", "sampled_softmax_loss", "top_k"]

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
    with x.graph.as_default():
        seed = _random.op_seed(seed)
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


def _row_partition(ids, shard_rows, strategy):
    """(shard of each id, its row in that shard) for TF 1.x's partition strategies over len(shard_rows) shards."""
    n = len(shard_rows)
    if strategy == "mod":
        return _tf.floormod(ids, n), _tf.floordiv(ids, n)
    total = sum(shard_rows)
    per, extras = total // n, total % n  # the first `extras` shards hold per + 1 rows (TF's "div")
    if per == 0:
        return _tf.floordiv(ids, per + 1), _tf.floormod(ids, per + 1)
    shard = _tf.maximum(_tf.floordiv(ids, per + 1), _tf.floordiv(ids - extras, per))
    row = _tf.where(shard < extras, _tf.floormod(ids, per + 1), _tf.floormod(ids - extras, per))
    return shard, row


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True, max_norm=None):
    """TF 1.x's tf.nn.embedding_lookup: the rows of params at ids ([*ids.shape, *params.shape[1:]]).

    params is a Tensor or Variable, or a list of them holding one table's rows split along dimension 0:
    with partition_strategy "mod" id i lives in shard i % n at row i // n; with "div" the shards hold
    contiguous ranges (the first ones one row more when the rows do not divide evenly). Every shard's
    size along dimension 0 must be known when the graph is built. Differentiable with respect to params.
    max_norm clips each looked-up row to that L2 norm. An id out of range fails the step (as TF's CPU
    gather does). (shardflow's sharded sf.embedding.EmbeddingTable is the scalable form of this.)
    """
    if partition_strategy not in ("mod", "div"):
        raise ValueError(f"Unrecognized partition strategy: {partition_strategy}")
    if isinstance(params, (list, tuple)):
        params = list(params)
    else:
        params = [params]
    if not params:
        raise ValueError("Need at least one param")
    params = [_graph.convert_to_tensor(p) for p in params]
    ids = _graph.convert_to_tensor(ids)
    g = params[0].graph
    with g.as_default(), _graph.name_scope(name or "embedding_lookup"):
        if len(params) == 1:
            out = _tf.gather(params[0], ids)
        else:
            rows = [p.shape[0] if p.shape.rank else None for p in params]
            if None in rows:
                raise errors.InvalidArgumentError(
                    "embedding_lookup over a list of shards needs each shard's size along dimension 0 known "
                    "when the graph is built, got shapes " + ", ".join(str(p.shape) for p in params))
            shard, row = _row_partition(ids, rows, partition_strategy)
            out = None
            for k, p in enumerate(params):
                mine = _tf.equal(shard, k)
                got = _tf.gather(p, _tf.where(mine, row, _tf.zeros_like(row)))
                mask = mine
                for _ in range((p.shape.rank or 1) - 1):
                    mask = _tf.expand_dims(mask, -1)
                part = _tf.where(mask, got, _tf.zeros_like(got))
                out = part if out is None else out + part
        if max_norm is not None:
            extra = list(range(ids.shape.rank if ids.shape.rank is not None else 1, out.shape.rank))
            norm = _tf.sqrt(_tf.reduce_sum(_tf.square(out), axis=extra, keepdims=True))
            clip = _graph.convert_to_tensor(float(max_norm), dtype=out.dtype)
            out = out * clip / _tf.maximum(norm, clip)
        return out


def in_top_k(predictions, targets, k, name=None):
    """TF 1.x's tf.nn.in_top_k: whether each row's target class is among its k largest predictions
    ([batch] bool, predictions [batch, classes] float32, targets [batch] int32/int64).

    As in TensorFlow, a tie at the k-th place counts as in the top k (the target is in when fewer than
    k predictions are strictly larger), and a row with a target out of range or a non-finite prediction
    gives False.
    """
    predictions = _graph.convert_to_tensor(predictions)
    targets = _graph.convert_to_tensor(targets)
    if predictions.dtype != _dt.float32:
        raise TypeError(f"in_top_k's predictions must be float32, got {predictions.dtype.name}")
    if targets.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"in_top_k's targets must be int32 or int64, got {targets.dtype.name}")
    if predictions.shape.rank not in (None, 2):
        raise ValueError(f"predictions must be 2-dimensional, got shape {predictions.shape}")
    classes = predictions.shape[1] if predictions.shape.rank else None
    g = predictions.graph
    with g.as_default(), _graph.name_scope(name or "in_top_k"):
        if classes is None:
            raise errors.InvalidArgumentError("in_top_k needs the number of classes known when the graph is built")
        hot = _tf.one_hot(targets, classes, dtype=_dt.float32)  # all zeros for a target out of range
        valid = _tf.logical_and(targets >= 0, targets < classes)
        finite = _tf.reduce_min(_tf.cast(ops.is_finite(predictions), _dt.int32), axis=1) > 0
        safe = _tf.where(ops.is_finite(predictions), predictions, _tf.zeros_like(predictions))
        target_score = _tf.reduce_sum(safe * hot, axis=1, keepdims=True)
        larger = _tf.reduce_sum(_tf.cast(safe > target_score, _dt.int32), axis=1)
        return _tf.logical_and(_tf.logical_and(valid, finite), larger < int(k))


def softmax_cross_entropy_with_logits_v2(labels, logits, axis=-1, name=None, dim=None):
    """Per-example losses for label probabilities; unlike the v1 name, gradients also flow into labels."""
    if (dim if dim is not None else axis) not in (-1, None):
        raise errors.UnimplementedError("softmax_cross_entropy_with_logits_v2 over an axis other than the last")
    logits = _graph.convert_to_tensor(logits)
    labels = _graph.convert_to_tensor(labels, dtype=logits.dtype)
    with _graph.name_scope(name or "softmax_cross_entropy_with_logits"):
        return -_tf.reduce_sum(labels * ops.log_softmax(logits), axis=-1)


def relu6(features, name=None):
    """min(max(features, 0), 6)."""
    x = _graph.convert_to_tensor(features)
    return _tf.minimum(ops.relu(x), _graph.constant(6, dtype=x.dtype), name=name)


def elu(features, name=None):
    """features if > 0, else exp(features) - 1."""
    return ops.elu(features, name=name)


def selu(features, name=None):
    """scale * elu(features), with elu's negative part times alpha (TF's constants)."""
    x = _graph.convert_to_tensor(features)
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    with _graph.name_scope(name or "selu"):
        return scale * _tf.where(x > 0, x, alpha * ops.elu(x))


def softplus(features, name=None):
    """log(1 + exp(features)), computed stably."""
    return ops.softplus(features, name=name)


def xw_plus_b(x, weights, biases, name=None):
    """matmul(x, weights) + biases."""
    return bias_add(_tf.matmul(x, weights), biases, name=name)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """x / sqrt(max(sum(x ** 2, axis), epsilon)), as TF 1.x (dim is axis's older name)."""
    axis = dim if axis is None else axis
    x = _graph.convert_to_tensor(x)
    with _graph.name_scope(name or "l2_normalize"):
        sq = _tf.reduce_sum(_tf.square(x), axis, keepdims=True)
        return x * ops.rsqrt(_tf.maximum(sq, _graph.constant(epsilon, dtype=x.dtype)))


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None):
    """(mean, variance) of x over axes, the variance the mean squared difference from the mean, as TF."""
    x = _graph.convert_to_tensor(x)
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with _graph.name_scope(name or "moments"):
        mean = _tf.reduce_mean(x, axes, keepdims=True)
        var = _tf.reduce_mean(_tf.squared_difference(x, _tf.stop_gradient(mean)), axes, keepdims=True)
        if not keep:
            mean, var = _tf.squeeze(mean, axes), _tf.squeeze(var, axes)
        return mean, var


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """(x - mean) * scale / sqrt(variance + variance_epsilon) + offset (offset, scale may be None), as TF."""
    x = _graph.convert_to_tensor(x)
    with _graph.name_scope(name or "batchnorm"):
        inv = ops.rsqrt(_graph.convert_to_tensor(variance, dtype=x.dtype) + variance_epsilon)
        if scale is not None:
            inv = inv * scale
        mean = _graph.convert_to_tensor(mean, dtype=x.dtype)
        return x * inv + ((offset - mean * inv) if offset is not None else -mean * inv)


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):  # noqa: N803
    """TF's element-wise logistic loss, max(x, 0) - x * z + log(1 + exp(-|x|)) for logits x and labels z."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call `sigmoid_cross_entropy_with_logits` with named arguments (labels=..., logits=...)")
    logits = _graph.convert_to_tensor(logits)
    labels = _graph.convert_to_tensor(labels, dtype=logits.dtype)
    with _graph.name_scope(name or "logistic_loss"):
        return ops.relu(logits) - logits * labels + ops.log1p(_tf.exp(-_tf.abs(logits)))


def _candidate_sampler(op, true_classes, num_true, num_sampled, unique, range_max, seed, name):
    true_classes = _graph.convert_to_tensor(true_classes)
    if true_classes.dtype != _dt.int64:
        raise errors.InvalidArgumentError(f"{op}: true_classes must be int64 [batch_size, num_true], got "
                                          f"{true_classes.dtype.name} ({true_classes.name})")
    return ops.add_op(op, [true_classes], {"num_true": int(num_true), "num_sampled": int(num_sampled),
                                            "unique": bool(unique), "range_max": int(range_max),
                                            "seed": _random.op_seed(seed)}, name=name)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """TF 1.x's: (sampled_candidates int64 [num_sampled], true_expected_count float32 [batch, num_true],
    sampled_expected_count float32 [num_sampled]); classes in [0, range_max) with P(c) = log((c + 2) / (c + 1)) /
    log(range_max + 1), all distinct when unique. The random stream is shardflow's (a seed fixes it), not TF's."""
    return _candidate_sampler("LogUniformCandidateSampler", true_classes, num_true, num_sampled, unique, range_max,
                              seed, name)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """TF 1.x's uniform candidate sampler; returns as log_uniform_candidate_sampler."""
    return _candidate_sampler("UniformCandidateSampler", true_classes, num_true, num_sampled, unique, range_max,
                              seed, name)


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
                            subtract_log_q, remove_accidental_hits, partition_strategy, seed):
    # TF 1.x's nn_impl._compute_sampled_logits: the logits of the true and the sampled classes, each less the
    # log of its expected count, and their labels (1 / num_true for the true ones).
    if not isinstance(weights, (list, tuple)):
        weights = [weights]
    if not isinstance(biases, (list, tuple)):
        biases = [biases]
    inputs = _graph.convert_to_tensor(inputs)
    labels = _tf.cast(labels, _dt.int64)
    if labels.shape.rank == 1:
        labels = _tf.reshape(labels, [-1, int(num_true)])
    labels_flat = _tf.reshape(labels, [-1])
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed=seed)
    sampled, true_expected, sampled_expected = (_tf.stop_gradient(v) for v in sampled_values)
    sampled = _tf.cast(sampled, _dt.int64)
    # TF looks the true and sampled ids up together and slices; two lookups give the same values and gradients.
    true_w = embedding_lookup(weights, labels_flat, partition_strategy=partition_strategy)
    sampled_w = embedding_lookup(weights, sampled, partition_strategy=partition_strategy)
    sampled_logits = _tf.matmul(inputs, sampled_w, transpose_b=True)
    true_b = embedding_lookup(biases, labels_flat, partition_strategy=partition_strategy)
    sampled_b = embedding_lookup(biases, sampled, partition_strategy=partition_strategy)
    dim = inputs.shape[-1]
    if dim is None:
        raise errors.InvalidArgumentError(f"the inputs' last dimension must be known, got {inputs.shape}")
    true_w = _tf.reshape(true_w, [-1, int(num_true), dim])
    true_logits = _tf.reduce_sum(_tf.expand_dims(inputs, 1) * true_w, axis=2)
    true_logits = true_logits + _tf.reshape(true_b, [-1, int(num_true)])
    sampled_logits = sampled_logits + sampled_b
    if remove_accidental_hits:
        # TF adds -FLOAT_MAX to a sampled logit whose class is one of the row's true classes.
        hits = _tf.reduce_any(_tf.equal(_tf.expand_dims(labels, 2), _tf.reshape(sampled, [1, 1, -1])), axis=1)
        sampled_logits = sampled_logits + _tf.where(
            hits, _tf.fill(_tf.shape(sampled_logits), _graph.constant(-3.4028234663852886e38, sampled_logits.dtype)),
            _tf.zeros_like(sampled_logits))
    if subtract_log_q:
        true_logits = true_logits - _tf.log(true_expected)
        sampled_logits = sampled_logits - _tf.log(sampled_expected)
    out_logits = _tf.concat([true_logits, sampled_logits], 1)
    out_labels = _tf.concat([_tf.ones_like(true_logits) / float(num_true), _tf.zeros_like(sampled_logits)], 1)
    return out_logits, out_labels


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, partition_strategy="mod", name="nce_loss"):
    """TF 1.x's noise-contrastive estimation loss, [batch]: the logistic loss of each true class and of
    num_sampled classes drawn log-uniformly (Zipfian: order the classes by frequency), each logit less the log of
    its expected count. weights [num_classes, dim] (or a list of shards as embedding_lookup), biases
    [num_classes], labels int [batch, num_true], inputs [batch, dim]. Use it for training; evaluate with the
    full softmax, as TF's documentation says."""
    inputs = _graph.convert_to_tensor(inputs)
    with inputs.graph.as_default(), _graph.name_scope(name or "nce_loss"):
        logits, labels = _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                                 sampled_values, True, remove_accidental_hits, partition_strategy,
                                                 None)
        return _tf.reduce_sum(sigmoid_cross_entropy_with_logits(labels=labels, logits=logits), axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
                         remove_accidental_hits=True, partition_strategy="mod", name="sampled_softmax_loss",
                         seed=None):
    """TF 1.x's sampled softmax loss, [batch]: softmax cross-entropy over each row's true classes and
    num_sampled log-uniformly drawn ones (those equal to a true class removed), logits less the log of their
    expected counts. Arguments as nce_loss."""
    inputs = _graph.convert_to_tensor(inputs)
    with inputs.graph.as_default(), _graph.name_scope(name or "sampled_softmax_loss"):
        logits, labels = _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                                 sampled_values, True, remove_accidental_hits, partition_strategy,
                                                 seed)
        return softmax_cross_entropy_with_logits(labels=_tf.stop_gradient(labels), logits=logits)



_RNN = ("dynamic_rnn", "static_rnn", "rnn_cell")


def __getattr__(name):
    if name == "top_k":  # tf1_more_ops.py builds on tf_api, imported on first use
        from .tf1_more_ops import top_k
        return top_k
    if name == "embedding_lookup_sparse":  # sparse.py builds on this module's embedding_lookup
        from .sparse import embedding_lookup_sparse
        return embedding_lookup_sparse
    if name in _RNN:  # rnn.py builds on this module, so it is imported on first use
        from . import rnn
        return rnn.rnn_cell if name == "rnn_cell" else getattr(rnn, name)
    raise AttributeError(f"module 'shardflow.nn' has no attribute '{name}'")
