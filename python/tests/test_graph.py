"""Graphs from Python: scopes, devices, control dependencies, operators, shapes, errors, save/load."""

import numpy as np
import pytest

import shardflow as sf


def run(g, fetches, feeds=None):
    with sf.Session(g) as s:
        return s.run(fetches, feeds)


def test_default_graph_and_as_default():
    g1, g2 = sf.Graph(), sf.Graph()
    with g1.as_default():
        a = sf.constant(1.0)
        with g2.as_default():
            b = sf.constant(2.0)
        c = sf.constant(3.0)
    assert a.graph is g1 and b.graph is g2 and c.graph is g1
    assert sf.get_default_graph() is not g1


def test_name_scope_and_device(g):
    with g.name_scope("layer1"):
        a = sf.constant(1.0, name="a")
        with sf.name_scope("inner"):
            b = sf.constant(2.0, name="b")
    a2 = sf.constant(1.0, name="a")
    with g.device("/job:localhost/task:0/device:CPU:0"):
        c = a + b
    assert a.name == "layer1/a" and b.name == "layer1/inner/b" and a2.name == "a"
    assert c.op.device == "/job:localhost/task:0/device:CPU:0"
    assert a.op.device == ""
    assert g.get_tensor_by_name("layer1/a") == a


def test_control_dependencies(g):
    v = sf.Variable(0.0, name="v")
    inc = v.assign_add(1.0)
    with g.control_dependencies([inc]):
        r = v.read_value()
    assert inc.op in r.op.control_inputs
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        assert s.run(r) == 1.0
        assert s.run(r) == 2.0


def test_operators_and_broadcasting(g):
    x = sf.placeholder(sf.float32, [2, 3], name="x")
    w = sf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    exprs = {
        "add": (x + 1, a + 1), "radd": (1 + x, 1 + a), "sub": (x - 2.5, a - 2.5), "rsub": (3 - x, 3 - a),
        "mul": (x * x, a * a), "div": (x / 4, a / 4), "rdiv": (1 / (x + 1), 1 / (a + 1)),
        "neg": (-x, -a), "matmul": (x @ w, a @ np.arange(6, dtype=np.float32).reshape(3, 2)),
        "pow": (x ** 2, a ** 2), "abs": (abs(x - 3), abs(a - 3)),
        "np_left": (np.float32(2) * x, 2 * a),
    }
    keys = list(exprs)
    out = run(g, {k: exprs[k][0] for k in keys}, {x: a})
    for k in keys:
        np.testing.assert_allclose(out[k], exprs[k][1], rtol=1e-6, err_msg=k)
    lt = run(g, x < 2.0, {x: a})
    np.testing.assert_array_equal(lt, a < 2)
    both = run(g, [(x > 1.0) & (x < 4.0), True & (x < 2.0), (x < 1.0) | (x > 4.0), False | (x < 2.0), ~(x < 2.0)],
               {x: a})
    for got, want in zip(both, [(a > 1) & (a < 4), a < 2, (a < 1) | (a > 4), a < 2, ~(a < 2)]):
        np.testing.assert_array_equal(got, want)


def test_scalar_takes_the_other_sides_dtype(g):
    x = sf.placeholder(sf.float64, [None], name="x")
    i = sf.placeholder(sf.int32, [None], name="i")
    assert (x * 2).dtype == sf.float64
    assert (i + 1).dtype == sf.int32
    assert (2.5 * x).dtype == sf.float64
    assert (x * np.float32(2)).dtype == sf.float64  # a NumPy float beside a float tensor adapts
    # A NumPy integer keeps its kind beside a float tensor (an op's count or limit), as a plain int does not.
    y = sf.ops.unsorted_segment_sum(x, np.array([0, 1], np.int32), np.int32(3))
    assert y.graph.get_operation_by_name(y.name.split(":")[0]).inputs[2].dtype == sf.int32
    with pytest.raises(sf.errors.InvalidArgumentError):
        i * np.float32(2)  # int32 times a NumPy float32: mixed dtypes, refused as TensorFlow does


def test_division_operators_follow_python_and_numpy(g):
    # / is true division (int32 and int64 give float64, as NumPy and TensorFlow); // and % floor,
    # with %'s result taking the divisor's sign, for every sign of either side.
    ai = np.array([7, -7, 7, -7, 6, 0, -1], np.int32)
    bi = np.array([2, 2, -2, -2, -3, 5, 3], np.int32)
    af, bf = np.array([1.0, -5.5, 5.5, -0.0, 4.0]), np.array([0.1, 2.0, -2.0, 3.0, -2.0])
    x, y = sf.placeholder(sf.int32, [None]), sf.placeholder(sf.int32, [None])
    u, v = sf.placeholder(sf.float64, [None]), sf.placeholder(sf.float64, [None])
    i64 = sf.constant(np.array([3, -3], np.int64))
    exprs = {"div": (x / y, ai / bi), "rdiv": (1 / x[:5], 1 / ai[:5]), "div_scalar": (x / 2, ai / 2),
             "floordiv": (x // y, ai // bi), "mod": (x % y, ai % bi), "rmod": (10 % y, 10 % bi),
             "floordiv_scalar": (x // 3, ai // 3), "mod_scalar": (x % -3, ai % -3),
             "fdiv": (u // v, af // bf), "fmod": (u % v, af % bf), "i64_div": (i64 / 2, np.array([1.5, -1.5])),
             "i64_mod": (i64 % 2, np.array([1, 1]))}
    assert (x / y).dtype == sf.float64 and (x // y).dtype == sf.int32 and (x % y).dtype == sf.int32
    keys = list(exprs)
    out = run(g, {k: exprs[k][0] for k in keys}, {x: ai, y: bi, u: af, v: bf})
    for k in keys:
        assert out[k].dtype == exprs[k][1].dtype, k
        np.testing.assert_array_equal(out[k], exprs[k][1], err_msg=k)
    assert np.array_equal(np.signbit(out["fmod"]), np.signbit(af % bf))
    with pytest.raises(sf.errors.InvalidArgumentError, match="integer division by zero in FloorMod"):
        run(g, x % y, {x: ai, y: np.zeros(7, np.int32)})
    # Variables forward the operators to their value.
    w = sf.Variable(np.array([5, -5], np.int32))
    init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run([w // 2, w % 2, w / 2]), [[2, -3], [1, 1], [2.5, -2.5]])


def test_range_knows_its_length_from_constants_and_refuses_bad_ones(g):
    r = sf.ops.range(0, 10, 3)
    assert r.dtype == sf.int32 and r.shape.as_list() == [4]
    n = sf.placeholder(sf.int64, [])
    r2 = sf.ops.range(np.int64(0), n, np.int64(2))
    assert r2.shape.as_list() == [None]
    with sf.Session(g) as s:
        np.testing.assert_array_equal(s.run(r), [0, 3, 6, 9])
        np.testing.assert_array_equal(s.run(r2, {n: 7}), [0, 2, 4, 6])
        with pytest.raises(sf.errors.InvalidArgumentError, match="start 0 is above limit -7"):
            s.run(r2, {n: -7})
    with pytest.raises(sf.errors.InvalidArgumentError, match="delta must not be 0"):
        sf.ops.range(0, 10, 0)
    with pytest.raises(sf.errors.InvalidArgumentError, match="limit is float32 but start is int32"):
        sf.ops.range(0, np.float32(1), 1)


def test_indexing_is_strided_slice(g):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = sf.constant(a)
    cases = [(x[0], a[0]), (x[1, 2], a[1, 2]), (x[:, 1:], a[:, 1:]), (x[..., ::2], a[..., ::2]),
             (x[-1], a[-1]), (x[:, :, -1], a[:, :, -1]), (x[0, ::-1], a[0, ::-1]), (x[:, -2:, 1:3], a[:, -2:, 1:3])]
    assert cases[0][0].op.type == "StridedSlice"
    out = run(g, [c[0] for c in cases])
    for got, (t, want) in zip(out, cases):
        np.testing.assert_array_equal(got, want)
    assert x[0].shape == [3, 4]
    with pytest.raises(TypeError):
        x[1.5]


def test_shape_and_dtype_properties(g):
    x = sf.placeholder(sf.float32, [None, 784], name="x")
    assert x.dtype == sf.float32 and x.dtype == np.float32
    assert x.shape.as_list() == [None, 784] and x.shape.rank == 2
    assert sf.placeholder(sf.int64, None).shape.rank is None
    y = sf.ops.mat_mul(x, sf.constant(np.zeros((784, 10), np.float32)))
    assert y.shape == [None, 10]
    assert sf.ops.sum(y, axes=[1], keep_dims=True).shape == [None, 1]
    assert y.op.type == "MatMul" and y.op.get_attr("transpose_a") is False
    assert x.op.get_attr("dtype") == sf.float32


def test_a_failed_builder_raises_and_the_graph_stays_usable(g):
    a = sf.constant(np.zeros((2, 3), np.float32))
    b = sf.constant(np.zeros((4, 5), np.float32))
    with pytest.raises(sf.errors.InvalidArgumentError) as e:
        a @ b
    assert "MatMul" in str(e.value) and e.value.op == "MatMul"
    with pytest.raises(sf.errors.InvalidArgumentError):
        a + b
    c = a * 2.0  # the graph still builds and runs
    np.testing.assert_array_equal(run(g, c), np.zeros((2, 3)))


def test_unknown_op_and_attributes(g):
    with pytest.raises(AttributeError, match="no op named 'not_an_op'"):
        sf.ops.not_an_op
    with pytest.raises(sf.errors.NotFoundError, match="NotAnOp"):
        sf.add_op("NotAnOp", [])
    x = sf.constant(np.ones((2, 2), np.float32))
    with pytest.raises(sf.errors.InvalidArgumentError, match="no attribute 'transpose_c'.*transpose_a"):
        sf.ops.mat_mul(x, x, transpose_c=True)
    with pytest.raises(sf.errors.InvalidArgumentError, match="'transpose_a' must be bool"):
        sf.ops.mat_mul(x, x, transpose_a="yes")
    with pytest.raises(sf.errors.InvalidArgumentError, match="needs attribute 'perm'"):
        sf.ops.transpose(x)
    with pytest.raises(sf.errors.InvalidArgumentError, match="takes 2 inputs, got 1"):
        sf.ops.mat_mul(x)
    with pytest.raises(sf.errors.InvalidArgumentError, match="another graph"):
        other = sf.Graph()
        with other.as_default():
            y = sf.constant(1.0)
        sf.ops.add(x, y)


def test_save_and_load_roundtrip(g, tmp_path):
    x = sf.placeholder(sf.float32, [None, 3], name="x")
    y = sf.identity(sf.ops.relu(x @ sf.constant(np.eye(3, dtype=np.float32)) - 1.0), name="y")
    path = tmp_path / "g.capnp"
    g.save(path)
    g2 = sf.load_graph(path)
    assert g2.num_nodes == g.num_nodes
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with sf.Session(g2) as s:
        np.testing.assert_array_equal(s.run("y", {"x": a}), np.maximum(a - 1, 0))
    g3 = sf.Graph.from_bytes(g.to_bytes())
    assert g3.get_operation_by_name("y").type == "Identity"
    with pytest.raises(sf.errors.NotFoundError):
        sf.load_graph(tmp_path / "missing.capnp")
    (tmp_path / "bad.capnp").write_bytes(b"\x00garbage" * 3)
    with pytest.raises(sf.errors.OpError):
        sf.load_graph(tmp_path / "bad.capnp")
