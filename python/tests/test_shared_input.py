"""The shared Criteo input from Python (sf.data.shared_criteo_batch_queue over sf.data.chunk_queue): two
workers in one session train every line once, with the rows sf.ops.criteo_reader gives for the same
files; a lost chunk's step is refused before its update (is_lost_chunk); bad input named."""

import gzip
import threading

import numpy as np
import pytest

import shardflow as sf


def _line(i):
    """Criteo line i: label, 13 integer fields (one empty), 26 categorical fields; C1 is unique per line."""
    ints = [str((i * 7 + k) % 50) if k != 3 else "" for k in range(13)]
    cats = ["%08x" % (i + 1)] + ["%04x" % ((i * 31 + k) % 97) for k in range(1, 26)]
    return "\t".join([str(i % 2)] + ints + cats)


def _write(tmp_path, files=3, lines=150):
    paths, n = [], 0
    for f in range(files):
        text = "".join(_line(n + i) + "\n" for i in range(lines))
        n += lines
        if f == 1:
            path = tmp_path / ("part%d.gz" % f)
            with gzip.open(path, "wt", newline="") as out:
                out.write(text)
        else:
            path = tmp_path / ("part%d.tsv" % f)
            path.write_text(text)
        paths.append(str(path))
    return paths, n


def _reference_rows(files):
    """C1's id -> (label, dense, categorical) by the threaded reader."""
    g = sf.Graph()
    rows = {}
    with g.as_default():
        label, dense, cat, _ = sf.ops.criteo_reader(files="\n".join(files), batch_size=64, num_threads=1)
        with sf.Session(graph=g) as s:
            while True:
                try:
                    l, d, c = s.run([label, dense, cat])
                except sf.errors.OutOfRangeError:
                    return rows
                for i in range(len(l)):
                    rows[int(c[i, 0])] = (l[i], d[i], c[i])


def _run_enqueue(sess, inp, errors):
    try:
        while True:
            sess.run(inp.enqueue)
    except sf.errors.OutOfRangeError:
        pass
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(e)
    sess.run(inp.close)


def test_two_workers_train_every_line_once_with_the_readers_rows(tmp_path):
    files, total = _write(tmp_path)
    plan = sf.data.plan_criteo_chunks(files, 4000)
    assert plan.num_chunks >= 4
    reference = _reference_rows(files)
    assert len(reference) == total
    index = {cid: i for i, cid in enumerate(sorted(reference))}

    g = sf.Graph()
    with g.as_default():
        q = sf.data.chunk_queue(plan.num_chunks, num_epochs=1, shared_name="chunks")
        seen = sf.Variable(np.zeros(total, np.float32), name="seen")
        workers = []
        for w in range(2):
            inp = sf.data.shared_criteo_batch_queue(q, plan, worker=w + 1, batch_size=32, name="worker%d" % w)
            delta = sf.placeholder(sf.float32, [total], name="delta%d" % w)
            train = sf.group(sf.assign_add(seen, delta))
            inp.report_trained_before(train)
            workers.append((inp, delta, train))
        init = sf.global_variables_initializer()
    got, errors, lock = {}, [], threading.Lock()
    with sf.Session(graph=g) as s:
        s.run(init)

        def work(inp, delta, train):
            while True:
                try:
                    label, dense, cat, ticket, pos = s.run([inp.label, inp.dense, inp.categorical, inp.ticket,
                                                            inp.pos])
                except sf.errors.OutOfRangeError:
                    return
                d = np.zeros(total, np.float32)
                for i in range(len(label)):
                    d[index[int(cat[i, 0])]] += 1
                s.run([train, inp.trained], {delta: d, inp.trained_ticket: ticket, inp.trained_pos: pos})
                with lock:
                    for i in range(len(label)):
                        got.setdefault(int(cat[i, 0]), []).append((label[i], dense[i], cat[i]))

        threads = [threading.Thread(target=_run_enqueue, args=(s, inp, errors)) for inp, _, _ in workers]
        threads += [threading.Thread(target=work, args=w) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
        counts = s.run(seen)
    assert errors == []
    np.testing.assert_array_equal(counts, np.ones(total, np.float32))
    assert sorted(got) == sorted(reference)
    for cid, [(label, dense, cat)] in got.items():
        ref = reference[cid]
        assert label == ref[0]
        np.testing.assert_array_equal(dense, ref[1])
        np.testing.assert_array_equal(cat, ref[2])


def test_a_lost_chunk_refuses_the_step_before_its_update(tmp_path):
    files, total = _write(tmp_path, files=1, lines=100)
    plan = sf.data.plan_criteo_chunks(files, 1 << 20)
    g = sf.Graph()
    with g.as_default():
        q = sf.data.chunk_queue(plan.num_chunks, shared_name="chunks")
        counter = sf.Variable(np.zeros([], np.float32), name="counter")
        inp = sf.data.shared_criteo_batch_queue(q, plan, worker=1, batch_size=16, capacity=200)
        train = sf.group(sf.assign_add(counter, sf.constant(1.0)))
        inp.report_trained_before(train)
        init = sf.global_variables_initializer()
    with sf.Session(graph=g) as s:
        s.run(init)
        s.run(inp.enqueue)
        _, ticket, pos = s.run([inp.label, inp.ticket, inp.pos])
        s.run(inp.release)  # the worker gave its chunk back: its rows are not its to train
        with pytest.raises(sf.errors.FailedPreconditionError) as e:
            s.run([train, inp.trained], {inp.trained_ticket: ticket, inp.trained_pos: pos})
        assert sf.data.is_lost_chunk(e.value)
        assert "chunk 0 of epoch 0" in str(e.value)
        assert s.run(counter) == 0.0  # the update did not run
    with pytest.raises(sf.errors.InvalidArgumentError, match="already runs after"):
        with g.as_default():
            other = sf.data.shared_criteo_batch_queue(q, plan, worker=2, batch_size=16, name="other")
            g._g.add_control_input(other.trained._node, train._node)
            other.report_trained_before(train)
    assert not sf.data.is_lost_chunk(sf.errors.FailedPreconditionError(None, None, "something else"))


def test_is_moved_tells_a_moved_or_lost_part():
    stale = "node n1: slot 1 placed by a stale shard map epoch 7 (it moves at epoch 9)"
    assert sf.data.is_moved(sf.errors.AbortedError(None, None, stale))
    assert sf.data.is_moved(sf.errors.UnavailableError(None, None, "node n1 is gone"))
    assert not sf.data.is_moved(sf.errors.AbortedError(None, None, "queue 'rows' is closed"))
    assert not sf.data.is_moved(sf.errors.FailedPreconditionError(None, None, stale))


def test_bad_input_is_named(tmp_path):
    with pytest.raises(sf.errors.NotFoundError, match="nowhere.tsv"):
        sf.data.plan_criteo_chunks([str(tmp_path / "nowhere.tsv")], 1000)
    files, _ = _write(tmp_path, files=1, lines=10)
    with pytest.raises(sf.errors.InvalidArgumentError):
        sf.data.plan_criteo_chunks(files, 0)
    plan = sf.data.plan_criteo_chunks(files, 1000)
    g = sf.Graph()
    with g.as_default():
        q = sf.data.chunk_queue(plan.num_chunks)
        with pytest.raises(sf.errors.InvalidArgumentError, match="batch_size"):
            sf.data.shared_criteo_batch_queue(q, plan, worker=1, batch_size=0)
        with pytest.raises(sf.errors.InvalidArgumentError, match="plan_criteo_chunks"):
            sf.data.shared_criteo_batch_queue(q, (files, [0, 0, -1]), worker=1, batch_size=4)
