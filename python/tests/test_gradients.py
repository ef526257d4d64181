"""sf.gradients against central finite differences on a sample of ops (float64)."""

import numpy as np
import pytest

import shardflow as sf

RNG = np.random.default_rng(3)
X = RNG.uniform(0.5, 1.5, size=(3, 4))
W = RNG.uniform(-1, 1, size=(4, 2))

CASES = {
    "mul_add": lambda x: sf.ops.sum(x * x + 3.0 * x),
    "div": lambda x: sf.ops.sum(1.0 / x),
    "exp_log": lambda x: sf.ops.sum(sf.ops.exp(x) * sf.ops.log(x)),
    "tanh_sigmoid": lambda x: sf.ops.sum(sf.ops.tanh(x) + sf.ops.sigmoid(x)),
    "matmul": lambda x: sf.ops.sum(sf.ops.square(x @ sf.constant(W))),
    "softmax": lambda x: sf.ops.sum(sf.ops.softmax(x) * sf.constant(np.arange(4.0))),
    "mean_axis": lambda x: sf.ops.sum(sf.ops.square(sf.ops.mean(x, axes=[1]))),
    "transpose_slice": lambda x: sf.ops.sum(sf.ops.transpose(x, perm=[1, 0])[1:3] ** 2),
    "sqrt_max": lambda x: sf.ops.sum(sf.ops.sqrt(x) + sf.ops.maximum(x, 1.0)),
    "reshape_concat": lambda x: sf.ops.sum(sf.ops.reshape(sf.ops.concat(x, x * 2.0, axis=0),
                                                          np.array([4, 6], np.int32)) ** 2),
    "sin_cos_log1p_expm1": lambda x: sf.ops.sum(sf.ops.sin(x) * sf.ops.cos(2.0 * x) + sf.ops.log1p(x) * sf.ops.expm1(x)),
    "squared_difference": lambda x: sf.reduce_sum(sf.ops.squared_difference(x, sf.constant(W[:, :1].T))),
    "floor_mod": lambda x: sf.reduce_sum(sf.ops.floor_mod(x * 3.0, 0.7) ** 2),  # X * 3 / 0.7 far from integers
    "leaky_relu_stack": lambda x: sf.reduce_sum(sf.stack([sf.nn.leaky_relu(x - 1.0, 0.3), x], axis=1) ** 2),
    "clip_reduce_max": lambda x: sf.reduce_sum(sf.clip_by_value(x, 0.7, 1.3) * sf.reduce_max(x, 1, keepdims=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float64, list(X.shape), name="x")
        y = CASES[name](x)
        (dx,) = sf.gradients(y, [x])
    with sf.Session(g) as s:
        analytic = s.run(dx, {x: X})
        eps = 1e-6
        numeric = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            hi, lo = X.copy(), X.copy()
            hi[idx] += eps
            lo[idx] -= eps
            numeric[idx] = (s.run(y, {x: hi}) - s.run(y, {x: lo})) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-6)


def test_unconnected_gradients():
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float64, [2], name="x")
        z = sf.placeholder(sf.float64, [2], name="z")
        y = sf.ops.sum(x * x)
        assert sf.gradients(y, [x, z], allow_unconnected=True)[1] is None
        with pytest.raises(sf.errors.InvalidArgumentError, match="z"):
            sf.gradients(y, [z])
        gx = sf.gradients(y, [x], grad_ys=[np.float64(3.0)])[0]
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: [1.0, 2.0]}), [6.0, 12.0])
