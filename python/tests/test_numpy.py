"""NumPy arrays through tensors: every dtype, zero-size, non-contiguous, no copies, bad input."""

import numpy as np
import pytest

import shardflow as sf
from shardflow import _core

DTYPES = [(np.float32, sf.float32), (np.float64, sf.float64), (np.int32, sf.int32), (np.int64, sf.int64),
          (np.bool_, sf.bool_)]


def sample(npd, shape):
    rng = np.random.default_rng(7)
    if npd is np.bool_:
        return np.asarray(rng.integers(0, 2, size=shape).astype(np.bool_))
    return np.asarray((rng.standard_normal(size=shape) * 100).astype(npd))


@pytest.mark.parametrize("npd,sfd", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (4, 3), (2, 3, 4)])
def test_roundtrip_every_dtype_and_shape(npd, sfd, shape):
    a = sample(npd, shape)
    for lend in (False, True):
        b = _core.roundtrip(a, sfd.value, lend)
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("npd,sfd", DTYPES)
def test_session_feed_fetch_every_dtype(g, npd, sfd):
    x = sf.placeholder(sfd, None, name="x")
    y = sf.identity(x)
    with sf.Session(g) as s:
        for shape in [(), (0,), (2, 0), (7,), (3, 5)]:
            a = sample(npd, shape)
            out = s.run(y, feed_dict={x: a})
            assert out.dtype == a.dtype and out.shape == a.shape
            np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("npd,sfd", DTYPES)
def test_non_contiguous_feeds(g, npd, sfd):
    x = sf.placeholder(sfd, None, name="x")
    y = sf.identity(x)
    base = sample(npd, (6, 8))
    views = [base[::2, 1::3], base.T, base[:, ::-1], np.asfortranarray(base)]
    with sf.Session(g) as s:
        for v in views:
            np.testing.assert_array_equal(s.run(y, {x: v}), v)


def test_contiguous_feed_is_lent_not_copied():
    a = np.arange(1 << 16, dtype=np.float32)
    assert _core.shares_memory_after_roundtrip(a, sf.float32.value)
    # A view at an odd offset is not 16-byte aligned: it is copied, still correct.
    odd = a[1:]
    assert not _core.shares_memory_after_roundtrip(odd, sf.float32.value)
    np.testing.assert_array_equal(_core.roundtrip(odd, sf.float32.value, True), odd)


def test_lent_array_stays_alive_while_a_tensor_holds_it(g):
    import gc
    import weakref
    x = sf.placeholder(sf.float32, [None], name="x")
    v = sf.Variable(np.zeros(4096, np.float32), name="v")
    assign = v.assign(x)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        a = np.arange(4096, dtype=np.float32)
        ref = weakref.ref(a)
        s.run(assign, {x: a})
        del a
        gc.collect()
        # The variable's value may still be the lent array: it must read right.
        np.testing.assert_array_equal(s.run(v), np.arange(4096, dtype=np.float32))
        # Updating in place must not write into the caller's array.
        a2 = np.arange(4096, dtype=np.float32)
        s.run(assign, {x: a2})
        s.run(v.assign_add(np.ones(4096, np.float32)))
        np.testing.assert_array_equal(a2, np.arange(4096, dtype=np.float32))
        np.testing.assert_array_equal(s.run(v), np.arange(4096, dtype=np.float32) + 1)
        # Changing the array after the step changes neither the variable nor a fetched feed.
        a3 = np.arange(4096, dtype=np.float32)
        _, fetched = s.run([assign, sf.identity(x)], {x: a3})
        a3[:] = -1
        np.testing.assert_array_equal(s.run(v), np.arange(4096, dtype=np.float32))
        np.testing.assert_array_equal(fetched, np.arange(4096, dtype=np.float32))
    _core.drain_releases()
    del ref


def test_fetched_array_shares_the_tensor_buffer_and_protects_shared_ones(g):
    x = sf.placeholder(sf.float32, [None], name="x")
    y = x * 2.0
    v = sf.Variable(np.ones(8, np.float32), name="v")
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        out = s.run(y, {x: np.arange(8, dtype=np.float32)})
        assert out.base is not None  # a view over the tensor's buffer (the capsule), not a copy
        assert out.flags.writeable  # nobody else holds a computed result: it is the caller's
        out[0] = 42.0
        val = s.run(v)
        assert not val.flags.writeable  # the variable shares its value: read-only
        with pytest.raises(ValueError):
            val[0] = 5
        np.testing.assert_array_equal(s.run(v), np.ones(8, np.float32))


def test_feed_casting_rules(g):
    xf = sf.placeholder(sf.float32, [None], name="xf")
    xi = sf.placeholder(sf.int32, [None], name="xi")
    with sf.Session(g) as s:
        np.testing.assert_array_equal(s.run(xf, {xf: [1, 2, 3]}), np.array([1, 2, 3], np.float32))
        np.testing.assert_array_equal(s.run(xf, {xf: np.array([0.5], np.float64)}), [0.5])
        np.testing.assert_array_equal(s.run(xi, {xi: [1, 2]}), [1, 2])
        with pytest.raises(sf.errors.InvalidArgumentError, match="xi.*int32.*float64"):
            s.run(xi, {xi: np.array([1.5])})
        with pytest.raises(sf.errors.InvalidArgumentError, match="not numeric"):
            s.run(xf, {xf: ["a", "b"]})
        with pytest.raises(sf.errors.InvalidArgumentError, match="does not fit"):
            s.run(xi, {xi: [2**40]})
        with pytest.raises(sf.errors.InvalidArgumentError, match="shape"):
            s.run(xf, {xf: np.zeros((2, 2), np.float32)})
        with pytest.raises(sf.errors.InvalidArgumentError):
            s.run(xf, {xf: object()})


def test_big_endian_and_unsupported_dtypes_are_refused_clearly():
    a = np.arange(4, dtype=">f4")
    with pytest.raises(sf.errors.InvalidArgumentError):
        _core.roundtrip(a, sf.float32.value, True)
    with pytest.raises(TypeError, match="complex"):
        sf.as_dtype(np.complex64)
    with pytest.raises(sf.errors.InvalidArgumentError, match="bfloat16"):
        _core.roundtrip(np.zeros(2, np.float32), sf.bfloat16.value, True)
