"""More ops against independent NumPy references: what test_reference_ops.py does not reach.

Expected values come from NumPy or a reference loop here, never from shardflow. Where
TensorFlow and NumPy differ, TensorFlow's semantics are the target (said where it matters).

Many element-wise kernels take a vectorised path only for whole SIMD packets (16 float32 or 8
float64 lanes on AVX-512) and a scalar path for the tail, so the special-value tests here repeat
their values to 64 elements: every value then lands in a full packet. The first four tests
failed on the build they were written against (Eigen 3.4 packet math):

* Sqrt(inf) was NaN (the fast-math AVX-512 psqrt is x * rsqrt(x));
* Pow(-inf, 3) and Pow(-0, -1) were +inf, Pow(-inf, -3) and Pow(-0, 3) +0 (the vectorised
  generic_pow drops the sign of an odd power of a negative zero or infinity);
* Neg(+0.0) was +0.0 (pnegate is 0 - x);
* MaxPool of a window of -inf was -3.4e38 (the accumulator started at lowest(), not -inf).
"""

import sys
import warnings

import numpy as np
import pytest

import shardflow as sf

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_reference_ops import assert_same, conv2d_ref, pool_ref, run, run_in_subprocess  # noqa: E402

O = sf.ops
RNG = np.random.default_rng(2024)
SF_DT = {np.float32: sf.float32, np.float64: sf.float64, np.int32: sf.int32, np.int64: sf.int64,
         np.bool_: sf.bool_}
FLOATS = [np.float32, np.float64]


def packets(values, dtype, n=64):
    """values repeated to n elements of dtype (each value lands in a full SIMD packet)."""
    return np.resize(np.asarray(values, np.float64), n).astype(dtype)


# ---- bugs: each of these failed ------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_sqrt_of_inf_is_inf(dtype):
    # kernels/cpu/math_kernels.cc (Sqrt): Eigen's EIGEN_FAST_MATH AVX-512 psqrt gave NaN.
    x = packets([np.inf, 4.0, 0.0, 2.25], dtype)
    assert_same(run(O.sqrt, x), np.sqrt(x), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_of_negative_zero_and_negative_inf_keeps_the_sign(dtype):
    # kernels/cpu/cwise_binary_kernels.cc (PowF): an odd integer power of -0 or -inf is
    # negative (C99 Annex F, NumPy, TensorFlow's std::pow semantics).
    a = packets([-np.inf, -np.inf, -0.0, -0.0, -np.inf, -0.0, -2.0, 2.0], dtype)
    b = packets([3.0, 31.0, -1.0, -3.0, -3.0, 3.0, 3.0, -1.0], dtype)
    with np.errstate(divide="ignore"):
        want = np.power(a, b)
    got = run(O.pow, a, b)
    assert_same(got, want, rtol=0, atol=0)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", FLOATS)
def test_neg_of_positive_zero_is_negative_zero(dtype):
    # kernels/cpu/math_kernels.cc (NegF): Eigen's pnegate is 0 - x, so -(+0.0) came out +0.0,
    # and 1 / neg(0.0) +inf instead of -inf.
    x = packets([0.0, -0.0, 1.5, -2.0], dtype)
    got = run(O.neg, x)
    assert_same(got, np.negative(x), rtol=0, atol=0)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.negative(x)))
    with np.errstate(divide="ignore"):
        assert_same(run(lambda t: 1.0 / O.neg(t), x), 1.0 / np.negative(x), rtol=0, atol=0)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool_of_a_window_of_minus_inf_is_minus_inf(dtype, padding):
    # kernels/cpu/pool_kernels.cc (PoolKernel): the max started at lowest(), so a window of
    # -inf (e.g. masked cells) gave -3.4e38 (float32) / -1.8e308 (float64), a value no cell holds.
    x = np.array([0.0, -np.inf, -np.inf, -np.inf, 5.0, -np.inf], dtype).reshape(1, 2, 3, 1)
    ksize, strides = [1, 2, 1, 1], [1, 2, 1, 1]
    got = run(lambda a: O.max_pool(a, ksize=ksize, strides=strides, padding=padding), x)
    assert_same(got, pool_ref(x.astype(np.float64), ksize, strides, padding, "max").astype(dtype), rtol=0, atol=0)


# ---- element-wise: special values in full SIMD packets ------------------------------------------

def _sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


UNARY = {"abs": np.abs, "exp": np.exp, "log": np.log, "rsqrt": lambda x: 1 / np.sqrt(x),
         "reciprocal": lambda x: 1 / x, "square": np.square, "sign": np.sign, "tanh": np.tanh,
         "relu": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)), "sigmoid": _sigmoid,
         "softplus": lambda x: np.logaddexp(0, x), "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
         "sin": np.sin, "cos": np.cos, "log1p": np.log1p, "expm1": np.expm1, "floor": np.floor, "ceil": np.ceil,
         "round": np.round, "leaky_relu": lambda x: np.where(x > 0, x, 0.2 * x), "is_nan": np.isnan,
         "is_inf": np.isinf, "is_finite": np.isfinite}
SPECIAL = [-50, -3.5, -1, -0.5, -0.1, 0., -0., 0.5, 1, 2.5, 50, 88, np.inf, -np.inf, np.nan, 1e30]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_values_in_full_packets(name, dtype):
    x = packets(SPECIAL, dtype)
    with np.errstate(all="ignore"):
        want = UNARY[name](x.astype(np.float64))
        want = want if want.dtype == bool else want.astype(dtype)
    assert_same(run(getattr(O, name), x), want, rtol=2e-6 if dtype == np.float32 else 1e-13, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sqrt_finite_values_in_full_packets(dtype):
    x = packets([0., -0., 0.25, 2., 1e30, 1e-30, -1., np.nan], dtype)
    with np.errstate(invalid="ignore"):
        assert_same(run(O.sqrt, x), np.sqrt(x), rtol=2e-7 if dtype == np.float32 else 4e-16, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_grid_in_full_packets(dtype):
    # Every (base, exponent) pair but the signed ones of the failing test above.
    bases = [-3., -2., -1., -0.5, 0., 0.5, 1., 2., 3., np.inf, np.nan, 10.]
    exps = [-3., -2., -1., 0., 1., 2., 3., 0.5, -0.5, 2.5, 1e3, -1e3, np.inf, -np.inf, np.nan, 31.]
    a, b = (m.ravel().astype(dtype) for m in np.meshgrid(bases, exps, indexing="ij"))
    with np.errstate(all="ignore"):
        want = np.power(a, b)
    assert_same(run(O.pow, a, b), want, rtol=2e-6 if dtype == np.float32 else 1e-13, atol=0)


COMPARE = {"less": np.less, "greater": np.greater, "less_equal": np.less_equal,
           "greater_equal": np.greater_equal, "equal": np.equal, "not_equal": np.not_equal}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_with_nan_inf_and_signed_zero(name, dtype):
    n = packets([np.nan, 1., -1., 0., np.inf, -np.inf, -0.], dtype, 63)
    m = np.roll(n, 3)
    f = COMPARE[name]
    assert_same(run(getattr(O, name), n, m), f(n, m))
    assert_same(run(getattr(O, name), n, dtype(np.nan)), f(n, dtype(np.nan)))
    assert_same(run(getattr(O, name), n.reshape(9, 7), m[:7]), f(n.reshape(9, 7), m[:7]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_arithmetic_and_extremes_with_special_values_broadcast(dtype):
    n = packets([np.nan, 1., -1., 0., np.inf, -np.inf, -0.], dtype, 63).reshape(9, 7)
    m = np.roll(n.ravel(), 3)[:7]
    with np.errstate(all="ignore"):
        for name, f in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
                        ("maximum", np.maximum), ("minimum", np.minimum), ("floor_div", np.floor_divide),
                        ("floor_mod", np.remainder), ("squared_difference", lambda a, b: np.square(a - b))):
            assert_same(run(getattr(O, name), n, m), f(n, m))
            assert_same(run(getattr(O, name), dtype(np.nan), m), f(dtype(np.nan), m))


# ---- binary broadcasting: more shapes, bool, unknown shapes ------------------------------------

BCAST = [((2, 1, 3), (4, 1)), ((1,), (3, 4)), ((3, 4, 1), (1,)), ((2, 3, 1, 1), (3, 4, 5)), ((1, 1, 1), (1,)),
         ((0, 1), (1, 3)), ((2, 0, 1), (1, 5)), ((), ()), ((1,), ()), ((1, 1), (2, 1)), ((4, 1, 3, 1, 2), (5, 1, 2, 1))]
BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
       "less": np.less, "equal": np.equal, "floor_div": np.floor_divide, "floor_mod": np.remainder,
       "squared_difference": lambda a, b: np.square(np.subtract(a, b))}


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shapes", BCAST, ids=str)
def test_binary_broadcasting_more_shapes(shapes, dtype, known):
    sa, sb = shapes
    a = RNG.integers(-5, 6, sa).astype(dtype)
    b = RNG.integers(1, 6, sb).astype(dtype)
    for name, f in BIN.items():
        assert_same(run(getattr(O, name), a, b, known_shape=known), f(a, b))


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
def test_bool_equality_and_logic_broadcast(known):
    a = RNG.integers(0, 2, (3, 1)).astype(bool)
    b = RNG.integers(0, 2, (4,)).astype(bool)
    assert_same(run(O.equal, a, b, known_shape=known), a == b)
    assert_same(run(O.not_equal, a, b, known_shape=known), a != b)
    assert_same(run(O.logical_and, a, b, known_shape=known), a & b)
    assert_same(run(O.logical_or, a, b, known_shape=known), a | b)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_truncates_toward_zero(dtype):
    # TensorFlow's Div on integers is C division (truncating), unlike NumPy's // (floor).
    a = np.array([-7, 7, -7, 7, 0, -1, 1, -9, 9], dtype)
    b = np.array([2, -2, -2, 2, 3, 2, -2, 4, -4], dtype)
    want = (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(dtype)
    assert_same(run(O.div, a, b), want)
    assert_same(run(O.div, a, dtype(-3)), (np.sign(a) * (np.abs(a) // 3) * -1).astype(dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_broadcast_zero_is_a_clean_error(dtype):
    rc, out = run_in_subprocess(f"""
        g = sf.Graph()
        with g.as_default():
            a = sf.placeholder(sf.{dtype}, [3]); b = sf.placeholder(sf.{dtype}, []); y = O.div(a, b)
        with sf.Session(g) as s:
            try:
                s.run(y, {{a: np.array([1, 2, 3], np.{dtype}), b: np.array(0, np.{dtype})}})
                print("NO ERROR")
            except sf.errors.InvalidArgumentError as e:
                print("clean error:", e)
        """)
    assert rc == 0, out[-500:]
    assert "clean error" in out and "division by zero" in out and "'Div'" in out, out[-500:]


# ---- reductions, ArgMax, scans -------------------------------------------------------------------

REDUCE = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min}
RCASES = [((2, 3, 4), [0, 1, 2]), ((2, 3, 4), [2, 0]), ((2, 3, 4), [-1, -2]), ((2, 1, 4), [1]), ((1, 3, 1), [0, 2]),
          ((2, 3, 4, 5), [0, 2]), ((2, 3, 4, 5), [3, 0]), ((3, 0, 2), [1]), ((2, 3), [0, -2]), ((1, 1), []),
          ((4, 1, 3, 1, 2), [1, 3]), ((4, 1, 3, 1, 2), [0, 2, 4]), ((2, 3, 4), [1, -1])]


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_more_axes(name, dtype, known):
    for shape, axes in RCASES:
        if name == "mean" and dtype == np.int32:
            continue
        a = RNG.integers(-3, 4, shape).astype(dtype)
        if a.size == 0 and name in ("max", "min"):
            continue
        ax = tuple(sorted(set(x % len(shape) for x in axes))) if axes else None
        for keep in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                want = np.asarray(REDUCE[name](a, axis=ax, keepdims=keep)).astype(dtype)
            got = run(lambda x: getattr(O, name)(x, axes=axes, keep_dims=keep), a, known_shape=known)
            assert_same(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_large_reductions(dtype):
    a = RNG.integers(-3, 4, (300, 257)).astype(dtype)
    for axes in ([0], [1], []):
        ax = tuple(axes) or None
        assert_same(run(lambda x: O.sum(x, axes=axes), a), np.sum(a, axis=ax).astype(dtype))
        assert_same(run(lambda x: O.max(x, axes=axes), a), np.max(a, axis=ax))
        assert_same(run(lambda x: O.min(x, axes=axes), a), np.min(a, axis=ax))


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_min_nan_in_large_reductions(dtype):
    x = np.tile(np.array([[1., np.nan, 2.], [np.inf, 1, 2], [-np.inf, 0, 1], [1, 2, 3]], dtype), (10, 5))
    for name in ("max", "min"):
        for axes in ([0], [1], []):
            assert_same(run(lambda t: getattr(O, name)(t, axes=axes), x), REDUCE[name](x, axis=tuple(axes) or None))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_argmax_every_axis_and_dtype(dtype):
    a = RNG.integers(-3, 4, (3, 4, 5)).astype(dtype)
    for axis in (0, 1, 2, -1, -2, -3):
        for known in (True, False):
            assert_same(run(lambda x: O.arg_max(x, axis=axis), a, known_shape=known), a.argmax(axis).astype(np.int64))


def test_argmax_nan_and_inf():
    a = np.array([[1, np.nan, 3], [np.nan, 5, np.nan], [np.inf, 1, -np.inf], [-np.inf, -np.inf, -np.inf]])
    assert_same(run(lambda x: O.arg_max(x, axis=1), a), a.argmax(1))  # the first NaN wins, as in NumPy


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scans_every_axis_unknown_shape(name, dtype):
    f = np.cumsum if name == "cumsum" else np.cumprod
    a = RNG.integers(-2, 3, (3, 4, 2)).astype(dtype)
    for axis in (0, 1, 2, -1, -2, -3):
        assert_same(run(lambda x: getattr(O, name)(x, axis=axis), a, known_shape=False), f(a, axis=axis).astype(dtype))
    assert_same(run(lambda x: getattr(O, name)(x, axis=1), np.zeros((2, 0))), np.zeros((2, 0)))
    one = np.full((2, 1), 5, dtype)
    assert_same(run(lambda x: getattr(O, name)(x, axis=1, exclusive=True), one),
                np.full((2, 1), 0 if name == "cumsum" else 1, dtype))


def test_large_reverse_cumsum():
    a = RNG.standard_normal((64, 600, 3))
    assert_same(run(lambda x: O.cumsum(x, axis=1, reverse=True), a), np.flip(np.cumsum(np.flip(a, 1), 1), 1), rtol=1e-10)


# ---- Cast, Select, OneHot, Gather ----------------------------------------------------------------

CAST_VALUES = {np.float32: [-2.7, -0.5, 0.5, 1.9, 0., 100.25, -1e6], np.float64: [-2.7, -0.5, 0.5, 1.9, 0., -3e9],
               np.int32: [-5, 0, 1, 2 ** 31 - 1, -2 ** 31], np.int64: [-5, 0, 1, 2 ** 40 + 3, -2 ** 53 - 1, 2 ** 62],
               np.bool_: [True, False, True]}


@pytest.mark.parametrize("dst", list(SF_DT), ids=lambda d: d.__name__)
@pytest.mark.parametrize("src", list(SF_DT), ids=lambda d: d.__name__)
def test_cast_between_all_dtypes(src, dst):
    x = np.array(CAST_VALUES[src], src)
    if np.dtype(src).kind == "f" and dst == np.int32:
        x = x[np.abs(x) < 2 ** 31]  # out of range: platform-defined (below)
    assert_same(run(lambda t: O.cast(t, DstT=SF_DT[dst]), x), x.astype(dst))


def test_cast_of_nan_and_huge_floats_to_int_does_not_crash():
    rc, out = run_in_subprocess("""
        for src in (np.float32, np.float64):
            x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1e20] * 5, src)
            for dst in (sf.int32, sf.int64):
                g = sf.Graph()
                with g.as_default():
                    p = sf.placeholder(sf.float32 if src == np.float32 else sf.float64, [x.size])
                    y = O.cast(p, DstT=dst)
                with sf.Session(g) as s:
                    print(s.run(y, {p: x}).shape)
        print("DONE")
        """)
    assert rc == 0 and "DONE" in out, out[-800:]


@pytest.mark.parametrize("dtype", list(SF_DT), ids=lambda d: d.__name__)
def test_select_every_dtype(dtype):
    c = RNG.integers(0, 2, (2, 3)).astype(bool)
    a = RNG.integers(-5, 5, (2, 3)).astype(dtype)
    b = RNG.integers(-5, 5, (3,)).astype(dtype)
    for known in (True, False):
        assert_same(run(O.select, c, a, b, known_shape=known), np.where(c, a, b))
        assert_same(run(O.select, np.bool_(False), a, b, known_shape=known), np.where(False, a, b))
        assert_same(run(O.select, c[:, :1], a, b, known_shape=known), np.where(c[:, :1], a, b))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_one_hot_more(itype):
    idx = np.array([[0, 3, -1], [2, 4, 1]], itype)
    for dt in (np.float64, np.int32, np.int64):
        for depth in (0, 1, 4):
            want = np.full(idx.shape + (depth,), -1.0)
            for i in np.ndindex(idx.shape):
                if 0 <= idx[i] < depth:
                    want[i + (idx[i],)] = 3.0
            got = run(lambda i: O.one_hot(i, depth=depth, dtype=SF_DT[dt], on=3.0, off=-1.0), idx)
            assert_same(got, want.astype(dt))
    assert_same(run(lambda i: O.one_hot(i, depth=3), itype(1)), np.array([0, 1, 0], np.float32))


@pytest.mark.parametrize("dtype", list(SF_DT), ids=lambda d: d.__name__)
def test_gather_every_dtype(dtype):
    p = RNG.integers(-5, 5, (4, 3, 2)).astype(dtype)
    for idx in (np.array([3, 0, 3], np.int64), np.array([[1], [2]], np.int32), np.array(2, np.int64),
                np.zeros((0, 2), np.int32)):
        for known in (True, False):
            assert_same(run(O.gather, p, idx, known_shape=known), p[idx])


def test_gather_edge_shapes():
    assert_same(run(O.gather, np.zeros((0, 3)), np.zeros((0,), np.int32)), np.zeros((0, 3)))
    assert_same(run(O.gather, np.zeros((3, 0)), np.array([2, 1], np.int32)), np.zeros((2, 0)))
    big, bi = RNG.standard_normal((1000, 64)), RNG.integers(0, 1000, 5000)
    assert_same(run(O.gather, big, bi), big[bi])


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
def test_gather_negative_index_error_names_the_node(known):
    with pytest.raises(sf.errors.InvalidArgumentError, match=r"'Gather'.*index -4"):
        run(O.gather, np.ones((3, 2)), np.array([[0, -4]], np.int64), known_shape=known)


# ---- layout ops on every dtype, unknown shapes ----------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_], ids=lambda d: d.__name__)
def test_layout_ops_every_dtype_unknown_shape(dtype):
    x = RNG.integers(-5, 5, (2, 3, 4, 5)).astype(dtype)
    u = dict(known_shape=False)
    for perm in ([3, 2, 1, 0], [0, 2, 1, 3], [2, 3, 0, 1]):
        assert_same(run(lambda t: O.transpose(t, perm=perm), x, **u), x.transpose(perm))
    y = RNG.integers(-5, 5, (2, 1, 3, 1, 2, 2)).astype(dtype)
    assert_same(run(lambda t: O.transpose(t, perm=[5, 3, 1, 0, 2, 4]), y), y.transpose([5, 3, 1, 0, 2, 4]))
    assert_same(run(lambda t: O.tile(t, multiples=[1, 2, 1, 3, 1, 2]), y), np.tile(y, [1, 2, 1, 3, 1, 2]))
    assert_same(run(lambda t: O.tile(t, multiples=[2, 1, 1, 2]), x, **u), np.tile(x, [2, 1, 1, 2]))
    for axis in (0, 3, -1, -4):
        assert_same(run(lambda a, b, c: O.concat(a, b, c, axis=axis), x, x, x, **u), np.concatenate([x, x, x], axis))
    for axis, n in ((1, 3), (3, 5), (-2, 2)):
        parts = run(lambda t: list(O.split(t, num_split=n, axis=axis)), x, **u)
        for got, want in zip(parts, np.split(x, n, axis)):
            assert_same(got, want)
    assert_same(run(lambda t: O.slice(t, begin=[1, 0, 1, 2], size=[1, -1, 2, -1]), x, **u), x[1:2, :, 1:3, 2:])
    for pads, mode in (([1, 0, 0, 2, 1, 1, 0, 0], "CONSTANT"), ([0, 1, 2, 2, 3, 3, 4, 4], "SYMMETRIC"),
                       ([1, 1, 0, 0, 2, 3, 1, 0], "REFLECT")):
        assert_same(run(lambda t: O.pad(t, paddings=pads, mode=mode), x, **u),
                    np.pad(x, np.array(pads).reshape(4, 2), mode=mode.lower()))
    assert_same(run(O.zeros_like, x), np.zeros_like(x))
    assert_same(run(O.ones_like, x), np.ones_like(x))
    assert_same(run(lambda v: O.fill(np.array([2, 0, 3], np.int64), v), x.flat[0]), np.full((2, 0, 3), x.flat[0]))
    assert_same(run(lambda t: O.reshape(t, np.array([-1, 4, 1], np.int64)), x, **u), x.reshape(-1, 4, 1))
    assert_same(run(lambda t: O.expand_dims(t, axis=-2), x, **u), np.expand_dims(x, -2))
    z = x[:1, :, :1, :2]
    assert_same(run(O.squeeze, z, **u), np.squeeze(z))
    assert_same(run(lambda t: O.squeeze(t, axes=[-2, 0]), z, **u), np.squeeze(z, (0, 2)))
    assert_same(run(lambda t: t[::-2, 1::3, -1], x), x[::-2, 1::3, -1])


SS_KEYS = [(-1,), (-2, slice(None, None, -1)), (slice(None, None, -1), -1), (0, slice(-3, None), 1),
           (slice(-1, None, -2),), (slice(None, -10, -1),), (-3,), (slice(4, None, -1), -4), (2, 3, 4),
           (slice(1, None, -1),)]


@pytest.mark.parametrize("key", SS_KEYS, ids=str)
def test_strided_slice_negative_indices_unknown_shape(key):
    x = RNG.standard_normal((3, 4, 5))
    for known in (True, False):
        assert_same(run(lambda t: t[key], x, known_shape=known), x[key])


def test_large_layout_ops():
    y = RNG.standard_normal((64, 33, 20))
    assert_same(run(lambda t: O.transpose(t, perm=[2, 0, 1]), y), y.transpose(2, 0, 1))
    assert_same(run(lambda t: O.tile(t, multiples=[2, 1, 3]), y), np.tile(y, [2, 1, 3]))
    assert_same(run(lambda t: t[::-1, 1:-1:2, ::3], y), y[::-1, 1:-1:2, ::3])
    assert_same(run(lambda t: O.pad(t, paddings=[1, 2, 3, 4, 5, 6], mode="REFLECT"), y),
                np.pad(y, [(1, 2), (3, 4), (5, 6)], mode="reflect"))


# ---- NN ops --------------------------------------------------------------------------------------

def _softmax(x):
    with np.errstate(all="ignore"):
        m = np.max(x, -1, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(-1, keepdims=True)


def _log_softmax(x):
    with np.errstate(all="ignore"):
        y = x - np.max(x, -1, keepdims=True)
        return y - np.log(np.exp(y).sum(-1, keepdims=True))


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_special_rows(dtype):
    # TensorFlow subtracts the row max too: a row with +inf or NaN is NaN, a row of -inf is NaN,
    # -inf logits among finite ones get probability 0 (log-probability -inf).
    x = np.array([[1., np.nan, 2.], [np.inf, 1, 2], [-np.inf, 0, 1], [-np.inf, -np.inf, -np.inf],
                  [1000, 0, -1000], [np.nan, np.nan, 1.], [1, 2, np.nan]], dtype)
    assert_same(run(O.softmax, x), _softmax(x).astype(dtype))
    assert_same(run(O.log_softmax, x), _log_softmax(x).astype(dtype))
    z = RNG.standard_normal((2, 3, 4)).astype(dtype)
    assert_same(run(O.softmax, z), _softmax(z).astype(dtype), rtol=1e-5)
    assert_same(run(O.softmax, z[0, 0]), _softmax(z[0, 0]).astype(dtype), rtol=1e-5)
    big = RNG.standard_normal((300, 200)).astype(dtype)
    assert_same(run(O.log_softmax, big), _log_softmax(big.astype(np.float64)).astype(dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropies_with_extreme_logits(dtype):
    logits = np.array([[1000., 0, -1000], [1, 2, 3]], dtype)
    labels = np.array([[0., 1, 0], [0.5, 0.5, 0]], dtype)

    def ref(l, y):
        l = l.astype(np.float64)
        m = l.max(1, keepdims=True)
        return (y * (np.log(np.exp(l - m).sum(1, keepdims=True)) + m - l)).sum(1)

    got = run(lambda a, b: O.softmax_cross_entropy_with_logits(a, b)[0], logits, labels)
    assert_same(got, ref(logits, labels).astype(dtype), rtol=1e-5)
    for ltype in (np.int32, np.int64):
        lab = np.array([2, 0], ltype)
        got = run(lambda a, b: O.sparse_softmax_cross_entropy_with_logits(a, b)[0], logits, lab)
        assert_same(got, ref(logits, np.eye(3)[lab]).astype(dtype), rtol=1e-5)


def _conv_grads_ref(x, w, strides, padding, dy):
    """(dx, dw) of sum(conv2d(x, w) * dy), by the transpose of conv2d_ref's loop."""
    n, h, wd, c = x.shape
    kh, kw, _, _ = w.shape

    def window(size, k, s):
        if padding == "VALID":
            return (size - k) // s + 1, 0
        out = -(-size // s)
        return out, max((out - 1) * s + k - size, 0) // 2

    oh, pt = window(h, kh, strides[1])
    ow, pl = window(wd, kw, strides[2])
    xp = np.zeros((n, max(h + pt, (oh - 1) * strides[1] + kh) + kh, max(wd + pl, (ow - 1) * strides[2] + kw) + kw, c))
    xp[:, pt:pt + h, pl:pl + wd] = x
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for i in range(oh):
        for j in range(ow):
            ys, xs = i * strides[1], j * strides[2]
            dw += np.tensordot(xp[:, ys:ys + kh, xs:xs + kw, :], dy[:, i, j, :], axes=([0], [0]))
            dxp[:, ys:ys + kh, xs:xs + kw, :] += np.tensordot(dy[:, i, j, :], w, axes=([1], [3]))
    return dxp[:, pt:pt + h, pl:pl + wd], dw


CONV = [((2, 6, 6, 3), (1, 1, 3, 4), (2, 2), "SAME"), ((2, 6, 6, 3), (1, 1, 3, 4), (1, 1), "SAME"),
        ((1, 5, 5, 2), (1, 1, 2, 3), (3, 3), "VALID"), ((3, 9, 9, 4), (3, 3, 4, 5), (2, 2), "SAME"),
        ((1, 4, 4, 1), (4, 4, 1, 2), (1, 1), "SAME"), ((1, 2, 2, 1), (3, 3, 1, 1), (5, 5), "SAME"),
        ((2, 7, 7, 2), (2, 2, 2, 3), (3, 3), "SAME"), ((1, 6, 6, 2), (3, 3, 2, 0), (1, 1), "SAME"),
        ((16, 8, 8, 8), (3, 3, 8, 8), (1, 1), "SAME"), ((2, 5, 5, 2), (5, 1, 2, 2), (1, 2), "VALID")]


@pytest.mark.parametrize("cfg", CONV, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_and_its_gradients(dtype, cfg):
    xs, ws, st, pad = cfg
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    strides = [1, st[0], st[1], 1]
    want = conv2d_ref(x.astype(np.float64), w.astype(np.float64), strides, pad)
    dy = RNG.standard_normal(want.shape)
    rdx, rdw = _conv_grads_ref(x.astype(np.float64), w.astype(np.float64), strides, pad, dy)
    t = SF_DT[dtype]
    g = sf.Graph()
    with g.as_default():
        px, pw, pdy = sf.placeholder(t, list(xs)), sf.placeholder(t, list(ws)), sf.placeholder(t, None)
        y = O.conv2d(px, pw, strides=strides, padding=pad)
        gx, gw = sf.gradients(O.sum(y * pdy), [px, pw])
    with sf.Session(g) as s:
        yv, dxv, dwv = s.run([y, gx, gw], {px: x, pw: w, pdy: dy.astype(dtype)})
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    assert_same(yv, want.astype(dtype), **tol)
    assert_same(dxv, rdx.astype(dtype), **tol)
    assert_same(dwv, rdw.astype(dtype), **tol)


POOL = [((1, 5, 5, 1), (1, 1), (2, 2), "VALID"), ((1, 5, 5, 1), (1, 1), (2, 2), "SAME"),
        ((2, 6, 6, 3), (2, 2), (3, 3), "SAME"), ((1, 4, 6, 2), (4, 6), (1, 1), "VALID"),
        ((1, 3, 3, 1), (3, 3), (5, 5), "SAME"), ((4, 16, 16, 8), (3, 3), (2, 2), "SAME"),
        ((1, 5, 4, 1), (2, 3), (1, 1), "SAME")]


@pytest.mark.parametrize("cfg", POOL, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_pool_more_windows(dtype, cfg):
    xs, k, st, pad = cfg
    x = (RNG.permutation(int(np.prod(xs))).reshape(xs) * 0.1).astype(dtype)
    ksize, strides = [1, k[0], k[1], 1], [1, st[0], st[1], 1]
    for kind, fn in (("max", O.max_pool), ("avg", O.avg_pool)):
        got = run(lambda a: fn(a, ksize=ksize, strides=strides, padding=pad), x)
        assert_same(got, pool_ref(x.astype(np.float64), ksize, strides, pad, kind).astype(dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_family_more(dtype):
    a, b = RNG.standard_normal((2, 3, 4)).astype(dtype), RNG.standard_normal((2, 5, 4)).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-5)
    for known in (True, False):
        assert_same(run(lambda p, q: O.batch_mat_mul(p, q, transpose_b=True), a, b, known_shape=known),
                    a @ b.transpose(0, 2, 1), **tol)
    assert_same(run(lambda p, q: O.batch_mat_mul(p, q, transpose_a=True), a, a), a.transpose(0, 2, 1) @ a, **tol)
    for sa, sb in (((1, 2, 3, 4), (2, 1, 4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (1, 5, 4, 2)),
                   ((0, 3, 4), (4, 2)), ((2, 3, 0), (2, 0, 5)), ((5, 3, 4), (1, 4, 2))):
        p, q = RNG.standard_normal(sa).astype(dtype), RNG.standard_normal(sb).astype(dtype)
        assert_same(run(O.batch_mat_mul, p, q, known_shape=False), np.matmul(p, q), **tol)
    w, bias = RNG.standard_normal((4, 6)).astype(dtype), RNG.standard_normal(6).astype(dtype)
    for act, f in (("none", lambda v: v), ("relu", lambda v: np.maximum(v, 0))):
        assert_same(run(lambda p, q, c: O.fused_mat_mul(p, q, c, activation=act, transpose_a=True, transpose_b=True),
                        a[0].T, w.T, bias), f(a[0] @ w + bias), **tol)
    bx, bb = RNG.standard_normal((2, 3, 4, 5)).astype(dtype), RNG.standard_normal(5).astype(dtype)
    assert_same(run(O.bias_add, bx, bb, known_shape=False), bx + bb)
    assert_same(run(O.l2_loss, np.zeros((0, 3), dtype)), dtype(0))


@pytest.mark.parametrize("n", range(1, 10))
def test_add_n_any_count(n):
    xs = [RNG.standard_normal((3, 4)) for _ in range(n)]
    assert_same(run(lambda *p: O.add_n(*p), *xs), np.sum(xs, 0), rtol=1e-12)
    xi = [RNG.integers(-5, 5, (200, 200)).astype(np.int32) for _ in range(n)]
    assert_same(run(lambda *p: O.add_n(*p), *xi), np.sum(xi, 0).astype(np.int32))


# ---- gradients (float64, central differences) with partially known shapes ---------------------------

def _numeric_grad_of_sum_sq(f, arrays, i, eps=1e-6):
    a = arrays[i]
    out = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        hi, lo = [x.copy() for x in arrays], [x.copy() for x in arrays]
        hi[i][idx] += eps
        lo[i][idx] -= eps
        out[idx] = (np.sum(f(*hi) ** 2) - np.sum(f(*lo) ** 2)) / (2 * eps)
    return out


GRAD_CASES = {
    "add_outer": (O.add, np.add, [(3, 1), (1, 4)]),
    "mul_rank": (O.mul, np.multiply, [(2, 3, 4), (3, 1)]),
    "maximum_bcast": (O.maximum, np.maximum, [(2, 1), (2, 3)]),
    "sum_axis": (lambda x: O.sum(x, axes=[1]), lambda x: x.sum(1), [(2, 3, 4)]),
    "mean_axes": (lambda x: O.mean(x, axes=[0, 2]), lambda x: x.mean((0, 2)), [(2, 3, 4)]),
    "max_axis": (lambda x: O.max(x, axes=[1]), lambda x: x.max(1), [(2, 3, 4)]),
    "prod_all": (lambda x: O.prod(x), lambda x: x.prod(), [(2, 3)]),
    "strided": (lambda x: x[1:, ::-1, 0], lambda x: x[1:, ::-1, 0], [(3, 4, 2)]),
    "tile": (lambda x: O.tile(x, multiples=[2, 3]), lambda x: np.tile(x, (2, 3)), [(2, 3)]),
    "pad_reflect": (lambda x: O.pad(x, paddings=[1, 1, 2, 0], mode="REFLECT"),
                    lambda x: np.pad(x, [(1, 1), (2, 0)], mode="reflect"), [(3, 4)]),
    "slice": (lambda x: O.slice(x, begin=[1, 0], size=[1, -1]), lambda x: x[1:2], [(3, 4)]),
    "split": (lambda x: O.split(x, num_split=2, axis=1)[1], lambda x: np.split(x, 2, 1)[1], [(2, 4)]),
    "gather": (lambda x: O.gather(x, np.array([[2, 0], [1, 1]], np.int32)), lambda x: x[np.array([[2, 0], [1, 1]])],
               [(3, 2)]),
    "bmm_bcast": (O.batch_mat_mul, np.matmul, [(2, 1, 2, 3), (3, 3, 2)]),
    "select_bcast": (lambda a, b: O.select(np.array([True, False, True]), a, b),
                     lambda a, b: np.where([True, False, True], a, b), [(2, 3), (1, 3)]),
    "cumsum_excl": (lambda x: O.cumsum(x, axis=1, exclusive=True), lambda x: np.cumsum(x, 1) - x, [(2, 3)]),
}


def _shape_variants(shape):
    out = [list(shape), None, [None] * len(shape)]
    for i in range(len(shape)):
        s = list(shape)
        s[i] = None
        out.append(s)
    return out


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_with_partially_known_shapes(name):
    fn, ref, shapes = GRAD_CASES[name]
    arrays = [RNG.uniform(0.5, 2, s) for s in shapes]
    numeric = [_numeric_grad_of_sum_sq(ref, arrays, i) for i in range(len(arrays))]
    # Each input in turn gets each variant of its shape, the others their full one.
    for i, s in enumerate(shapes):
        for v in _shape_variants(s):
            ph_shapes = [list(t) for t in shapes]
            ph_shapes[i] = v
            g = sf.Graph()
            with g.as_default():
                phs = [sf.placeholder(sf.float64, ps) for ps in ph_shapes]
                y = fn(*phs)
                grads = sf.gradients(O.sum(y * y), phs)
            with sf.Session(g) as sess:
                out = sess.run([y] + grads, dict(zip(phs, arrays)))
            assert_same(out[0], np.asarray(ref(*arrays)), rtol=1e-12)
            if y.shape.rank is not None:
                assert y.shape.rank == out[0].ndim
                assert all(d is None or d == e for d, e in zip(y.shape.as_list(), out[0].shape)), (y.shape, out[0].shape)
            for got, want in zip(out[1:], numeric):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} {ph_shapes}")


# ---- segment sums, unique, where: random inputs against NumPy ---------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_unsorted_segment_sum_unique_where_random(seed):
    rng = np.random.default_rng(seed)
    ids_shape = [(7,), (3, 4), (0,), (2, 0)][seed % 4]
    rest = [(), (3,), (2, 2)][seed % 3]
    segments = int(rng.integers(1, 6))
    ids = rng.integers(0, segments, ids_shape).astype([np.int32, np.int64][seed % 2])
    data = rng.standard_normal(ids_shape + rest)
    want = np.zeros((segments,) + rest)
    np.add.at(want, ids, data)
    assert_same(run(lambda d, i: O.unsorted_segment_sum(d, i, np.int32(segments)), data, ids), want, rtol=1e-12,
                atol=1e-12)
    vals = rng.integers(-3, 4, int(rng.integers(0, 20))).astype(np.int64)
    y, first = np.unique(vals, return_index=True)
    order = np.argsort(first)
    g = sf.Graph()
    with g.as_default():
        uy, uidx = sf.unique(sf.constant(vals))
        cond = sf.constant(data > 0)
        w = sf.where(cond)
    with sf.Session(g) as s:
        got_y, got_idx, got_w = s.run([uy, uidx, w])
    np.testing.assert_array_equal(got_y, y[order])
    np.testing.assert_array_equal(got_y[got_idx], vals)
    np.testing.assert_array_equal(got_w, np.argwhere(data > 0))
