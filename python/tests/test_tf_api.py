"""TensorFlow 1.x's names (sf.reduce_sum, sf.stack, sf.range, sf.math.floordiv, ...) against NumPy."""

import numpy as np
import pytest

import shardflow as sf

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5


def run(fetches, feeds=None, graph=None):
    with sf.Session(graph or sf.get_default_graph()) as s:
        return s.run(fetches, feeds)


@pytest.fixture(autouse=True)
def fresh_graph():
    sf.reset_default_graph()
    yield


def test_reductions_take_axis_and_keepdims_as_tensorflow():
    x = sf.constant(A)
    cases = {
        "sum_all": (sf.reduce_sum(x), A.sum()), "sum_1": (sf.reduce_sum(x, 1), A.sum(1)),
        "sum_neg_keep": (sf.reduce_sum(x, axis=-1, keepdims=True), A.sum(-1, keepdims=True)),
        "sum_none_of_them": (sf.reduce_sum(x, axis=[]), A),
        "mean_02": (sf.reduce_mean(x, [0, 2]), A.mean((0, 2))), "max": (sf.reduce_max(x, 2), A.max(2)),
        "min": (sf.reduce_min(x, 0), A.min(0)), "prod": (sf.reduce_prod(x[:, :, :2] / 10, 1), (A[:, :, :2] / 10).prod(1)),
        "argmax": (sf.argmax(x, 1), A.argmax(1)), "argmax_default": (sf.argmax(x), A.argmax(0)),
        "argmin": (sf.argmin(x, axis=-1, output_type=sf.int32), A.argmin(-1).astype(np.int32)),
    }
    out = run({k: v[0] for k, v in cases.items()})
    for k, (_, want) in cases.items():
        assert out[k].shape == np.shape(want), k
        assert out[k].dtype == np.asarray(want).dtype, k
        np.testing.assert_allclose(out[k], want, rtol=1e-6, err_msg=k)


def test_shapes_stack_unstack_split_concat():
    x = sf.constant(A)
    a, b = sf.constant(A[0]), sf.constant(A[1])
    cases = {
        "stack0": (sf.stack([a, b]), np.stack([A[0], A[1]])), "stack-1": (sf.stack([a, b], axis=-1), np.stack([A[0], A[1]], -1)),
        "stack1": (sf.stack([a, b, a], axis=1), np.stack([A[0], A[1], A[0]], 1)),
        "concat": (sf.concat([a, b], 1), np.concatenate([A[0], A[1]], 1)),
        "reshape": (sf.reshape(x, [4, -1]), A.reshape(4, -1)), "transpose": (sf.transpose(x), A.T),
        "transpose_perm": (sf.transpose(x, [1, 0, 2]), A.transpose(1, 0, 2)),
        "expand": (sf.expand_dims(x, -1), A[..., None]), "squeeze": (sf.squeeze(sf.expand_dims(x, 1), [1]), A),
        "tile": (sf.tile(a, [2, 1]), np.tile(A[0], (2, 1))), "shape": (sf.shape(x), np.array([2, 3, 4], np.int32)),
        "size": (sf.size(x), np.int32(24)), "rank": (sf.rank(x), np.int32(3)),
        "gather": (sf.gather(a, [2, 0]), A[0][[2, 0]]),
    }
    out = run({k: v[0] for k, v in cases.items()})
    for k, (_, want) in cases.items():
        np.testing.assert_array_equal(out[k], want, err_msg=k)
    parts = run(sf.unstack(x, axis=1))
    assert len(parts) == 3
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p, A[:, i])
    halves = run(sf.split(x, 2, axis=2))
    np.testing.assert_array_equal(halves[1], A[:, :, 2:])
    with pytest.raises(sf.errors.InvalidArgumentError, match="list of sizes"):
        sf.split(x, [1, 3], axis=2)


def test_stack_and_clip_carry_gradients():
    x = sf.placeholder(sf.float64, [3], name="x")
    y = sf.reduce_sum(sf.stack([x * 2.0, sf.clip_by_value(x, -1.0, 1.0)]) ** 2)
    (dx,) = sf.gradients(y, [x])
    v = np.array([0.5, 3.0, -2.0])
    got = run(dx, {x: v})
    np.testing.assert_allclose(got, 8 * v + 2 * np.clip(v, -1, 1) * (np.abs(v) <= 1))


def test_range_fill_zeros_ones_one_hot_where_cast():
    n = sf.placeholder(sf.int32, [])
    cases = {
        "range_n": (sf.range(5), np.arange(5, dtype=np.int32)), "range": (sf.range(2, 11, 3), np.arange(2, 11, 3, dtype=np.int32)),
        "range_f": (sf.range(0.0, 1.0, 0.25), np.arange(0, 1, 0.25, dtype=np.float32)),
        "range_dtype": (sf.range(3, dtype=sf.float64), np.arange(3.0)),
        "range_fed": (sf.range(n), np.arange(4, dtype=np.int32)),
        "zeros": (sf.zeros([2, 3]), np.zeros((2, 3), np.float32)), "zeros_n": (sf.zeros(3), np.zeros(3, np.float32)),
        "zeros_scalar": (sf.zeros([]), np.float32(0)), "ones": (sf.ones([2], sf.int64), np.ones(2, np.int64)),
        "fill": (sf.fill([2, 2], 7.0), np.full((2, 2), 7.0, np.float32)),
        "zeros_like": (sf.zeros_like(sf.constant(A)), np.zeros_like(A)),
        "one_hot": (sf.one_hot([0, 2], 3), np.eye(3, dtype=np.float32)[[0, 2]]),
        "where": (sf.where(sf.constant(A) > 0, sf.constant(A), 0.0), np.where(A > 0, A, 0)),
        "cast": (sf.cast(sf.constant(A), sf.int32), A.astype(np.int32)),
        "max": (sf.maximum(sf.constant(A), 1.0), np.maximum(A, 1)), "add_n": (sf.add_n([sf.constant(A)] * 3), 3 * A),
    }
    out = run({k: v[0] for k, v in cases.items()}, {n: 4})
    for k, (_, want) in cases.items():
        assert out[k].dtype == np.asarray(want).dtype, k
        np.testing.assert_array_equal(out[k], want, err_msg=k)
    with pytest.raises(sf.errors.InvalidArgumentError, match="both x and y, or neither"):
        sf.where(sf.constant(A) > 0, sf.constant(A))


def test_where_unique_and_unsorted_segment_sum_against_numpy():
    ids = np.array([5, -2, 5, 9, -2, 5], np.int64)
    data = np.arange(18, dtype=np.float64).reshape(6, 3)
    seg = np.array([2, 0, 2, 3, 0, 1], np.int32)
    y, idx = sf.unique(ids)
    x = sf.placeholder(sf.float64, [None, 3], name="data")
    s = sf.math.unsorted_segment_sum(x, seg, 4)
    assert s.shape.as_list() == [4, 3]
    (ds,) = sf.gradients(sf.reduce_sum(s * np.arange(12.0).reshape(4, 3)), [x])
    got = run({"where": sf.where(sf.constant(A) > 5), "y": y, "idx": idx, "s": s, "ds": ds}, {x: data})
    np.testing.assert_array_equal(got["where"], np.argwhere(A > 5))
    assert got["where"].dtype == np.int64
    np.testing.assert_array_equal(got["y"], [5, -2, 9])
    np.testing.assert_array_equal(got["idx"], [0, 1, 0, 2, 1, 0])
    want = np.zeros((4, 3))
    np.add.at(want, seg, data)
    np.testing.assert_array_equal(got["s"], want)
    np.testing.assert_array_equal(got["ds"], np.arange(12.0).reshape(4, 3)[seg])
    with pytest.raises(sf.errors.InvalidArgumentError, match="index 4 .at position 3"):
        run(sf.math.unsorted_segment_sum(x, np.array([0, 1, 2, 4, 0, 0], np.int32), 4), {x: data})


def test_math_namespace_matches_numpy():
    a = np.array([7, -7, 7, -7, 5], np.int64)
    b = np.array([2, 2, -2, -2, 5], np.int64)
    f = np.array([0.5, 1.5, 2.5, -0.5, 3.7, np.nan, np.inf])
    x, y, z = sf.constant(a), sf.constant(b), sf.constant(f)
    cases = {
        "floordiv": (sf.math.floordiv(x, y), a // b), "floormod": (sf.math.floormod(x, y), a % b),
        "truediv": (sf.math.truediv(x, y), a / b), "divide": (sf.divide(x, 2), a / 2),
        "sqdiff": (sf.math.squared_difference(x, y), (a - b) ** 2), "round": (sf.math.round(z), np.round(f)),
        "floor": (sf.math.floor(z), np.floor(f)), "ceil": (sf.math.ceil(z), np.ceil(f)),
        "is_nan": (sf.math.is_nan(z), np.isnan(f)), "is_inf": (sf.math.is_inf(z), np.isinf(f)),
        "is_finite": (sf.math.is_finite(z), np.isfinite(f)), "sin": (sf.math.sin(z[:5]), np.sin(f[:5])),
        "log1p": (sf.math.log1p(z[:5]), np.log1p(f[:5])), "expm1": (sf.math.expm1(z[:5]), np.expm1(f[:5])),
    }
    out = run({k: v[0] for k, v in cases.items()})
    for k, (_, want) in cases.items():
        assert out[k].dtype == np.asarray(want).dtype, k
        np.testing.assert_allclose(out[k], want, rtol=1e-15, err_msg=k)


def test_top_level_elementwise_names_as_tensorflow():
    f = np.array([0.25, 1.5, 2.0, 3.7])
    z = sf.constant(f)
    cases = {
        "tanh": (sf.tanh(z), np.tanh(f)), "sigmoid": (sf.sigmoid(z), 1 / (1 + np.exp(-f))),
        "math.tanh": (sf.math.tanh(z), np.tanh(f)), "exp": (sf.exp(z), np.exp(f)), "log": (sf.log(z), np.log(f)),
        "sqrt": (sf.sqrt(z), np.sqrt(f)), "square": (sf.square(z), f * f), "abs": (sf.abs(-z), f),
        "sin": (sf.sin(z), np.sin(f)), "cos": (sf.cos(z), np.cos(f)), "pow": (sf.pow(z, 3), f ** 3),
        "math.pow": (sf.math.pow(2.0, z), 2.0 ** f), "reciprocal": (sf.math.reciprocal(z), 1 / f),
        "rsqrt": (sf.math.rsqrt(z), 1 / np.sqrt(f)), "negative": (sf.negative(z), -f), "sign": (sf.sign(-z), -np.sign(f)),
    }
    out = run({k: v[0] for k, v in cases.items()})
    for k, (_, want) in cases.items():
        np.testing.assert_allclose(out[k], want, rtol=1e-12, err_msg=k)
    assert abs(-3) == 3 and pow(2, 3) == 8  # the package's names do not leak into this module's builtins


def test_leaky_relu_and_its_gradient():
    x = sf.placeholder(sf.float32, [None], name="x")
    y = sf.nn.leaky_relu(x, alpha=0.1)
    (dx,) = sf.gradients(sf.reduce_sum(y), [x])
    v = np.array([-2.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    got_y, got_dx = run([y, dx], {x: v})
    np.testing.assert_allclose(got_y, np.where(v > 0, v, 0.1 * v), rtol=1e-7)
    np.testing.assert_allclose(got_dx, np.where(v > 0, 1.0, 0.1).astype(np.float32), rtol=1e-7)
