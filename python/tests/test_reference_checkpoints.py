"""Checkpoints checked against NumPy: save/restore round trips, training resumed from a checkpoint,
incremental chains, restores into another shard count, retention, bad paths, graph mismatches,
corrupt and truncated stores (in subprocesses, to catch crashes) and saves during training."""

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import shardflow as sf


def _allvars(d, cid):
    info = sf.train.describe_checkpoint(d, cid)
    return {n: sf.train.read_checkpoint_variable(d, cid, n) for n, _, _ in info["variables"]}


def _flip(path, pos):
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


# ---- a small model: dense weight + a fixed or hash table, trained by one optimizer ----------------

ROWS = 20
_rng = np.random.default_rng(1)
BATCHES = [dict(x=_rng.standard_normal((8, 3)).astype(np.float32), ids=_rng.integers(0, ROWS, (8, 2)),
                y=_rng.standard_normal((8, 1)).astype(np.float32)) for _ in range(8)]


def _model(opt="adagrad", shards=2, part="mod", hash_=False, rows=ROWS, **hopt):
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None, 3], name="x")
        ids = sf.placeholder(sf.int64, [None, 2], name="ids")
        y = sf.placeholder(sf.float32, [None, 1], name="y")
        w = sf.Variable(np.full((3, 1), 0.1, np.float32), name="w")
        if hash_:
            t = sf.embedding.HashEmbeddingTable("h", dim=4, num_shards=shards, seed=3, **hopt)
        else:
            t = sf.embedding.EmbeddingTable("emb", rows=rows, dim=4, num_shards=shards, partition=part, seed=3)
        pred = x @ w + sf.ops.sum(t.lookup(ids, combiner="sum"), axes=[1], keep_dims=True)
        loss = sf.ops.mean(sf.ops.square(pred - y))
        o = {"adam": sf.train.AdamOptimizer(0.05), "adagrad": sf.train.AdagradOptimizer(0.1),
             "sgd": sf.train.GradientDescentOptimizer(0.1), "momentum": sf.train.MomentumOptimizer(0.05, 0.9)}[opt]
        train = o.minimize(loss) if opt != "momentum" else o.minimize(loss, var_list=[w])
        allids = sf.placeholder(sf.int64, [None, 1], name="allids")
        look = t.read_only_view().lookup(allids, combiner="none")
        init = sf.global_variables_initializer()
    return g, dict(x=x, ids=ids, y=y, w=w, loss=loss, train=train, init=init, look=look, allids=allids)


def _feed(m, b):
    return {m["x"]: b["x"], m["ids"]: b["ids"], m["y"]: b["y"]}


def _snap(s, m):
    rows = s.run(m["look"], {m["allids"]: np.arange(ROWS).reshape(-1, 1)})[:, 0]
    return np.concatenate([rows.ravel(), s.run(m["w"]).ravel()])


# ---- round trips -------------------------------------------------------------------------------

def test_round_trip_dtypes_scalars_and_zero_size(tmp_path):
    rng = np.random.default_rng(0)
    vals = {"f32": rng.standard_normal((3, 4)).astype(np.float32), "f64": rng.standard_normal(5),
            "i32": np.arange(6, dtype=np.int32).reshape(2, 3) - 3, "i64": np.array([2 ** 40, -3], np.int64),
            "scalar": np.float32(3.5), "empty": np.zeros((0, 3), np.float32),
            "special": np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32)}
    d = tmp_path / "c"
    g = sf.Graph()
    with g.as_default():
        vs = {n: sf.Variable(v, name=n) for n, v in vals.items()}
        with sf.Session(g) as s:
            s.run(sf.global_variables_initializer())
            cid = sf.train.CheckpointSaver().save(s, d, global_step=7)
    info = sf.train.describe_checkpoint(d, cid)
    assert info["global_step"] == 7 and info["parent"] == -1 and info["id"] == cid
    assert {n: list(sh) for n, _, sh in info["variables"]} == {n: list(np.shape(v)) for n, v in vals.items()}
    for n, v in vals.items():
        r = sf.train.read_checkpoint_variable(d, cid, n)
        assert r.dtype == np.asarray(v).dtype and r.tobytes() == np.asarray(v).tobytes()
    with sf.Session(g) as s2:  # fresh, never initialised
        assert sf.train.CheckpointSaver().restore(s2, d) == 7
        got = s2.run(vs)
    for n, v in vals.items():
        assert got[n].dtype == np.asarray(v).dtype and got[n].shape == np.shape(v)
        assert got[n].tobytes() == np.asarray(v).tobytes(), n


@pytest.mark.parametrize("opt", ["adam", "adagrad", "sgd"])
@pytest.mark.parametrize("hash_", [False, True], ids=["fixed", "hash"])
def test_restore_then_training_equals_uninterrupted(tmp_path, opt, hash_):
    d = tmp_path / "c"
    g, m = _model(opt, hash_=hash_)
    with sf.Session(g, num_cpu_devices=2) as s:
        s.run(m["init"])
        for b in BATCHES[:4]:
            s.run(m["train"], _feed(m, b))
        sf.train.CheckpointSaver().save(s, d, global_step=4)
        saved = _allvars(d, sf.train.latest_checkpoint_id(d))
        ref_losses = [s.run([m["loss"], m["train"]], _feed(m, b))[0] for b in BATCHES[4:]]
        ref_final = _snap(s, m)
    g2, m2 = _model(opt, hash_=hash_)
    with sf.Session(g2, num_cpu_devices=2) as s:
        assert sf.train.CheckpointSaver().restore(s, d) == 4
        # every variable and slot reads back as saved
        sf.train.CheckpointSaver().save(s, tmp_path / "again", 4)
        again = _allvars(tmp_path / "again", 1)
        assert saved.keys() == again.keys()
        assert opt == "sgd" or any(k.startswith("w/") for k in saved)  # the optimizer's slots are saved
        for k in saved:
            assert saved[k].tobytes() == again[k].tobytes(), k
        losses = [s.run([m2["loss"], m2["train"]], _feed(m2, b))[0] for b in BATCHES[4:]]
        assert np.array_equal(losses, ref_losses)
        assert np.array_equal(_snap(s, m2), ref_final)


# ---- incremental checkpoints --------------------------------------------------------------------

@pytest.mark.parametrize("hash_", [False, True], ids=["fixed", "hash"])
def test_incremental_chain_restores_every_link(tmp_path, hash_):
    d = tmp_path / "c"
    g, m = _model("adam", hash_=hash_)
    states, full_vars = {}, {}
    with sf.Session(g, num_cpu_devices=2) as s:
        s.run(m["init"])
        saver = sf.train.CheckpointSaver(keep_last=10)
        s.run(m["train"], _feed(m, BATCHES[0]))
        cid = saver.save(s, d, 0)
        states[cid] = _snap(s, m)
        for k in range(1, 5):
            b = dict(BATCHES[k], ids=np.full((8, 2), k))  # a few rows only
            s.run(m["train"], _feed(m, b))
            cid = saver.save(s, d, k, incremental=True)
            states[cid] = _snap(s, m)
            full_vars[cid] = _allvars(d, cid)  # composed by read_checkpoint_variable
    ids = sorted(states)
    assert [sf.train.describe_checkpoint(d, i)["parent"] for i in ids] == [-1] + ids[:-1]
    for i in ids:
        g2, m2 = _model("adam", hash_=hash_)
        with sf.Session(g2, num_cpu_devices=2) as s:
            assert sf.train.CheckpointSaver().restore(s, d, i) == ids.index(i)
            assert np.array_equal(_snap(s, m2), states[i])
            if i in full_vars:  # slots too: a full save of the restored state equals the composed increment
                sf.train.CheckpointSaver().save(s, tmp_path / f"full{i}", 0)
                again = _allvars(tmp_path / f"full{i}", 1)
                assert again.keys() == full_vars[i].keys()
                for k in again:
                    assert again[k].tobytes() == full_vars[i][k].tobytes(), (i, k)


def _dense_table_model():
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.EmbeddingTable("emb", rows=ROWS, dim=4, num_shards=2, seed=1)
        w = sf.Variable(np.ones((2, 2), np.float32), name="w")
        ids = sf.placeholder(sf.int64, [None, 1], name="ids")
        train = sf.train.AdagradOptimizer(0.5).minimize(sf.ops.sum(t.lookup(ids)) + sf.ops.sum(w * w))
        asg = w.assign(np.full((2, 2), 5, np.float32))
        allids = sf.placeholder(sf.int64, [None, 1], name="allids")
        look = t.read_only_view().lookup(allids, combiner="none")
        init = sf.global_variables_initializer()
    return g, dict(ids=ids, train=train, asg=asg, init=init, look=look, allids=allids, w=w)


def test_incremental_captures_assign_reinit_and_is_full_after_restore_or_other_dir(tmp_path):
    d, other = tmp_path / "c", tmp_path / "other"
    g, m = _dense_table_model()
    hist = []
    with sf.Session(g) as s:
        sv = sf.train.CheckpointSaver(keep_last=100)
        step = lambda ids: s.run(m["train"], {m["ids"]: np.array(ids).reshape(-1, 1)})  # noqa: E731
        s.run(m["init"])
        hist.append(sv.save(s, d, 0))
        for k, act in enumerate([lambda: step([1, 2]), lambda: s.run(m["asg"]), lambda: s.run(m["init"]),
                                 lambda: step([3]), lambda: sv.save(s, other, 0), lambda: step([4]),
                                 lambda: sv.restore(s, d, 1), lambda: step([9])], start=1):
            act()
            hist.append(sv.save(s, d, k, incremental=True))
            hist[-1] = (hist[-1], _snap(s, m))
        hist[0] = (hist[0], None)
    parents = [sf.train.describe_checkpoint(d, i)["parent"] for i, _ in hist]
    # a save into another directory, or a restore, since the last save here: the next one is full
    assert parents[1:5] == [h[0] for h in hist[:4]] and parents[5] == -1 and parents[6] == hist[5][0]
    assert parents[7] == -1 and parents[8] == hist[7][0]
    for i, ref in hist[1:]:
        g2, m2 = _dense_table_model()
        with sf.Session(g2) as s:
            sf.train.CheckpointSaver().restore(s, d, i)
            assert np.array_equal(_snap(s, m2), ref), i


def _hash_model(**hopt):
    g = sf.Graph()
    with g.as_default():
        t = sf.embedding.HashEmbeddingTable("h", dim=4, num_shards=2, seed=1, **hopt)
        ids = sf.placeholder(sf.int64, [None, 1], name="ids")
        train = sf.train.AdagradOptimizer(0.5).minimize(sf.ops.sum(t.lookup(ids)))
        allids = sf.placeholder(sf.int64, [None, 1], name="allids")
        look = t.read_only_view().lookup(allids, combiner="none")
        init = sf.global_variables_initializer()
    return g, dict(ids=ids, train=train, init=init, look=look, allids=allids)


@pytest.mark.parametrize("hopt,steps", [
    (dict(ttl_steps=4), [[1, 2, 3], [4], [4], [1], [4], [2], [4], [4], [3], [1, 2, 3]]),
    (dict(min_count=3), [[1], [1, 2], [2], [1, 2, 3], [3], [3, 2]]),
    (dict(max_rows=3, eviction="lfu"), [[1, 2, 3, 1], [5, 6], [7, 1, 9], [10, 11, 2, 13, 14], [1, 2, 3, 4, 5, 6]]),
], ids=["ttl", "min_count", "max_rows"])
def test_hash_incremental_chain_replays_like_uninterrupted(tmp_path, hopt, steps):
    """Rows expired, evicted or admitted between saves: every link, replayed to the end, gives the same final table."""
    d = tmp_path / "c"
    probe = np.arange(20).reshape(-1, 1)
    g, m = _hash_model(**hopt)
    cids = []
    with sf.Session(g) as s:
        s.run(m["init"])
        sv = sf.train.CheckpointSaver(keep_last=100)
        for k, ids in enumerate(steps):
            s.run(m["train"], {m["ids"]: np.array(ids).reshape(-1, 1)})
            cids.append(sv.save(s, d, k, incremental=k > 0))
        final = s.run(m["look"], {m["allids"]: probe})
    for k, cid in enumerate(cids):
        g2, m2 = _hash_model(**hopt)
        with sf.Session(g2) as s:
            sf.train.CheckpointSaver().restore(s, d, cid)
            for ids in steps[k + 1:]:
                s.run(m2["train"], {m2["ids"]: np.array(ids).reshape(-1, 1)})
            assert np.array_equal(s.run(m2["look"], {m2["allids"]: probe}), final), k


# ---- restoring into another shard count --------------------------------------------------------

def _logical(d, cid, suffix, k, part):
    parts = [sf.train.read_checkpoint_variable(d, cid, f"emb/part_{i}{suffix}") for i in range(k)]
    if part == "range":
        return np.concatenate(parts)
    out = np.zeros((ROWS, parts[0].shape[1]), parts[0].dtype)
    for i in range(k):
        out[i::k] = parts[i]
    return out


@pytest.mark.parametrize("opt,slot", [("adagrad", "/Adagrad/accumulator"), ("adam", "/Adam/m"), ("adam", "/Adam/v")])
@pytest.mark.parametrize("k,part", [(1, "mod"), (3, "mod"), (7, "mod"), (2, "range"), (3, "range")])
def test_restore_into_other_shard_count(tmp_path, opt, slot, k, part):
    d = tmp_path / "c"
    g, m = _model(opt, shards=2, part="mod")
    with sf.Session(g, num_cpu_devices=2) as s:
        s.run(m["init"])
        for b in BATCHES[:3]:
            s.run(m["train"], _feed(m, b))
        cid = sf.train.CheckpointSaver().save(s, d, 3)
        ref = _snap(s, m)
        ref_losses = [s.run([m["loss"], m["train"]], _feed(m, b))[0] for b in BATCHES[3:6]]
    table, slots = _logical(d, cid, "", 2, "mod"), _logical(d, cid, slot, 2, "mod")
    g2, m2 = _model(opt, shards=k, part=part)
    with sf.Session(g2, num_cpu_devices=2) as s:
        assert sf.train.CheckpointSaver().restore(s, d) == 3
        assert np.array_equal(_snap(s, m2), ref)
        j = sf.train.CheckpointSaver().save(s, tmp_path / "re", 3)
        assert np.array_equal(_logical(tmp_path / "re", j, "", k, part), table)
        assert np.array_equal(_logical(tmp_path / "re", j, slot, k, part), slots)
        losses = [s.run([m2["loss"], m2["train"]], _feed(m2, b))[0] for b in BATCHES[3:6]]
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 3])
def test_hash_table_restores_into_other_shard_count_from_a_chain(tmp_path, k):
    d = tmp_path / "c"
    g, m = _model("adagrad", shards=2, hash_=True)
    with sf.Session(g, num_cpu_devices=2) as s:
        s.run(m["init"])
        s.run(m["train"], _feed(m, BATCHES[0]))
        sf.train.CheckpointSaver().save(s, d, 0)
        s.run(m["train"], _feed(m, dict(BATCHES[1], ids=np.full((8, 2), 11))))
        sf.train.CheckpointSaver().save(s, d, 1, incremental=True)
        ref = _snap(s, m)
        ref_losses = [s.run([m["loss"], m["train"]], _feed(m, b))[0] for b in BATCHES[2:5]]
        ref_final = _snap(s, m)
    g2, m2 = _model("adagrad", shards=k, hash_=True)
    with sf.Session(g2, num_cpu_devices=2) as s:
        sf.train.CheckpointSaver().restore(s, d)
        assert np.array_equal(_snap(s, m2), ref)
        losses = [s.run([m2["loss"], m2["train"]], _feed(m2, b))[0] for b in BATCHES[2:5]]
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
        np.testing.assert_allclose(_snap(s, m2), ref_final, rtol=1e-6)


def test_restore_into_other_row_count_names_the_table(tmp_path):
    d = tmp_path / "c"
    g, m = _model("sgd")
    with sf.Session(g) as s:
        s.run(m["init"])
        sf.train.CheckpointSaver().save(s, d, 0)
    g2, m2 = _model("sgd", rows=24)
    with sf.Session(g2) as s:
        s.run(m2["init"])
        before = s.run(m2["w"])
        with pytest.raises(sf.errors.InvalidArgumentError, match="'emb' has 24 rows in the graph but 20"):
            sf.train.CheckpointSaver().restore(s, d)
        assert np.array_equal(s.run(m2["w"]), before)


# ---- graph mismatches: clear errors, nothing assigned --------------------------------------------

def _saved_ab(d):
    g = sf.Graph()
    with g.as_default():
        sf.Variable(np.ones((3, 4), np.float32), name="a")
        sf.Variable(np.ones((2,), np.float64), name="b")
        with sf.Session(g) as s:
            s.run(sf.global_variables_initializer())
            sf.train.CheckpointSaver().save(s, d, 3)


@pytest.mark.parametrize("specs,err,match", [
    ([("a", np.float32, (3, 4)), ("b", np.float64, (2,)), ("c", np.float32, (2,))], sf.errors.NotFoundError, "'c'"),
    ([("0first", np.float32, (1,)), ("a", np.float32, (3, 4)), ("b", np.float64, (2,))], sf.errors.NotFoundError, "'0first'"),
    ([("b", np.float64, (2,)), ("a", np.float32, (4, 3))], sf.errors.InvalidArgumentError, "'a' has shape"),
    ([("b", np.float64, (2,)), ("a", np.float32, (12,))], sf.errors.InvalidArgumentError, "'a' has shape"),
    ([("a", np.float32, (3, 4)), ("b", np.float32, (2,))], sf.errors.InvalidArgumentError, "'b' is float32"),
    ([("a", np.float32, (3, 4)), ("b", np.int64, (2,))], sf.errors.InvalidArgumentError, "'b' is int64"),
    ([("a", np.float64, (3, 4)), ("b", np.float64, (2,))], sf.errors.InvalidArgumentError, "'a' is float64"),
], ids=["missing-last", "missing-first", "shape", "rank", "dtype-f32", "dtype-i64", "dtype-a"])
def test_mismatched_graph_is_an_error_and_assigns_nothing(tmp_path, specs, err, match):
    d = tmp_path / "c"
    _saved_ab(d)
    g = sf.Graph()
    with g.as_default():
        vs = [sf.Variable(np.full(shape, 7, dt), name=n) for n, dt, shape in specs]
        with sf.Session(g) as s:
            s.run(sf.global_variables_initializer())
            with pytest.raises(err, match=match):
                sf.train.CheckpointSaver().restore(s, d)
            for v in s.run(vs):
                assert (v == 7).all()


def test_checkpoint_with_an_extra_variable_restores_the_graphs_ones(tmp_path):
    d = tmp_path / "c"
    _saved_ab(d)
    g = sf.Graph()
    with g.as_default():
        a = sf.Variable(np.full((3, 4), 7, np.float32), name="a")
        with sf.Session(g) as s:
            assert sf.train.CheckpointSaver().restore(s, d) == 3
            assert (s.run(a) == 1).all()


# ---- retention, listing, paths --------------------------------------------------------------------

def _counter():
    g = sf.Graph()
    with g.as_default():
        v = sf.Variable(np.zeros(3, np.float32), name="v")
        inc = v.assign_add(np.ones(3, np.float32))
        g.init = sf.global_variables_initializer()
    return g, v, inc


def test_keep_last_latest_and_chain_retention(tmp_path):
    g, v, inc = _counter()
    d, dc = tmp_path / "k", tmp_path / "chain"
    with sf.Session(g) as s:
        s.run(g.init)
        sv = sf.train.CheckpointSaver(keep_last=3)
        ids = []
        for k in range(6):
            ids.append(sv.save(s, d, global_step=10 * k))
            s.run(inc)
        assert ids == sorted(ids) and len(set(ids)) == 6
        assert sf.train.list_checkpoints(d) == ids[-3:] and sf.train.latest_checkpoint_id(d) == ids[-1]
        for k, i in enumerate(ids[-3:], start=3):
            assert sf.train.describe_checkpoint(d, i)["global_step"] == 10 * k
            assert (sf.train.read_checkpoint_variable(d, i, "v") == k).all()
        with pytest.raises(sf.errors.NotFoundError):
            sf.train.describe_checkpoint(d, ids[0])
        with pytest.raises(sf.errors.NotFoundError):
            sv.restore(s, d, ids[0])
        with pytest.raises(sf.errors.NotFoundError, match="'nope'"):
            sf.train.read_checkpoint_variable(d, ids[-1], "nope")
        # a chain keeps every link its kept increments need, until a full save lets it go
        sv = sf.train.CheckpointSaver(keep_last=2)
        chain = [sv.save(s, dc, 0)]
        for k in range(1, 5):
            s.run(inc)
            chain.append(sv.save(s, dc, k, incremental=True))
        assert sf.train.list_checkpoints(dc) == chain
        s.run(inc)
        f = sv.save(s, dc, 5)
        s.run(inc)
        i = sv.save(s, dc, 6, incremental=True)
        assert sf.train.list_checkpoints(dc) == [f, i]
        assert sf.train.latest_checkpoint_id(dc) == i
    with sf.Session(g) as s2:
        assert sf.train.CheckpointSaver().restore(s2, dc) == 6
        assert (s2.run(v) == 12).all()


def test_save_to_bad_paths_is_a_clear_error(tmp_path):
    g, v, inc = _counter()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with sf.Session(g) as s:
        s.run(g.init)
        with pytest.raises(sf.errors.OpError, match="not a directory"):
            sf.train.CheckpointSaver().save(s, afile, 1)
        with pytest.raises(sf.errors.OpError, match="afile"):
            sf.train.CheckpointSaver().save(s, afile / "sub", 1)
        with pytest.raises(sf.errors.InvalidArgumentError, match="empty"):
            sf.train.CheckpointSaver().save(s, "", 1)
        if os.geteuid() != 0:  # root writes anyway
            ro = tmp_path / "ro"
            ro.mkdir()
            ro.chmod(0o500)
            try:
                with pytest.raises(sf.errors.OpError):
                    sf.train.CheckpointSaver().save(s, ro / "c", 1)
            finally:
                ro.chmod(0o700)
        with pytest.raises(sf.errors.NotFoundError):
            sf.train.CheckpointSaver().restore(s, afile)
        assert afile.read_text() == "x"
    for fn in (sf.train.latest_checkpoint_id, sf.train.list_checkpoints):
        with pytest.raises(sf.errors.NotFoundError):
            fn(tmp_path / "none")


def test_queries_of_a_missing_directory_create_nothing(tmp_path):
    g, v, inc = _counter()
    missing = tmp_path / "missing"
    with pytest.raises(sf.errors.NotFoundError):
        sf.train.latest_checkpoint_id(missing)
    with sf.Session(g) as s:
        with pytest.raises(sf.errors.NotFoundError):
            sf.train.CheckpointSaver().restore(s, missing)
    assert not missing.exists()


# ---- corrupt and truncated stores (subprocesses: a crash must not pass) ---------------------------

_WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import shardflow as sf
    d, refs, ckid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    R = {int(k): dict(np.load(f"{refs}{k}.npz")) for k in (1, 2)}
    out = {}
    g = sf.Graph()
    with g.as_default():
        vs = {n: sf.Variable(np.full(a.shape, 7, a.dtype), name=n) for n, a in R[1].items()}
        with sf.Session(g) as s:
            s.run(sf.global_variables_initializer())
            try:
                step = sf.train.CheckpointSaver().restore(s, d, ckid)
                out["restore"] = "ok"
            except sf.errors.OpError as e:
                step, out["restore"] = None, type(e).__name__ + ": " + str(e)
            vals = s.run(vs)
    if step is None:
        out["vals"] = "unchanged" if all((v == 7).all() for v in vals.values()) else "CHANGED"
    else:
        out["vals"] = "correct" if all(np.array_equal(vals[n], R[step][n]) for n in vals) else "WRONG"
    try:
        ids = sf.train.list_checkpoints(d)
        for i in ids:
            try:
                r = sf.train.read_checkpoint_variable(d, i, "big")
                assert np.array_equal(r, R[i]["big"]), f"read of checkpoint {i} gave wrong values"
            except sf.errors.OpError:
                pass
    except sf.errors.OpError:
        pass
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """Checkpoints 1 and 2 of {big (4.5 MB: a table file of its own), small, i}; which files each added."""
    root = tmp_path_factory.mktemp("corrupt")
    d = root / "base"
    rng = np.random.default_rng(0)
    r1 = {"big": rng.standard_normal((1100, 1024)).astype(np.float32), "small": rng.standard_normal((5, 3)),
          "i": np.arange(4, dtype=np.int32)}
    r2 = {k: v + 1 for k, v in r1.items()}
    np.savez(root / "ref1.npz", **r1)
    np.savez(root / "ref2.npz", **r2)
    files = {}
    g = sf.Graph()
    with g.as_default():
        vs = {n: sf.Variable(v, name=n) for n, v in r1.items()}
        ups = [vs[n].assign(r2[n]) for n in r1]
        with sf.Session(g) as s:
            s.run(sf.global_variables_initializer())
            seen = set()
            for k in (1, 2):
                if k == 2:
                    s.run(ups)
                assert sf.train.CheckpointSaver().save(s, d, k) == k
                now = {os.path.basename(p) for p in glob.glob(str(d / "*")) if os.path.getsize(p) > 0}
                files[k] = sorted(now - seen)
                seen = now
    (root / "worker.py").write_text(_WORKER)
    return root, d, files


def _corrupt_run(root, base, edit, ckid=-1):
    w = root / "work"
    shutil.rmtree(w, ignore_errors=True)
    shutil.copytree(base, w)
    edit(w)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(sf.__file__)))
    r = subprocess.run([sys.executable, str(root / "worker.py"), str(w), str(root / "ref"), str(ckid)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, f"worker crashed (rc {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _edits(files):
    cases = []
    for k in (1, 2):
        for f in files[k]:
            if f.startswith(("LOG", "LOCK", "OPTIONS", "IDENTITY", "MANIFEST", "CURRENT")):
                continue
            for frac in (0.0, 0.5, 0.999):
                cases.append((f"ckpt{k}:{f}:trunc{frac}", f, "trunc", frac))
            for frac in (0.05, 0.5, 0.95):
                cases.append((f"ckpt{k}:{f}:flip{frac}", f, "flip", frac))
    for f in ("CURRENT", "MANIFEST"):
        cases.append((f"{f}:trunc0.5", f, "trunc", 0.5))
        cases.append((f"{f}:flip0.5", f, "flip", 0.5))
    return cases


def test_corrupt_or_truncated_files_give_errors_or_a_readable_checkpoint(two_checkpoints):
    root, base, files = two_checkpoints
    for name, f, kind, frac in _edits(files):
        def edit(w, f=f, kind=kind, frac=frac):
            p = next(iter(glob.glob(str(w / (f + "*")))))
            n = os.path.getsize(p)
            if kind == "trunc":
                os.truncate(p, int(n * frac))
            else:
                _flip(p, min(int(n * frac), n - 1))
        for ckid in (-1, 2):
            out = _corrupt_run(root, base, edit, ckid)
            assert out["vals"] in ("correct", "unchanged"), (name, ckid, out)
            if out["restore"] != "ok":
                assert out["restore"].split(":")[0].endswith("Error") and len(out["restore"]) > 20, (name, out)


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(two_checkpoints):
    root, base, files = two_checkpoints
    sst2 = [f for f in files[2] if f.endswith(".sst")]
    assert sst2, files

    def edit(w):
        _flip(w / sst2[0], 200000)
    out = _corrupt_run(root, base, edit, -1)
    assert out == {"restore": "ok", "vals": "correct"}  # checkpoint 1 (the worker checks the step's values)
    out = _corrupt_run(root, base, edit, 2)
    assert out["vals"] == "unchanged" and "checkpoint 2" in out["restore"] and "'big'" in out["restore"]
    assert "checkpoint 1 is the previous readable one" in out["restore"] or "1" in out["restore"]


def test_corrupt_block_is_data_loss(two_checkpoints):
    root, base, files = two_checkpoints
    sst2 = [f for f in files[2] if f.endswith(".sst")][0]
    out = _corrupt_run(root, base, lambda w: _flip(w / sst2, 200000), 2)
    assert out["restore"].startswith("DataLossError"), out


def test_damaged_old_log_keeps_newer_checkpoint_or_says_corrupt(two_checkpoints):
    root, base, files = two_checkpoints
    log1 = [f for f in files[1] if f.endswith(".log")][0]
    out = _corrupt_run(root, base, lambda w: os.truncate(w / log1, os.path.getsize(w / log1) // 3), -1)
    assert out["restore"] == "ok" or "NotFound" not in out["restore"], out


def test_corrupt_increment_falls_back_before_the_chain(tmp_path):
    rows, dim = 2048, 1024
    d = tmp_path / "c"

    def build():
        g = sf.Graph()
        with g.as_default():
            t = sf.embedding.EmbeddingTable("emb", rows=rows, dim=dim, num_shards=1, initializer="zeros")
            ids = sf.placeholder(sf.int64, [None, 1], name="ids")
            train = sf.train.GradientDescentOptimizer(1.0).minimize(sf.ops.sum(t.lookup(ids)))
            init = sf.global_variables_initializer()
        return g, ids, train, init
    g, ids, train, init = build()
    with sf.Session(g) as s:
        s.run(init)
        sv = sf.train.CheckpointSaver(keep_last=10)
        sv.save(s, d, 1)
        before = set(glob.glob(str(d / "*.sst")))
        s.run(train, {ids: np.arange(1100).reshape(-1, 1)})  # 4.5 MB of changed rows: a table file
        sv.save(s, d, 2, incremental=True)
        inc_sst = sorted(set(glob.glob(str(d / "*.sst"))) - before)
        s.run(train, {ids: np.array([[5], [2000]])})
        sv.save(s, d, 3, incremental=True)
    assert [sf.train.describe_checkpoint(d, i)["parent"] for i in (1, 2, 3)] == [-1, 1, 2] and inc_sst
    _flip(inc_sst[0], 1000000)
    g2, ids2, train2, init2 = build()
    with sf.Session(g2) as s:
        s.run(init2)
        s.run(train2, {ids2: np.full((2, 1), 7)})
        assert sf.train.CheckpointSaver().restore(s, d) == 1  # the chain 3 -> 2 -> 1 is broken at 2
        with pytest.raises(sf.errors.OpError, match=r"checkpoint 2 \(an increment on checkpoint 1\)"):
            sf.train.CheckpointSaver().restore(s, d, 3)
    with pytest.raises(sf.errors.OpError, match="checkpoint 2"):
        sf.train.read_checkpoint_variable(d, 3, "emb/part_0")


# ---- a save while another thread trains ----------------------------------------------------------

def test_save_during_training_keeps_each_variable_consistent_with_its_slots(tmp_path):
    """The guide promises a snapshot per shard actor between two updates: a variable and its slots
    come from the same step (not all variables from one step)."""
    n_steps = 120

    def build():
        g = sf.Graph()
        with g.as_default():
            w = sf.Variable(np.linspace(-1, 1, 16 * 1024).astype(np.float32).reshape(16, 1024), name="w")
            c = sf.constant(np.linspace(0.5, 1.5, 16 * 1024).astype(np.float32).reshape(16, 1024))
            train = sf.train.MomentumOptimizer(0.001, 0.9).minimize(sf.ops.sum(w * w * c))
            init = sf.global_variables_initializer()
        return g, w, train, init

    def key(a):
        return np.ascontiguousarray(a).tobytes()
    ref = {}
    g, w, train, init = build()
    with sf.Session(g) as s:
        s.run(init)
        sv = sf.train.CheckpointSaver(keep_last=n_steps + 5)
        for t in range(n_steps + 1):
            if t:
                s.run(train)
            if t % 1 == 0:
                i = sv.save(s, tmp_path / "ref", t)
                ref[key(sf.train.read_checkpoint_variable(tmp_path / "ref", i, "w"))] = \
                    key(sf.train.read_checkpoint_variable(tmp_path / "ref", i, "w/Momentum/momentum"))
    d = tmp_path / "live"
    g, w, train, init = build()
    ids = []
    with sf.Session(g) as s:
        s.run(init)
        done = threading.Event()

        def loop():
            try:
                for _ in range(n_steps):
                    s.run(train)
            finally:
                done.set()
        th = threading.Thread(target=loop)
        th.start()
        sv = sf.train.CheckpointSaver(keep_last=1000)
        while not done.is_set():
            ids.append(sv.save(s, d, 0))
        th.join()
    assert ids
    for i in ids:
        kw = key(sf.train.read_checkpoint_variable(d, i, "w"))
        assert kw in ref, f"checkpoint {i}: w is not the value of any step"
        assert ref[kw] == key(sf.train.read_checkpoint_variable(d, i, "w/Momentum/momentum")), i
