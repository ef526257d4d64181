"""tf.summary as TF 1.x programs call it, recording nothing: shardflow writes no TensorBoard event files.

    tf.summary.scalar("loss", loss)
    merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter("/tmp/logs", sess.graph)   # warns once: nothing is written
    summary, _ = sess.run([merged, train_op])                  # summary is None
    writer.add_summary(summary, step)                          # does nothing

A migrating program keeps running and training, and is told (a UserWarning,
once per process, when its first FileWriter is made) that no summaries are
written. The summary ops are NoOps that compute nothing; merge_all and merge
follow TF's rules for what they return (None when there is nothing to merge),
and the run of a merged summary gives None where TF gives a serialized proto.
Fetch the tensors themselves to log or plot their values.
"""

import re
import warnings

from . import graph as _graph

__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all", "FileWriter",
           "SUMMARIES"]

SUMMARIES = "summaries"  # tf.GraphKeys.SUMMARIES

_warned = []


def _warn_once():
    if not _warned:
        _warned.append(True)
        warnings.warn("tf.summary.FileWriter writes nothing in shardflow: it has no TensorBoard event files, and "
                      "tf.summary ops record no values (fetch the tensors to log them yourself); see docs/PYTHON.md, "
                      "Coming from TensorFlow 1.x", UserWarning, stacklevel=3)


def _summary(name, tensor, collections, family):
    # The tensor is converted, so a wrong argument fails here as in TF; the op does not depend on it, so
    # it costs nothing to run.
    _graph.convert_to_tensor(tensor)
    g = _graph.get_default_graph()
    op = _graph.no_op(name=f"{family or ''}{name}".replace(" ", "_") or "summary")
    for key in (collections if collections is not None else [SUMMARIES]):
        g._collections.setdefault(key, []).append(op)
    return op


def scalar(name, tensor, collections=None, family=None):
    """A summary op of a scalar (a NoOp here: nothing is recorded)."""
    return _summary(name, tensor, collections, family)


def histogram(name, values, collections=None, family=None):
    """A summary op of a histogram of values (a NoOp here: nothing is recorded)."""
    return _summary(name, values, collections, family)


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """A summary op of images (a NoOp here: nothing is recorded)."""
    return _summary(name, tensor, collections, family)


def audio(name, tensor, sample_rate, max_outputs=3, collections=None, family=None):
    """A summary op of audio (a NoOp here: nothing is recorded)."""
    return _summary(name, tensor, collections, family)


def text(name, tensor, collections=None):
    """A summary op of text (a NoOp here; shardflow has no string tensors, so tensor must be numeric)."""
    return _summary(name, tensor, collections, None)


def tensor_summary(name, tensor, summary_description=None, collections=None, summary_metadata=None,
                   family=None, display_name=None):
    """A summary op of a tensor (a NoOp here: nothing is recorded)."""
    return _summary(name, tensor, collections, family)


def merge(inputs, collections=None, name=None):
    """One op running every summary op of inputs (TF 1.x's tf.summary.merge)."""
    g = _graph.get_default_graph()
    op = _graph.group(*inputs, name=name or "Merge/MergeSummary")
    for key in collections or []:
        g._collections.setdefault(key, []).append(op)
    return op


def merge_all(key=SUMMARIES, scope=None, name=None):
    """merge() of the default graph's summary ops in collection key; None when there are none (as TF)."""
    ops = _graph.get_default_graph()._collections.get(key, [])
    if scope is not None:
        ops = [op for op in ops if re.match(scope, op.name)]
    if not ops:
        return None
    return merge(ops, name=name)


class FileWriter:
    """TF 1.x's tf.summary.FileWriter(logdir, graph=None, ...), which writes nothing here.

    Every method is accepted and does nothing; the first FileWriter of a
    process warns that no event file is written. logdir is not created.
    """

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None, filename_suffix=None,
                 session=None):
        self._logdir = str(logdir)
        _warn_once()

    def get_logdir(self):
        return self._logdir

    def add_summary(self, summary, global_step=None):
        """Nothing: no summary is recorded."""

    def add_graph(self, graph, global_step=None, graph_def=None):
        """Nothing: no graph is recorded (Graph.save writes shardflow's GraphDef)."""

    def add_session_log(self, session_log, global_step=None):
        """Nothing."""

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        """Nothing (sf.RunOptions(trace_file=) writes a step's trace)."""

    def add_event(self, event):
        """Nothing."""

    def add_meta_graph(self, meta_graph_def, global_step=None):
        """Nothing."""

    def flush(self):
        """Nothing to flush."""

    def close(self):
        """Nothing to close."""

    def reopen(self):
        """Nothing to reopen."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

