"""Variables, optimizers, control flow, queues, embedding tables, checkpoints, graphs shared with C++."""

import os
import subprocess

import numpy as np
import pytest

import shardflow as sf


def test_variables_and_initializers(g):
    w = sf.Variable(np.arange(4, dtype=np.float32).reshape(2, 2), name="w")
    r = sf.Variable(sf.random.truncated_normal([3, 3], stddev=0.1, seed=5), name="r")
    assert w.shape == [2, 2] and w.dtype == sf.float32 and w.shared_name == "w"
    y = w * 2.0
    init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        with pytest.raises(sf.errors.OpError):
            s.run(y)  # not initialised yet
        s.run(init)
        np.testing.assert_array_equal(s.run(y), np.arange(4).reshape(2, 2) * 2)
        s.run(w.assign([[1, 1], [1, 1]]))
        np.testing.assert_array_equal(s.run(w), np.ones((2, 2)))
        s.run(w.assign_sub(np.ones((2, 2), np.float32)))
        np.testing.assert_array_equal(s.run(w), np.zeros((2, 2)))
        assert np.all(np.abs(s.run(r)) <= 0.2)


@pytest.mark.parametrize("opt", [
    sf.train.GradientDescentOptimizer(0.1), sf.train.MomentumOptimizer(0.05, 0.9),
    sf.train.AdagradOptimizer(0.5), sf.train.AdamOptimizer(0.1), sf.train.RMSPropOptimizer(0.05)])
def test_optimizers_minimize_a_least_squares_loss(g, opt):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((64, 3)).astype(np.float32)
    ys = xs @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    x = sf.placeholder(sf.float32, [None, 3], name="x")
    y = sf.placeholder(sf.float32, [None, 1], name="y")
    w = sf.Variable(np.zeros((3, 1), np.float32), name="w")
    loss = sf.ops.mean(sf.ops.square(x @ w - y))
    train = opt.minimize(loss)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        first = s.run(loss, {x: xs, y: ys})
        for _ in range(60):
            s.run(train, {x: xs, y: ys})
        last = s.run(loss, {x: xs, y: ys})
    assert last < 0.2 * first


def test_learning_rate_tensor_and_apply_gradients(g):
    lr = sf.placeholder(sf.float32, [], name="lr")
    w = sf.Variable(np.array([1.0], np.float32), name="w")
    loss = sf.ops.sum(w * w)
    opt = sf.train.GradientDescentOptimizer(lr)
    train = opt.apply_gradients(opt.compute_gradients(loss, [w]))
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        s.run(train, {lr: 0.25})  # w -= 0.25 * 2w
        np.testing.assert_allclose(s.run(w), [0.5])


def test_cond_with_python_callables(g):
    x = sf.placeholder(sf.float32, [], name="x")
    r = sf.cond(x < 0.0, lambda: -x, lambda: x * 10.0)
    two = sf.cond(x > 0.0, lambda: [x, x + 1.0], lambda: [x - 1.0, x])
    with sf.Session(g) as s:
        assert s.run(r, {x: -3.0}) == 3.0
        assert s.run(r, {x: 2.0}) == 20.0
        assert s.run(two, {x: 1.0}) == [1.0, 2.0]


def test_while_loop_and_its_gradient(g):
    i, acc = sf.while_loop(lambda i, acc: i < 5, lambda i, acc: (i + 1, acc + sf.ops.cast(i, DstT=sf.float32)),
                           [sf.constant(0), sf.constant(0.0)])
    x = sf.placeholder(sf.float64, [], name="x")
    (p,) = [sf.while_loop(lambda k, v: k < 3, lambda k, v: (k + 1, v * x), [sf.constant(0), sf.constant(1.0, sf.float64)])[1]]
    (dp,) = sf.gradients(p, [x])
    with sf.Session(g) as s:
        assert s.run([i, acc]) == [5, 10.0]
        assert s.run([p, dp], {x: 2.0}) == [8.0, 12.0]


def test_callable_errors_propagate_and_graph_survives(g):
    x = sf.placeholder(sf.float32, [], name="x")

    def bad():
        raise KeyError("from the branch")

    with pytest.raises(KeyError, match="from the branch"):
        sf.cond(x < 0.0, bad, lambda: x)
    with pytest.raises(sf.errors.InvalidArgumentError):
        sf.while_loop(lambda v: v < 3.0, lambda v: [v, v], [x])
    y = x + 1.0
    with sf.Session(g) as s:
        assert s.run(y, {x: 1.0}) == 2.0


def test_queues_and_queue_runner(g):
    q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[2], []], capacity=8)
    xs = sf.placeholder(sf.float32, [None, 2], name="xs")
    ys = sf.placeholder(sf.int32, [None], name="ys")
    enq = q.enqueue_many([xs, ys])
    bx, by = q.dequeue_many(4)
    size = q.size()
    close = q.close()
    batches = iter(range(3))

    def feed(_):
        k = next(batches)
        return {xs: np.full((4, 2), k, np.float32), ys: np.full(4, k, np.int32)}

    with sf.Session(g) as s:
        runner = sf.train.FeedRunner(enq, threads=1, feed_fn=feed, close_op=close)
        runner.start(s)
        seen = []
        while True:
            try:
                a, b = s.run([bx, by])
            except sf.errors.OutOfRangeError:
                break
            seen.append(int(b[0]))
            assert a.shape == (4, 2)
        runner.join(60)
        assert sorted(seen) == [0, 1, 2]
        assert s.run(size) == 0


def test_random_shuffle_and_padding_queues(g):
    rq = sf.RandomShuffleQueue(capacity=10, min_after_dequeue=0, dtypes=[sf.int32], shapes=[[]], seed=3)
    enq = rq.enqueue_many([np.arange(6, dtype=np.int32)])
    out = rq.dequeue_many(6)
    pq = sf.PaddingFIFOQueue([sf.int32], shapes=[[None]])
    e1 = pq.enqueue([np.array([1, 2, 3], np.int32)])
    e2 = pq.enqueue([np.array([4], np.int32)])
    padded = pq.dequeue_many(2)
    with sf.Session(g) as s:
        s.run(enq)
        assert sorted(s.run(out).tolist()) == list(range(6))
        s.run(e1)
        s.run(e2)
        np.testing.assert_array_equal(s.run(padded), [[1, 2, 3], [4, 0, 0]])


def test_embedding_table_lookup_and_sparse_training(g):
    table = sf.embedding.EmbeddingTable("items", rows=10, dim=4, num_shards=2, initializer="zeros")
    ids = sf.placeholder(sf.int64, [None, 2], name="ids")
    target = sf.placeholder(sf.float32, [None, 4], name="target")
    emb = table.lookup(ids, combiner="sum")
    loss = sf.ops.mean(sf.ops.square(emb - target))
    train = sf.train.GradientDescentOptimizer(1.0).minimize(loss)
    feeds = {ids: np.array([[1, 2], [3, 3]]), target: np.ones((2, 4), np.float32)}
    with sf.Session(g, num_cpu_devices=2) as s:
        s.run(sf.global_variables_initializer())
        first = s.run(loss, feeds)
        for _ in range(20):
            s.run(train, feeds)
        assert s.run(loss, feeds) < 0.1 * first
        # Untouched rows stay zero: the updates were sparse.
        np.testing.assert_array_equal(s.run(table.lookup(np.array([[0, 9]]))), np.zeros((1, 4)))
    with pytest.raises(sf.errors.InvalidArgumentError, match="bad"):
        sf.embedding.EmbeddingTable("bad", rows=1, dim=4, num_shards=2)


def test_hash_embedding_table_any_int64_id_with_admission(g):
    # Hashed feature ids from an unbounded space, negative ones too.
    table = sf.embedding.HashEmbeddingTable("users", dim=4, num_shards=2, initializer="zeros", min_count=2)
    ids = sf.placeholder(sf.int64, [None, 2], name="ids")
    target = sf.placeholder(sf.float32, [None, 4], name="target")
    emb = table.lookup(ids, combiner="sum")
    loss = sf.ops.mean(sf.ops.square(emb - target))
    train = sf.train.AdagradOptimizer(0.5).minimize(loss)
    big = np.array([[2**62 + 7, -(2**61)], [-5, 2**62 + 7]], np.int64)
    feeds = {ids: big, target: np.ones((2, 4), np.float32)}
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        first = s.run(loss, feeds)
        for _ in range(30):
            s.run(train, feeds)
        assert s.run(loss, feeds) < 0.5 * first
        # An id seen once (below min_count) has no row: it reads the default, zeros.
        np.testing.assert_array_equal(s.run(emb, {ids: np.array([[123456789, 123456789]], np.int64)}),
                                      np.zeros((1, 4), np.float32))
    with pytest.raises(sf.errors.InvalidArgumentError, match="users2"):
        sf.embedding.HashEmbeddingTable("users2", dim=4, min_count=-1)
    with pytest.raises(sf.errors.InvalidArgumentError, match="colour"):
        sf.embedding.HashEmbeddingTable("users3", dim=4, colour="red")


def test_hash_embedding_read_only_view_counts_no_sighting(g):
    table = sf.embedding.HashEmbeddingTable("seen", dim=4, num_shards=2, min_count=2)
    ids = sf.placeholder(sf.int64, [None, 1], name="ids")
    emb = table.lookup(ids)
    view = table.read_only_view()
    assert view.read_only and not table.read_only
    probe = {ids: np.array([[777]], np.int64)}
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        for _ in range(3):  # evaluation reads zeros and counts nothing
            np.testing.assert_array_equal(s.run(view.lookup(ids), probe), np.zeros((1, 4)))
        np.testing.assert_array_equal(s.run(emb, probe), np.zeros((1, 4)))  # the first sighting
        assert np.all(s.run(emb, probe) != 0)  # the second: admitted, a uniform row
        np.testing.assert_array_equal(s.run(view.lookup(ids), probe), s.run(emb, probe))
    with pytest.raises(sf.errors.InvalidArgumentError, match="read-only"):
        sf.train.AdagradOptimizer(0.5).minimize(sf.ops.sum(view.lookup(ids)))


def test_checkpoints_with_saver(g, tmp_path):
    w = sf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    inc = w.assign_add(np.ones((2, 3), np.float32))
    saver = sf.train.CheckpointSaver(keep_last=2)
    d = tmp_path / "ckpt"
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        first = saver.save(s, d, global_step=10)
        s.run(inc)
        second = saver.save(s, d, global_step=20)
        s.run(inc)
        assert saver.restore(s, d, first) == 10
        np.testing.assert_array_equal(s.run(w), np.arange(6).reshape(2, 3))
        assert saver.restore(s, d) == 20
        np.testing.assert_array_equal(s.run(w), np.arange(6).reshape(2, 3) + 1)
        third = saver.save(s, d, global_step=30, incremental=True)
    assert sf.train.latest_checkpoint_id(d) == third
    assert sf.train.list_checkpoints(d) == [second, third]
    info = sf.train.describe_checkpoint(d, second)
    assert info["global_step"] == 20 and [v[0] for v in info["variables"]] == ["w"]
    np.testing.assert_array_equal(sf.train.read_checkpoint_variable(d, second, "w"), np.arange(6).reshape(2, 3) + 1)
    with sf.Session(g) as s2:  # a fresh session restores without initialising
        saver.restore(s2, d)
        np.testing.assert_array_equal(s2.run(w), np.arange(6).reshape(2, 3) + 1)
    with pytest.raises(sf.errors.NotFoundError):
        sf.train.latest_checkpoint_id(tmp_path / "none")


def test_graph_saved_in_cpp_runs_in_python(tmp_path, bin_dir):
    path = tmp_path / "cpp.capnp"
    subprocess.run([os.path.join(bin_dir, "sf_pytest_graph_writer"), str(path)], check=True, timeout=60)
    g = sf.load_graph(path)
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]], np.float32)
    w = np.array([1, -1, 2, 0.5, -3, 1], np.float32).reshape(3, 2)
    b = np.array([0.25, -0.5], np.float32)
    with sf.Session(g) as s:
        s.run("init")
        y, z = s.run(["y", "z"], {"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-6)
    np.testing.assert_allclose(z, (x @ w).sum(), rtol=1e-6)


def test_graph_saved_in_python_runs_in_cpp(g, tmp_path, bin_dir):
    x = sf.placeholder(sf.float32, [None, 2], name="x")
    w = sf.constant(np.array([[2.0, 0.0], [1.0, -1.0]], np.float32))
    sf.identity(sf.ops.tanh(x @ w) * 3.0, name="y")
    path = tmp_path / "py.capnp"
    g.save(path)
    xv = np.array([[0.1, 0.2], [0.3, -0.4]], np.float32)
    np.save(tmp_path / "x.npy", xv)
    out = tmp_path / "out"
    subprocess.run([os.path.join(bin_dir, "shardflow"), "run", "--graph", str(path), "--feed",
                    f"x={tmp_path / 'x.npy'}", "--fetch", "y", "--out", str(out)], check=True, timeout=120)
    with sf.Session(g) as s:
        want = s.run("y", {"x": xv})
    np.testing.assert_array_equal(np.load(out / "y.npy"), want)
