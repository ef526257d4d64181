"""The precision attribute of MatMul and Conv2D (docs/USER_GUIDE.md, "Mixed precision")."""

import numpy as np
import pytest

import shardflow as sf


def _run(g, fetch, feeds):
    with sf.Session(g) as s:
        return s.run(fetch, feed_dict=feeds)


def test_bf16_matmul_and_conv_round_like_bf16_or_are_refused(g):
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (33, 70)).astype(np.float32)
    w = rng.uniform(-1, 1, (70, 9)).astype(np.float32)
    x = rng.uniform(-1, 1, (3, 8, 8, 2)).astype(np.float32)
    f = rng.uniform(-1, 1, (3, 3, 2, 4)).astype(np.float32)
    pa = sf.placeholder(sf.float32, [33, 70], name="a")
    px = sf.placeholder(sf.float32, [3, 8, 8, 2], name="x")
    mm32 = sf.ops.mat_mul(pa, w)
    mm16 = sf.ops.mat_mul(pa, w, precision="bf16")
    cv32 = sf.ops.conv2d(px, f)
    cv16 = sf.ops.conv2d(px, f, precision="bf16")
    feeds = {pa: a, px: x}
    want_mm, want_cv = _run(g, [mm32, cv32], feeds)
    np.testing.assert_allclose(want_mm, a @ w, rtol=1e-4, atol=1e-4)
    try:
        got_mm, got_cv = _run(g, [mm16, cv16], feeds)
    except sf.errors.FailedPreconditionError as e:
        # A CPU without AVX512_BF16, or a build without oneDNN: said in words.
        assert "bf16" in str(e)
        return
    for got, want in ((got_mm, want_mm), (got_cv, want_cv)):
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert 0 < err < 1e-2  # rounded to bf16 (8 bits of mantissa), accumulated in fp32


def test_an_unknown_precision_is_refused_naming_it(g):
    y = sf.ops.mat_mul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), precision="fp8")
    with pytest.raises(sf.errors.InvalidArgumentError) as e:
        _run(g, y, {})
    assert "precision" in str(e.value) and "fp8" in str(e.value)
