"""tf.summary as TF 1.x programs use it, writing TensorBoard event files.

    tf.summary.scalar("loss", loss)
    tf.summary.histogram("weights", w)
    merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter("/tmp/logs", sess.graph)
    summary, _ = sess.run([merged, train_op])      # a serialized Summary protocol buffer
    writer.add_summary(summary, step)              # an event in /tmp/logs/events.out.tfevents.*

As in TF 1.x, a summary op's output is a serialized Summary protocol buffer,
made in the graph: here a uint8 vector (shardflow has no string tensors; TF
gives a string scalar), built from the value's bytes (tf.bitcast) and the
constant bytes of the tag. merge concatenates them (the protocol buffer
encoding merges concatenated messages), and FileWriter writes TensorFlow's
event files (TFRecord framing with masked CRC-32C, Event records), which
TensorBoard reads. add_summary also takes bytes and tf.Summary objects.

What differs: a histogram has 30 equal-width buckets between the values'
minimum and maximum (TF uses fixed exponential buckets; TensorBoard draws
either); images are BMP files (32-bit BGRA, which TensorBoard shows; TF
writes PNG), audio is 16-bit PCM WAV as TF writes it; text and tensor
summaries raise UnimplementedError naming themselves (shardflow has no string
tensors and writes no TensorProto summaries). FileWriter records no graph
(shardflow's graph is not a TF GraphDef; Graph.save writes shardflow's).
Tags are the summary's name under the enclosing name scopes, made unique as
TF 1.x does ("loss", "loss_1"); with a family, "family/family/name" as TF 1.x.
"""

import atexit
import os
import re
import socket
import struct
import threading
import time

import numpy as np

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import ops
from . import tf_api as _tf
from .control_flow import cond

__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all", "FileWriter",
           "FileWriterCache", "Summary", "SUMMARIES"]

SUMMARIES = "summaries"  # tf.GraphKeys.SUMMARIES
_HISTOGRAM_BUCKETS = 30

# ---- the protocol buffer wire format, for Summary and Event ------------------------------------

def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field, wire):
    return _varint((field << 3) | wire)


def _delimited(field, payload):
    return _key(field, 2) + _varint(len(payload)) + payload


def _summary_value_bytes(tag, simple_value):
    """A serialized Summary with one Value {tag, simple_value} (float32)."""
    value = _delimited(1, tag.encode()) + _key(2, 5) + struct.pack("<f", float(simple_value))
    return _delimited(1, value)


# ---- summary ops -------------------------------------------------------------------------------

class _TagScope:
    """TF 1.x's summary_scope: a name scope "family/name" (made unique as name scopes are); entering it gives
    the tag, the scope's name, with "family/" before it again when there is a family (TensorBoard's tab)."""

    def __init__(self, g, name, family):
        self._family = re.sub(r"[^A-Za-z0-9_.\-/]", "_", family) if family else None
        clean = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)
        self._cm = g.name_scope(f"{self._family}/{clean}" if self._family else clean)

    def __enter__(self):
        scope = self._cm.__enter__().rstrip("/")
        return f"{self._family}/{scope}" if self._family else scope

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def _tag_scope(name, family):
    """(graph, a _TagScope) for a summary called name."""
    if not isinstance(name, str) or not name:
        raise errors.InvalidArgumentError(f"a summary name must be a non-empty string, got {name!r}")
    g = _graph.get_default_graph()
    return g, _TagScope(g, name, family)


def _bytes(g, data, name="bytes"):
    return _graph.constant(np.frombuffer(bytes(data), np.uint8).copy(), dtype=_dt.uint8, name=name)


def _bitcast(x, dtype):
    return ops.add_op("Bitcast", [x], {"type": dtype})


def _add_to_collections(g, out, collections):
    for key in (collections if collections is not None else [SUMMARIES]):
        g._collections.setdefault(key, []).append(out)
    return out


def scalar(name, tensor, collections=None, family=None):
    """A serialized Summary (uint8 [n]) of the scalar tensor's value as float32, tagged by name."""
    g, scope = _tag_scope(name, family)
    with g.as_default(), scope as tag:
        t = _graph.convert_to_tensor(tensor)
        if t.shape.rank not in (None, 0) and not (t.shape.rank == 1 and t.shape[0] == 1):
            raise errors.InvalidArgumentError(f"tf.summary.scalar({name!r}) needs a scalar, got shape {t.shape}")
        if not (t.dtype.is_floating or t.dtype.is_integer or t.dtype == _dt.bool_):
            raise errors.InvalidArgumentError(f"tf.summary.scalar({name!r}) needs a numeric value, got {t.dtype.name}")
        value = _tf.reshape(_tf.cast(t, _dt.float32), [])
        head = _summary_value_bytes(tag, 0.0)[:-4]  # everything before the float's 4 bytes
        out = _tf.concat([_bytes(g, head), _bitcast(value, _dt.uint8)], 0, name="ScalarSummary")
    return _add_to_collections(g, out, collections)


def histogram(name, values, collections=None, family=None):
    """A serialized Summary (uint8 [n]) of a histogram of values: min, max, count, sum, sum of squares and
    30 equal-width buckets between the minimum and the maximum (TF's buckets are exponential)."""
    g, scope = _tag_scope(name, family)
    k = _HISTOGRAM_BUCKETS
    with g.as_default(), scope as tag:
        v = _graph.convert_to_tensor(values)
        if not (v.dtype.is_floating or v.dtype.is_integer):
            raise errors.InvalidArgumentError(f"tf.summary.histogram({name!r}) needs numeric values, got {v.dtype.name}")
        v = _tf.reshape(_tf.cast(v, _dt.float64), [-1])
        n = _tf.size(v)
        empty = _tf.equal(n, 0)
        zero = _graph.constant(0.0, _dt.float64)
        lo = _tf.where(empty, zero, _tf.reduce_min(v))  # no values: 0, not the reductions' +-inf
        hi = _tf.where(empty, zero, _tf.reduce_max(v))
        width = _tf.maximum((hi - lo) / float(k), _graph.constant(1e-12, _dt.float64))
        idx = _tf.clip_by_value(_tf.cast(_tf.floor((v - lo) / width), _dt.int32), 0, k - 1)
        counts = _tf.unsorted_segment_sum(_tf.ones_like(v), idx, k)
        # bucket i holds (limit[i-1], limit[i]]; the last limit is the maximum (or past it, for equal values)
        limits = _tf.concat([lo + width * _graph.constant(np.arange(1, k, dtype=np.float64)),
                             _tf.reshape(_tf.maximum(hi, lo + width * float(k)), [1])], 0)
        stats = _tf.stack([lo, hi, _tf.cast(n, _dt.float64), _tf.reduce_sum(v), _tf.reduce_sum(v * v)])
        stat_bytes = _bitcast(stats, _dt.uint8)  # [5, 8]
        packed = 8 * k
        histo_len = 5 * 9 + 2 * (1 + len(_varint(packed)) + packed)
        value_head = _delimited(1, tag.encode()) + _key(5, 2) + _varint(histo_len)
        summary_head = _key(1, 2) + _varint(len(value_head) + histo_len) + value_head
        parts = [_bytes(g, summary_head)]
        for i in range(5):  # min, max, num, sum, sum_squares: fields 1-5, doubles
            parts += [_bytes(g, _key(i + 1, 1)), stat_bytes[i]]
        parts += [_bytes(g, _key(6, 2) + _varint(packed)), _tf.reshape(_bitcast(limits, _dt.uint8), [-1]),
                  _bytes(g, _key(7, 2) + _varint(packed)), _tf.reshape(_bitcast(counts, _dt.uint8), [-1])]
        out = _tf.concat(parts, 0, name="HistogramSummary")
    return _add_to_collections(g, out, collections)


def _not_recorded(kind, why):
    """Raises UnimplementedError naming tf.summary.<kind>, why shardflow does not write it and what it writes."""
    raise errors.UnimplementedError(
        f"tf.summary.{kind} is not supported: {why}. shardflow writes tf.summary.scalar, histogram, image and "
        "audio (merged by tf.summary.merge/merge_all into a tf.summary.FileWriter); remove this summary or log "
        "the value as a scalar")


def _value_head(tag, field, body_len):
    """The bytes of Summary{value: Value{tag, <field>: (body_len bytes that follow)}} before the body."""
    value_head = _delimited(1, tag.encode()) + _key(field, 2) + _varint(body_len)
    return _key(1, 2) + _varint(len(value_head) + body_len) + value_head


def _media(name, family, tensor, ranks, max_outputs, kind, encode):
    """One Value per item of tensor's batch up to max_outputs (tags "tag/<kind>/i", or "tag/<kind>" when
    max_outputs is 1, as TF 1.x), each encode(items, static dims) -> (head bytes, [batch, n] uint8 body)."""
    g, scope = _tag_scope(name, family)
    with g.as_default(), scope as tag:
        t = _graph.convert_to_tensor(tensor)
        if t.shape.rank not in ranks:
            raise errors.InvalidArgumentError(f"tf.summary.{kind}({name!r}) needs a tensor of rank "
                                              f"{' or '.join(map(str, ranks))}, got shape {t.shape}")
        dims = list(t.shape.dims[1:])
        if any(d is None for d in dims):
            raise errors.UnimplementedError(f"tf.summary.{kind}({name!r}) needs the sizes after the batch known "
                                            f"statically, got shape {t.shape}")
        max_outputs = int(max_outputs)
        if max_outputs < 1:
            raise errors.InvalidArgumentError(f"tf.summary.{kind}: max_outputs must be at least 1, got {max_outputs}")
        head, body = encode(t, dims)
        count = _tf.minimum(_tf.shape(t)[0], max_outputs)
        batch = t.shape[0]
        parts = []
        for i in range(max_outputs if batch is None else min(batch, max_outputs)):
            sub = f"{tag}/{kind}/{i}" if max_outputs > 1 else f"{tag}/{kind}"
            prefix = _value_head(sub, 4 if kind == "image" else 6, len(head) + int(body.shape[1])) + head
            item = lambda i=i, prefix=prefix: _tf.concat([_bytes(g, prefix), body[i]], 0)  # noqa: E731
            parts.append(item() if batch is not None else
                         cond(i < count, item, lambda: _graph.constant(np.zeros(0, np.uint8), dtype=_dt.uint8)))
        if not parts:  # a batch of none
            parts = [_graph.constant(np.zeros(0, np.uint8), dtype=_dt.uint8)]
        out = _tf.concat(parts, 0, name=f"{kind.capitalize()}Summary")
    return out


def _image_pixels(t, c):
    """[batch, h, w, c] uint8 by TF 1.x's rules: uint8 as it is; floats per image scaled so the largest value
    is 255 (all non-negative) or so 0 is at 128 and the largest magnitude at 127 (some negative), then cast
    (truncated); a pixel with a non-finite channel is TF's bad color (red, opaque)."""
    if t.dtype == _dt.uint8:
        return t
    if not t.dtype.is_floating:
        raise errors.InvalidArgumentError(f"tf.summary.image needs uint8 or float images, got {t.dtype.name}")
    x = _tf.cast(t, _dt.float32)
    finite = _tf.is_finite(x)
    inf = _graph.constant(np.float32(np.inf))
    lo = _tf.reduce_min(_tf.where(finite, x, _tf.zeros_like(x) + inf), axis=[1, 2, 3], keepdims=True)
    hi = _tf.reduce_max(_tf.where(finite, x, _tf.zeros_like(x) - inf), axis=[1, 2, 3], keepdims=True)
    negative = lo < 0.0
    peak = _tf.where(negative, _tf.maximum(_tf.abs(lo), _tf.abs(hi)), hi)
    tiny = peak < 1e-6
    scale = _tf.where(tiny, _tf.zeros_like(peak), _tf.where(negative, 127.0 / _tf.where(tiny, _tf.ones_like(peak), peak),
                                                               255.0 / _tf.where(tiny, _tf.ones_like(peak), peak)))
    offset = _tf.where(negative, _tf.zeros_like(peak) + 128.0, _tf.zeros_like(peak))
    good = _tf.cast(_tf.where(finite, x, _tf.zeros_like(x)) * scale + offset, _dt.uint8)
    pixel_ok = _tf.reduce_all(finite, axis=3, keepdims=True)
    bad = _graph.constant(np.array([255, 0, 0, 255][:c], np.uint8), dtype=_dt.uint8)
    return _tf.where(_tf.logical_and(pixel_ok, _tf.ones_like(good) > 0), good, _tf.zeros_like(good) + bad)


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """TF 1.x's tf.summary.image: a serialized Summary (uint8 [n]) with the first max_outputs images of the
    batch [batch, height, width, channels] (1, 3 or 4 channels; uint8 as they are, floats scaled as TF). Each
    is a BMP (32-bit BGRA, which TensorBoard shows; TF writes PNG). InvalidArgumentError for a wrong rank,
    dtype or channel count, UnimplementedError for a height, width or channel count not known statically."""
    def encode(t, dims):
        h, w, c = (int(d) for d in dims)
        if c not in (1, 3, 4):
            raise errors.InvalidArgumentError(f"tf.summary.image({name!r}) needs 1, 3 or 4 channels, got {c}")
        px = _image_pixels(t, c)
        order = {1: [0, 0, 0], 3: [2, 1, 0], 4: [2, 1, 0]}[c]  # BGR
        alpha = px[:, :, :, 3:4] if c == 4 else _tf.zeros_like(px[:, :, :, 0:1]) + np.uint8(255)
        bgra = _tf.concat([px[:, :, :, k:k + 1] for k in order] + [alpha], 3)
        by_row = _tf.transpose(bgra, [1, 0, 2, 3])  # BMP rows go bottom up
        rows = _tf.transpose(_tf.gather(by_row, list(range(h - 1, -1, -1))), [1, 0, 2, 3])
        size = h * w * 4
        bmp = (b"BM" + struct.pack("<IHHI", 54 + size, 0, 0, 54) +
               struct.pack("<IiiHHIIiiII", 40, w, h, 1, 32, 0, size, 2835, 2835, 0, 0))
        head = (_key(1, 0) + _varint(h) + _key(2, 0) + _varint(w) + _key(3, 0) + _varint(c) +
                _key(4, 2) + _varint(len(bmp) + size) + bmp)
        return head, _tf.reshape(rows, [-1, size])

    out = _media(name, family, tensor, (4,), max_outputs, "image", encode)
    return _add_to_collections(out.graph, out, collections)


def audio(name, tensor, sample_rate, max_outputs=3, collections=None, family=None):
    """TF 1.x's tf.summary.audio: a serialized Summary (uint8 [n]) with the first max_outputs clips of the
    batch [batch, frames] or [batch, frames, channels] (floats in [-1, 1]) as 16-bit PCM WAV files, as TF
    writes them; sample_rate in Hz (a number or a float scalar tensor). InvalidArgumentError for a wrong rank
    or dtype, UnimplementedError for frames or channels not known statically."""
    def encode(t, dims):
        if not t.dtype.is_floating:
            raise errors.InvalidArgumentError(f"tf.summary.audio({name!r}) needs float samples, got {t.dtype.name}")
        frames, channels = int(dims[0]), int(dims[1]) if len(dims) > 1 else 1
        x = _tf.reshape(_tf.cast(t, _dt.float32), [-1, frames * channels])
        pcm = _tf.cast(_tf.clip_by_value(_tf.round(x * 32768.0), -32768.0, 32767.0), _dt.int16)
        data = frames * channels * 2
        rate = _tf.reshape(_tf.cast(_graph.convert_to_tensor(sample_rate, dtype=_dt.float32), _dt.float32), [])
        rate_i = _tf.cast(rate, _dt.int32)
        rate_bytes = _bitcast(rate_i, _dt.uint8)
        byte_rate = _bitcast(rate_i * (channels * 2), _dt.uint8)
        riff = b"RIFF" + struct.pack("<I", 36 + data) + b"WAVE" + b"fmt " + struct.pack("<IHH", 16, 1, channels)
        mid = struct.pack("<HH", channels * 2, 16) + b"data" + struct.pack("<I", data)
        wav_len = 44 + data
        # Audio{sample_rate (float), num_channels, length_frames, encoded_audio_string (the WAV), content_type}
        before_rate = _key(1, 5)
        after_rate = (_key(2, 0) + _varint(channels) + _key(3, 0) + _varint(frames) + _key(4, 2) +
                      _varint(wav_len) + riff)
        tail = _delimited(5, b"audio/wav")
        g = t.graph
        samples = _tf.reshape(_bitcast(pcm, _dt.uint8), [-1, data])
        column = _tf.zeros_like(samples[:, :1])  # [clips, 1]: the same bytes for every clip, by broadcasting
        rate_f = _bitcast(rate, _dt.uint8)  # Audio.sample_rate, a float32
        per_clip = _tf.concat([rate_f, _bytes(g, after_rate), rate_bytes, byte_rate, _bytes(g, mid)], 0)
        body = _tf.concat([column + _tf.reshape(per_clip, [1, -1]), samples,
                           column + _tf.reshape(_bytes(g, tail), [1, -1])], 1)
        return before_rate, _tf.reshape(body, [-1, 4 + len(after_rate) + 8 + len(mid) + data + len(tail)])

    out = _media(name, family, tensor, (2, 3), max_outputs, "audio", encode)
    return _add_to_collections(out.graph, out, collections)


def text(name, tensor, collections=None):
    """TF 1.x's tf.summary.text: raises UnimplementedError (shardflow has no string tensors)."""
    _not_recorded("text", "shardflow has no string tensors")


def tensor_summary(name, tensor, summary_description=None, collections=None, summary_metadata=None,
                   family=None, display_name=None):
    """TF 1.x's tf.summary.tensor_summary: raises UnimplementedError (no TensorProto summaries are written)."""
    _not_recorded("tensor_summary", "shardflow does not write TensorProto summaries")


def merge(inputs, collections=None, name=None):
    """The summaries of inputs as one serialized Summary (uint8 [n]), as TF 1.x's tf.summary.merge."""
    inputs = [x for x in inputs if x is not None]
    for x in inputs:
        if not isinstance(x, _graph.Tensor) or x.dtype != _dt.uint8 or x.shape.rank != 1:
            raise TypeError(f"tf.summary.merge takes summary tensors (what tf.summary.scalar and the others "
                            f"return), got {x!r}")
    g = inputs[0].graph if inputs else _graph.get_default_graph()
    with g.as_default():
        if not inputs:
            out = _graph.constant(np.zeros(0, np.uint8), dtype=_dt.uint8, name=name or "Merge/MergeSummary")
        elif len(inputs) == 1:
            out = _graph.identity(inputs[0], name=name or "Merge/MergeSummary")
        else:
            out = _tf.concat(inputs, 0, name=name or "Merge/MergeSummary")
    for key in collections or []:
        g._collections.setdefault(key, []).append(out)
    return out


def merge_all(key=SUMMARIES, scope=None, name=None):
    """merge() of the default graph's summaries in collection key; None when there are none (as TF)."""
    items = _graph.get_default_graph()._collections.get(key, [])
    if scope is not None:
        items = [x for x in items if re.match(scope, x.name)]
    if not items:
        return None
    return merge(items, name=name)


# ---- tf.Summary, for summaries made in Python -------------------------------------------------

class Summary:
    """TF 1.x's tf.Summary for scalars: Summary(value=[Summary.Value(tag=..., simple_value=...)])."""

    class Value:
        def __init__(self, tag="", simple_value=0.0, **unsupported):
            if unsupported:
                raise errors.UnimplementedError(f"tf.Summary.Value({', '.join(sorted(unsupported))}=...) is not "
                                                "supported: only tag and simple_value")
            self.tag, self.simple_value = str(tag), float(simple_value)

    def __init__(self, value=None):
        self.value = list(value or [])

    def SerializeToString(self):  # noqa: N802 - TF's name
        return b"".join(_summary_value_bytes(v.tag, v.simple_value) for v in self.value)


# ---- event files ---------------------------------------------------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def _crc32c(data):
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data):
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _record(data):
    """One TFRecord: length, its masked CRC-32C, the data, its masked CRC-32C."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def _event(wall_time, step=None, summary=None, file_version=None):
    out = _key(1, 1) + struct.pack("<d", wall_time)
    if step is not None:
        out += _key(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _delimited(3, file_version.encode())
    if summary is not None:
        out += _delimited(5, summary)
    return out


def _summary_bytes(summary):
    if summary is None:
        return None
    if isinstance(summary, Summary):
        return summary.SerializeToString()
    if isinstance(summary, (bytes, bytearray)):
        return bytes(summary)
    if isinstance(summary, np.ndarray) and summary.dtype == np.uint8 and summary.ndim <= 1:
        return summary.tobytes()
    raise TypeError("add_summary takes what running a summary op gives (a uint8 array), bytes or a tf.Summary, "
                    f"got {type(summary).__name__}")


class FileWriter:
    """TF 1.x's tf.summary.FileWriter: writes events to logdir/events.out.tfevents.<time>.<host><suffix>.

    Events are buffered and written every flush_secs, at flush() and at close(); max_queue is accepted.
    The graph is not recorded (see the module's note).
    """

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None, filename_suffix=None,
                 session=None):
        self._logdir = str(logdir)
        self._flush_secs = float(flush_secs)
        self._suffix = filename_suffix or ""
        self._lock = threading.Lock()
        self._file = None
        self._open()

    def _open(self):
        os.makedirs(self._logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}{self._suffix}"
        self._path = os.path.join(self._logdir, name)
        self._file = open(self._path, "ab")
        self._last_flush = time.time()
        self._write(_event(time.time(), file_version="brain.Event:2"))

    def _write(self, event):
        with self._lock:
            if self._file is None:
                raise errors.FailedPreconditionError(f"the FileWriter of {self._logdir!r} is closed (reopen() it)")
            self._file.write(_record(event))
            if time.time() - self._last_flush >= self._flush_secs:
                self._file.flush()
                self._last_flush = time.time()

    def get_logdir(self):
        return self._logdir

    def add_summary(self, summary, global_step=None):
        """Writes an event holding summary (a run of a summary op, bytes or a tf.Summary) at global_step."""
        data = _summary_bytes(summary)
        if data is None:
            return
        self._write(_event(time.time(), step=global_step, summary=data))

    def add_event(self, event):
        """Writes a serialized Event (bytes) as it is."""
        if not isinstance(event, (bytes, bytearray)):
            raise TypeError(f"add_event takes a serialized Event (bytes), got {type(event).__name__}")
        self._write(bytes(event))

    def add_graph(self, graph, global_step=None, graph_def=None):
        """Records nothing: shardflow's graph is not a TensorFlow GraphDef (Graph.save writes shardflow's)."""

    def add_session_log(self, session_log, global_step=None):
        """Records nothing (session logs are not supported)."""

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        """Records nothing (sf.RunOptions(trace_file=) writes a step's trace)."""

    def add_meta_graph(self, meta_graph_def, global_step=None):
        """Records nothing."""

    def flush(self):
        with self._lock:
            if self._file is not None:
                self._file.flush()
                self._last_flush = time.time()

    def close(self):
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def reopen(self):
        """Opens a new event file after close() (nothing when open)."""
        if self._file is None:
            self._open()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileWriterCache:
    """TF 1.x's cache of one FileWriter per logdir."""

    _writers = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir):
        with FileWriterCache._lock:
            w = FileWriterCache._writers.get(str(logdir))
            if w is None:
                w = FileWriterCache._writers[str(logdir)] = FileWriter(logdir)
            return w

    @staticmethod
    def clear():
        with FileWriterCache._lock:
            for w in FileWriterCache._writers.values():
                w.close()
            FileWriterCache._writers.clear()


atexit.register(FileWriterCache.clear)  # the cached writers' last events reach their files
