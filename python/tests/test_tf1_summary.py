"""TF 1.x's tf.summary writing TensorBoard event files, read back here by a reader written from the formats
(TFRecord framing with masked CRC-32C, Event and Summary protocol buffers)."""

import glob
import os
import struct

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


# ---- an independent reader -----------------------------------------------------------------------

def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data):
    c = _crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, []
    while pos < len(data):
        length_bytes = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == _masked(length_bytes)
        body = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == _masked(body)
        out.append(body)
        pos += 16 + length
    return out


def _fields(msg):
    """[(field, wire type, value)] of a serialized protocol buffer message."""
    pos, out = 0, []

    def varint():
        nonlocal pos
        shift = result = 0
        while True:
            b = msg[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result
    while pos < len(msg):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 1:
            out.append((field, wire, msg[pos:pos + 8]))
            pos += 8
        elif wire == 5:
            out.append((field, wire, msg[pos:pos + 4]))
            pos += 4
        elif wire == 2:
            n = varint()
            out.append((field, wire, msg[pos:pos + n]))
            pos += n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _summary_values(summary):
    """{tag: float or {min, max, num, sum, sum_squares, bucket_limit, bucket}} of a serialized Summary."""
    out = {}
    for field, _, value in _fields(summary):
        assert field == 1
        parts = {f: v for f, _, v in _fields(value)}
        tag = parts[1].decode()
        if 2 in parts:
            out[tag] = struct.unpack("<f", parts[2])[0]
        else:
            h = {f: v for f, _, v in _fields(parts[5])}
            names = ["min", "max", "num", "sum", "sum_squares"]
            hist = {names[i]: struct.unpack("<d", h[i + 1])[0] for i in range(5)}
            hist["bucket_limit"] = np.frombuffer(h[6], "<f8")
            hist["bucket"] = np.frombuffer(h[7], "<f8")
            out[tag] = hist
    return out


def _events(logdir):
    (path,) = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    events = []
    for rec in _records(path):
        ev = {}
        for field, _, value in _fields(rec):
            if field == 1:
                ev["wall_time"] = struct.unpack("<d", value)[0]
            elif field == 2:
                ev["step"] = value
            elif field == 3:
                ev["file_version"] = value.decode()
            elif field == 5:
                ev["summary"] = _summary_values(value)
        events.append(ev)
    return events


# ---- the tests -------------------------------------------------------------------------------------

def test_crc32c_of_the_reader_is_the_standard_one():
    assert _crc32c(b"123456789") == 0xE3069283


def test_scalars_and_histograms_are_written_as_tensorboard_reads_them(tmp_path):
    x = tf.placeholder(tf.float32, [None])
    loss = tf.reduce_mean(x)
    assert tf.summary.merge_all() is None  # TF: nothing to merge
    tf.summary.scalar("loss", loss)
    with tf.name_scope("train"):
        tf.summary.scalar("loss", loss * 2)
        tf.summary.scalar("steps", tf.constant(7))  # an integer is written as a float, as TF
    tf.summary.histogram("x", x)
    tf.summary.scalar("loss", loss, family="eval")
    merged = tf.summary.merge_all()
    assert merged.dtype == tf.uint8
    logdir = str(tmp_path / "logs")
    with tf.Session() as sess:
        writer = tf.summary.FileWriter(logdir, sess.graph)
        for step, values in enumerate([[1.0, 3.0], [2.0, 4.0, 9.0, -1.0]], start=1):
            summary = sess.run(merged, {x: values})
            writer.add_summary(summary, step)
        writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="python_value", simple_value=0.25)]), 3)
        writer.close()
    events = _events(logdir)
    assert events[0]["file_version"] == "brain.Event:2"
    first, second, third = events[1:]
    assert first["step"] == 1 and second["step"] == 2 and third["step"] == 3
    s = second["summary"]
    assert set(s) == {"loss", "train/loss", "train/steps", "x", "eval/eval/loss"}
    assert s["loss"] == pytest.approx(3.5) and s["train/loss"] == pytest.approx(7.0) and s["train/steps"] == 7.0
    assert s["eval/eval/loss"] == pytest.approx(3.5)
    h = s["x"]
    assert (h["min"], h["max"], h["num"], h["sum"], h["sum_squares"]) == (-1.0, 9.0, 4.0, 14.0, 102.0)
    assert len(h["bucket"]) == len(h["bucket_limit"]) == 30 and h["bucket"].sum() == 4
    assert np.all(np.diff(h["bucket_limit"]) > 0) and h["bucket_limit"][-1] >= 9.0
    edges = np.concatenate([[-1.0], h["bucket_limit"]])
    for v in [2.0, 4.0, 9.0, -1.0]:  # each value counted in the bucket whose range holds it
        i = min(np.searchsorted(edges, v, side="right") - 1, 29)
        assert h["bucket"][i] >= 1
    assert first["summary"]["loss"] == pytest.approx(2.0)
    assert third["summary"] == {"python_value": 0.25}


def test_summary_edge_cases_and_what_is_not_recorded(tmp_path):
    x = tf.placeholder(tf.float32, [None])
    h = tf.summary.histogram("empty", x)
    same = tf.summary.histogram("same", tf.constant([2.0, 2.0, 2.0]))
    for make, kind in [(lambda: tf.summary.image("img", tf.zeros([1, 2, 2, 1])), "image"),
                       (lambda: tf.summary.audio("a", tf.zeros([1, 8]), 8000), "audio"),
                       (lambda: tf.summary.text("t", tf.zeros([1])), "text"),
                       (lambda: tf.summary.tensor_summary("ts", tf.zeros([1])), "tensor_summary")]:
        with pytest.raises(tf.errors.UnimplementedError, match=f"tf.summary.{kind} is not supported.*scalar"):
            make()
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a scalar"):
        tf.summary.scalar("bad", tf.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="summary tensors"):
        tf.summary.merge([x])
    merged = tf.summary.merge([h, same])
    with tf.Session() as sess:
        summary = sess.run(merged, {x: np.zeros(0, np.float32)})
    values = _summary_values(summary.tobytes())
    assert values["empty"]["num"] == 0 and values["empty"]["min"] == 0 and values["empty"]["bucket"].sum() == 0
    assert values["same"]["num"] == 3 and values["same"]["bucket"].sum() == 3
    assert np.all(np.diff(values["same"]["bucket_limit"]) > 0)
    assert set(values) == {"empty", "same"}
    with tf.summary.FileWriter(str(tmp_path / "w"), filename_suffix=".v2") as writer:
        writer.add_summary(None)  # TF ignores None
        writer.add_summary(summary.tobytes(), global_step=5)
        with pytest.raises(TypeError, match="uint8 array"):
            writer.add_summary(3.0)
    assert glob.glob(str(tmp_path / "w" / "events.out.tfevents.*.v2"))
    with pytest.raises(tf.errors.FailedPreconditionError, match="closed"):
        writer.add_summary(summary, 6)
    writer.reopen()
    writer.add_summary(summary, 6)
    writer.close()
