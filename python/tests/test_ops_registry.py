"""Every registered op is callable from Python, generated from its registration."""

import inspect

import numpy as np
import pytest

import shardflow as sf
from shardflow import _core

DEFS = _core.op_defs()

# A value of each attribute kind that the op's checks may refuse but that converts.
KIND_SAMPLE = {"int": 1, "float": 0.5, "bool": False, "string": "s", "dtype": sf.float32,
               "int list": [0], "float list": [1.0], "shape": [2, 2], "tensor": np.zeros(2, np.float32),
               "dtype list": [sf.float32]}


def test_every_op_has_a_generated_function():
    assert len(DEFS) > 100
    for d in DEFS:
        name = sf.ops.snake_case(d["name"])
        fn = getattr(sf.ops, name)
        assert fn.op_type == d["name"]
        if d["summary"]:
            assert d["summary"] in fn.__doc__
        sig = inspect.signature(fn)
        for aname, kind, default, required in d["attrs"]:
            p = sig.parameters[aname]
            assert p.kind is inspect.Parameter.KEYWORD_ONLY
            assert (p.default is inspect.Parameter.empty) == required
        assert "name" in sig.parameters


def test_snake_case_names():
    cases = {"MatMul": "mat_mul", "Conv2D": "conv2d", "Conv2DBackpropInput": "conv2d_backprop_input",
             "L2Loss": "l2_loss", "FIFOQueue": "fifo_queue", "AddN": "add_n", "_Send": "_send",
             "SparseSoftmaxCrossEntropyWithLogits": "sparse_softmax_cross_entropy_with_logits"}
    for op, py in cases.items():
        assert sf.ops.snake_case(op) == py
    assert len(set(sf.ops.OP_NAMES)) == len(DEFS)


@pytest.mark.parametrize("d", DEFS, ids=[d["name"] for d in DEFS])
def test_every_op_builds_or_raises_a_clear_error(d):
    """Calling each op with plausible inputs either adds a node or raises sf.errors.OpError."""
    g = sf.Graph()
    with g.as_default():
        n = d["min_inputs"]
        inputs = [sf.placeholder(sf.float32, [2, 2], name=f"in{i}") for i in range(n)]
        attrs = {a: KIND_SAMPLE[k] for a, k, _, req in d["attrs"] if req}
        fn = getattr(sf.ops, sf.ops.snake_case(d["name"]))
        try:
            out = fn(*inputs, **attrs)
        except sf.errors.OpError as e:
            assert e.message  # a message naming the problem, never a crash
            assert d["name"] in e.message or "input" in e.message or "attr" in e.message or e.node, e.message
            out = None
        if out is not None:
            assert isinstance(out, (sf.Tensor, sf.Operation, tuple))
        # The graph stays usable after any failure.
        sf.constant(1.0)
        g._g.status()
        # Too many inputs is always refused with a message naming the op.
        if d["max_inputs"] >= 0:
            extra = [sf.placeholder(sf.float32, [2], name="extra")] * (d["max_inputs"] + 1)
            with pytest.raises(sf.errors.InvalidArgumentError, match=d["name"]):
                fn(*extra, **attrs)


# Ops that run on a sample and compare with NumPy: (op, inputs, attrs, reference).
A = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
B = np.array([[0.5, 1.0, -1.0], [2.0, -0.5, 0.25]], np.float32)
RUNS = [
    ("Add", [A, B], {}, A + B), ("Sub", [A, B], {}, A - B), ("Mul", [A, B], {}, A * B),
    ("FloorDiv", [A, B], {}, np.floor_divide(A, B)), ("FloorMod", [A, B], {}, np.remainder(A, B)),
    ("Maximum", [A, B], {}, np.maximum(A, B)), ("Minimum", [A, B], {}, np.minimum(A, B)),
    ("Neg", [A], {}, -A), ("Abs", [A], {}, np.abs(A)), ("Square", [A], {}, A * A), ("Exp", [B], {}, np.exp(B)),
    ("Relu", [A], {}, np.maximum(A, 0)), ("Tanh", [B], {}, np.tanh(B)), ("Sigmoid", [B], {}, 1 / (1 + np.exp(-B))),
    ("Sum", [A], {"axes": [1]}, A.sum(1)), ("Mean", [A], {}, A.mean()), ("Max", [A], {"axes": [0], "keep_dims": True},
                                                                          A.max(0, keepdims=True)),
    ("MatMul", [A, B], {"transpose_b": True}, A @ B.T), ("Transpose", [A], {"perm": [1, 0]}, A.T),
    ("Reshape", [A, np.array([3, 2], np.int32)], {}, A.reshape(3, 2)), ("Tile", [A], {"multiples": [1, 2]}, np.tile(A, (1, 2))),
    ("Slice", [A], {"begin": [0, 1], "size": [2, 2]}, A[:, 1:3]), ("Concat", [A, B], {"axis": 0}, np.concatenate([A, B])),
    ("ArgMax", [A], {"axis": 1}, A.argmax(1)), ("Cast", [A], {"DstT": sf.int32}, A.astype(np.int32)),
    ("Softmax", [B], {}, np.exp(B) / np.exp(B).sum(1, keepdims=True)), ("AddN", [A, B, A], {}, A + B + A),
    ("Square", [np.zeros((0, 3), np.float32)], {}, np.zeros((0, 3), np.float32)),
    ("SquaredDifference", [A, B], {}, (A - B) ** 2), ("Sin", [A], {}, np.sin(A)), ("Cos", [A], {}, np.cos(A)),
    ("Log1p", [B + 1], {}, np.log1p(B + 1)), ("Expm1", [B], {}, np.expm1(B)), ("Floor", [A * 0.7], {}, np.floor(A * 0.7)),
    ("Ceil", [A * 0.7], {}, np.ceil(A * 0.7)), ("Round", [A * 0.5], {}, np.round(A * 0.5)),
    ("IsNan", [np.log(A)], {}, np.isnan(np.log(A))), ("IsFinite", [1 / (A - 1)], {}, np.isfinite(1 / (A - 1))),
    ("IsInf", [1 / (A - 1)], {}, np.isinf(1 / (A - 1))), ("ArgMin", [A], {"axis": 1}, A.argmin(1)),
    ("LeakyRelu", [A], {"alpha": 0.1}, np.where(A > 0, A, 0.1 * A)),
    ("Range", [np.int64(2), np.int64(11), np.int64(3)], {}, np.arange(2, 11, 3)),
    ("Range", [np.float32(1), np.float32(0), np.float32(-0.25)], {}, np.arange(1, 0, -0.25, dtype=np.float32)),
]


@pytest.mark.parametrize("op,inputs,attrs,want", RUNS, ids=[r[0] for r in RUNS])
def test_ops_compute_like_numpy(op, inputs, attrs, want):
    g = sf.Graph()
    with g.as_default():
        out = getattr(sf.ops, sf.ops.snake_case(op))(*inputs, **attrs)
    with sf.Session(g) as s:
        got = s.run(out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
