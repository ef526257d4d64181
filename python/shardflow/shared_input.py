"""Sharing Criteo-format files among workers (sf.data's shared input; C++: shardflow/chunk_queue_ops.h).

    plan = sf.data.plan_criteo_chunks(files, 16 << 20)        # the same files give the same plan everywhere
    with g.device("/job:worker/task:0"):
        q = sf.data.chunk_queue(plan.num_chunks, num_epochs=1, lease_ms=30000, shared_name="chunks")
    inp = sf.data.shared_criteo_batch_queue(q, plan, worker=w, batch_size=512)
    ... the model on inp.label, inp.dense, inp.categorical; train = optimizer.minimize(loss) ...
    inp.report_trained_before(train)                          # the report gates the updates
    # a thread runs inp.enqueue until OutOfRangeError, then inp.close (on a cluster, an enqueue failing
    # with sf.data.is_moved(e) runs inp.release, again while that fails so, and goes on); each step:
    label, dense, cat, ticket, pos = sess.run([inp.label, inp.dense, inp.categorical, inp.ticket, inp.pos])
    try:
        sess.run([train, inp.trained], {..., inp.trained_ticket: ticket, inp.trained_pos: pos})
    except sf.errors.FailedPreconditionError as e:
        if not sf.data.is_lost_chunk(e): raise                # else: the batch is another worker's now
    # a worker leaving before the end runs inp.release

One chunk queue (an actor on the task it is placed on) hands the chunks out to
the workers with leases; each worker reads whole chunks into a row queue of
its own and reports the rows it trained in the step that trains them, before
the step's updates. A chunk whose worker released it or went silent for
lease_ms goes to another worker, which resumes after the last row reported
trained, so every line is trained once per epoch; a worker whose lease ended
has its step refused before it changes anything (is_lost_chunk). The details
and the errors are the C++ builders' (docs/USER_GUIDE.md, "Sharing the input
among workers").
"""

import collections

from . import _core
from . import errors
from . import graph as _graph

__all__ = ["CriteoChunkPlan", "SharedCriteoInput", "plan_criteo_chunks", "chunk_queue", "shared_criteo_batch_queue",
           "is_lost_chunk", "is_moved"]


class CriteoChunkPlan(collections.namedtuple("CriteoChunkPlan", ["files", "chunks"])):
    """The chunks of a list of files: chunks holds a (file index, begin, end) triple per chunk (end -1: to the
    end of the file)."""
    __slots__ = ()

    @property
    def num_chunks(self):
        return len(self.chunks) // 3


def plan_criteo_chunks(files, chunk_bytes):
    """Plans the chunks of files: plain files cut every chunk_bytes, gzip files whole. Raises NotFoundError or
    PermissionDeniedError naming a file that cannot be opened, InvalidArgumentError for no file or
    chunk_bytes < 1."""
    if isinstance(files, str):
        files = [files]
    out_files, chunks = _core.plan_criteo_chunks([str(f) for f in files], int(chunk_bytes))
    return CriteoChunkPlan(list(out_files), list(chunks))


def chunk_queue(num_chunks, num_epochs=1, lease_ms=30000, shared_name="chunks", graph=None):
    """A chunk queue handle: shared_name's num_chunks chunks handed out num_epochs times (<= 0: endless), a
    worker silent for lease_ms losing its chunks to others. Sessions and workers naming it on one task share
    it. Raises InvalidArgumentError for bad options or an empty name."""
    g = graph or _graph.get_default_graph()
    return _graph.Tensor(g, *_core.chunk_queue(g._g, int(num_chunks), int(num_epochs), int(lease_ms), shared_name))


class SharedCriteoInput:
    """One worker's input from a chunk queue. Tensors: label [n], dense [n, 13], categorical [n, 26], ticket and
    pos [n] (each row's chunk ticket and line: feed them to trained_ticket and trained_pos in the training
    step). Operations: enqueue (takes a chunk, waiting while others hold the last ones, reads it into the row
    queue; OutOfRangeError once every chunk of every epoch is done), close and cancel (the row queue; cancel
    also fails a waiting enqueue), trained (reports the fed rows trained), release (gives this worker's chunks
    back)."""

    _TENSORS = ("label", "dense", "categorical", "ticket", "pos", "trained_ticket", "trained_pos")
    _OPS = ("enqueue", "close", "cancel", "trained", "release")

    def __init__(self, graph, parts):
        self.graph = graph
        for k in self._TENSORS:
            setattr(self, k, _graph.Tensor(graph, *parts[k]))
        for k in self._OPS:
            setattr(self, k, graph._op(parts[k]))

    def report_trained_before(self, train):
        """Makes every update train runs (an Operation; through the groups minimize returns) wait for
        self.trained, so a refused report fails the step before any variable changes. Run self.trained in
        the same run as train. Raises InvalidArgumentError when trained already runs after train."""
        if not isinstance(train, _graph.Operation) or train.graph is not self.graph:
            raise errors.InvalidArgumentError(f"report_trained_before needs an Operation of this input's graph, "
                                              f"got {train!r}")
        _core.report_trained_before(self.graph._g, self.trained._node, train._node)


def shared_criteo_batch_queue(queue, plan, worker, batch_size, capacity=0, skip_malformed=True,
                              max_line_bytes=0, name="shared_input"):
    """The reader, row queue and reports of `worker` (an int distinct among the queue's workers) over the
    chunk queue `queue`, whose chunks are plan's: batches of up to batch_size rows (fewer when fewer are
    ready), a row queue of capacity rows (0: 4 batches); a malformed line (or one over max_line_bytes, 0: the
    reader's 64 KiB) is skipped, or with skip_malformed False fails the enqueue naming file and line. The
    chunk queue's ops go on its device, the rest on
    the device scope in force. Raises InvalidArgumentError for a bad batch size or a queue of another graph."""
    if not isinstance(queue, _graph.Tensor):
        raise errors.InvalidArgumentError(f"shared_criteo_batch_queue needs a chunk_queue handle, got {queue!r}")
    if not isinstance(plan, CriteoChunkPlan):
        raise errors.InvalidArgumentError(f"plan must come from plan_criteo_chunks, got {type(plan).__name__}")
    g = queue.graph
    parts = _core.shared_criteo_batch_queue(g._g, queue._ref(), list(plan.files), list(plan.chunks), int(worker),
                                            int(batch_size), int(capacity), bool(skip_malformed),
                                            int(max_line_bytes), name)
    return SharedCriteoInput(g, parts)


def is_lost_chunk(error):
    """True for a step refused because the worker's lease on a chunk of its batch ended (the chunk went to
    another worker): with report_trained_before the step changed nothing, so the worker drops the batch."""
    return isinstance(error, errors.FailedPreconditionError) and _core.LOST_CHUNK_TEXT in str(error)


def is_moved(error):
    """True for a run that failed because the cluster moved a part of it to another node (its slot moved or
    failed over: AbortedError naming a stale shard map) or lost that node (UnavailableError). For an enqueue
    of the shared input the worker's row queue may be gone with rows in it: run release (its chunks go back
    and are read again from after their trained rows) and go on enqueueing; the batches it still trains from
    before are refused (is_lost_chunk) and dropped."""
    if isinstance(error, errors.UnavailableError):
        return True
    return isinstance(error, errors.AbortedError) and _core.STALE_SHARD_MAP_TEXT in str(error)
