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
    for make, kind in [(lambda: tf.summary.text("t", tf.zeros([1])), "text"),
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


# ---- images and audio: decoded here from the BMP and WAV formats --------------------------------

def _media_values(summary):
    """{tag: {field: value}} of the image (field 4) or audio (field 6) values of a serialized Summary."""
    out = {}
    for _, _, value in _fields(summary):
        parts = {f: v for f, _, v in _fields(value)}
        media = parts.get(4, parts.get(6))
        out[parts[1].decode()] = {f: v for f, _, v in _fields(media)}
    return out


def _decode_bmp(data):
    """[h, w, 4] RGBA of a 32-bit uncompressed BMP, rows top first."""
    assert data[:2] == b"BM"
    size, _, _, offset = struct.unpack("<IHHI", data[2:14])
    header, w, h, planes, bpp, compression = struct.unpack("<IiiHHI", data[14:34])
    assert (size, offset, header, planes, bpp, compression) == (len(data), 54, 40, 1, 32, 0)
    bgra = np.frombuffer(data[offset:], np.uint8).reshape(h, w, 4)[::-1]
    return bgra[:, :, [2, 1, 0, 3]]


def _tf_image_uint8(img):
    """TF 1.x's NormalizeFloatImage of one [h, w, c] float image (red where a channel is not finite)."""
    finite = np.isfinite(img)
    vals = img[finite]
    lo, hi = (vals.min(), vals.max()) if vals.size else (np.inf, -np.inf)
    if lo < 0:
        peak = max(abs(lo), abs(hi))
        scale, offset = (0.0 if peak < 1e-6 else 127.0 / peak), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    out = (np.where(finite, img, 0).astype(np.float32) * np.float32(scale) + np.float32(offset)).astype(np.uint8)
    bad = ~finite.all(axis=2)
    out[bad] = np.array([255, 0, 0, 255][:img.shape[2]], np.uint8)
    return out


def test_image_summaries_are_bmp_images_of_tf1s_pixels(tmp_path):
    rng = np.random.RandomState(4)
    gray = rng.rand(5, 3, 4, 1).astype(np.float32)  # all positive: scaled so the largest is 255
    rgb = (rng.randn(2, 2, 3, 3) * 3).astype(np.float32)  # some negative: 0 at 128
    rgb[1, 0, 1, 2] = np.nan
    rgba = rng.randint(0, 256, size=(1, 2, 2, 4)).astype(np.uint8)
    x = tf.placeholder(tf.float32, [None, 3, 4, 1])
    with tf.name_scope("train"):
        s_gray = tf.summary.image("digits", x, max_outputs=3)
    tf.summary.image("rgb", tf.constant(rgb), max_outputs=1)  # both in the SUMMARIES collection merge_all reads
    tf.summary.image("rgba", tf.constant(rgba))
    merged = tf.summary.merge_all()
    with tf.Session() as sess:
        full = _media_values(sess.run(s_gray, {x: gray}).tobytes())
        two = _media_values(sess.run(s_gray, {x: gray[:2]}).tobytes())  # fewer images than max_outputs
        everything = sess.run(merged, {x: gray})
        with tf.summary.FileWriter(str(tmp_path)) as w:
            w.add_summary(everything, 3)
    assert sorted(full) == ["train/digits/image/0", "train/digits/image/1", "train/digits/image/2"]
    assert sorted(two) == ["train/digits/image/0", "train/digits/image/1"]
    for i in range(3):
        v = full[f"train/digits/image/{i}"]
        assert (v[1], v[2], v[3]) == (3, 4, 1)  # height, width, colorspace
        got = _decode_bmp(v[4])
        want = _tf_image_uint8(gray[i])
        np.testing.assert_array_equal(got[:, :, 0], want[:, :, 0])
        np.testing.assert_array_equal(got[:, :, 1], want[:, :, 0])
        assert np.all(got[:, :, 3] == 255)
    rgb_values = _media_values(everything.tobytes())
    assert set(rgb_values) >= {"rgb/image", "rgba/image/0"}  # max_outputs=1: no index, as TF
    np.testing.assert_array_equal(_decode_bmp(rgb_values["rgb/image"][4])[:, :, :3], _tf_image_uint8(rgb[0]))
    np.testing.assert_array_equal(_decode_bmp(rgb_values["rgba/image/0"][4]), rgba[0])
    (rec,) = [r for r in _records(glob.glob(str(tmp_path / "events.out.tfevents.*"))[0]) if b"rgba" in r]
    assert b"BM" in rec
    with pytest.raises(tf.errors.InvalidArgumentError, match="1, 3 or 4 channels"):
        tf.summary.image("two", tf.zeros([1, 2, 2, 2]))
    with pytest.raises(tf.errors.UnimplementedError, match="known statically"):
        tf.summary.image("dyn", tf.placeholder(tf.float32, [None, None, 4, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="rank 4"):
        tf.summary.image("flat", tf.zeros([2, 4]))


def test_nan_pixels_are_tf1s_bad_color():
    img = np.array([[[[0.5, 1.0, 0.0]], [[np.inf, 0.2, 0.2]]]], np.float32)  # [1, 2, 1, 3]
    s = tf.summary.image("bad", tf.constant(img))
    with tf.Session() as sess:
        (v,) = _media_values(sess.run(s).tobytes()).values()
    got = _decode_bmp(v[4])
    np.testing.assert_array_equal(got[1, 0], [255, 0, 0, 255])
    np.testing.assert_array_equal(got[0, 0, :3], _tf_image_uint8(img[0])[0, 0])


def _decode_wav(data):
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    riff_size, = struct.unpack("<I", data[4:8])
    fmt_len, pcm, channels, rate, byte_rate, align, bits = struct.unpack("<IHHIIHH", data[16:36])
    assert (riff_size, fmt_len, pcm, bits) == (len(data) - 8, 16, 1, 16)
    assert data[36:40] == b"data" and byte_rate == rate * channels * 2 and align == channels * 2
    size, = struct.unpack("<I", data[40:44])
    return rate, np.frombuffer(data[44:44 + size], "<i2").reshape(-1, channels)


def test_audio_summaries_are_16_bit_wav_files():
    rng = np.random.RandomState(5)
    mono = rng.uniform(-1.2, 1.2, size=(4, 50)).astype(np.float32)  # beyond [-1, 1]: clipped, as TF
    stereo = rng.uniform(-1, 1, size=(1, 30, 2)).astype(np.float32)
    rate = tf.placeholder(tf.float32, [])
    s_mono = tf.summary.audio("voice", tf.constant(mono), rate, max_outputs=2)
    s_stereo = tf.summary.audio("music", tf.constant(stereo), 22050, max_outputs=1)
    with tf.Session() as sess:
        values = _media_values(sess.run(tf.summary.merge([s_mono, s_stereo]), {rate: 16000.0}).tobytes())
    assert sorted(values) == ["music/audio", "voice/audio/0", "voice/audio/1"]
    for i in range(2):
        v = values[f"voice/audio/{i}"]
        assert struct.unpack("<f", v[1])[0] == 16000.0 and v[2] == 1 and v[3] == 50 and v[5] == b"audio/wav"
        r, pcm = _decode_wav(v[4])
        assert r == 16000
        want = np.clip(np.round(mono[i] * 32768.0), -32768, 32767).astype(np.int16)
        np.testing.assert_array_equal(pcm[:, 0], want)
    r, pcm = _decode_wav(values["music/audio"][4])
    assert r == 22050 and pcm.shape == (30, 2)
    np.testing.assert_array_equal(pcm, np.clip(np.round(stereo[0] * 32768.0), -32768, 32767).astype(np.int16))
    with pytest.raises(tf.errors.InvalidArgumentError, match="float samples"):
        tf.summary.audio("ints", tf.zeros([1, 4], tf.int32), 8000)

