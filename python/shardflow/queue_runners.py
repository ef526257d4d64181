"""TF 1.x's threads for queue input: tf.train.Coordinator, QueueRunner, add_queue_runner, start_queue_runners.

    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    try:
        while not coord.should_stop():
            sess.run(train_op)
    except tf.errors.OutOfRangeError:
        pass                          # the input's epochs are done
    finally:
        coord.request_stop()
    coord.join(threads)

Each QueueRunner thread runs one enqueue op in a loop (a step releases the GIL
while it waits on a full queue). An enqueue op that raises OutOfRangeError (its
own input is exhausted) ends its thread; when the last thread of a runner ends
so, the runner runs close_op, and consumers see OutOfRangeError once the queue
is drained. The semantics, names and defaults are TensorFlow 1.x's
(tensorflow/python/training/coordinator.py and queue_runner_impl.py); one
difference: an enqueue on a closed queue raises AbortedError here where
TensorFlow raises CancelledError (shardflow has no CANCELLED code). One
addition, for a cluster: restart_op (say a shared input's release) runs when
an enqueue failed because the cluster moved or lost a part of it
(sf.data.is_moved), and the thread goes on, as C++'s
QueueRunnerOptions::restart_target.
"""

import contextlib
import sys
import threading
import time
import weakref

from . import errors
from . import graph as _graph
from . import shared_input as _shared_input

__all__ = ["Coordinator", "QueueRunner", "add_queue_runner", "start_queue_runners", "QUEUE_RUNNERS"]

QUEUE_RUNNERS = "queue_runners"  # tf.GraphKeys.QUEUE_RUNNERS


class Coordinator:
    """Lets threads ask each other to stop, and join them (TF 1.x's tf.train.Coordinator).

    Thread-safe. request_stop(ex) records the first exception given (except a
    clean_stop_exception_types one, by default OutOfRangeError, which is a clean
    stop); join() re-raises it after the threads end.
    """

    def __init__(self, clean_stop_exception_types=None):
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (errors.OutOfRangeError,)
        self._clean_stop_exception_types = tuple(clean_stop_exception_types)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info_to_raise = None
        self._joined = False
        self._registered_threads = set()

    def _filter_exception(self, ex):
        value = ex[1] if isinstance(ex, tuple) else ex
        return None if isinstance(value, self._clean_stop_exception_types) else ex

    def request_stop(self, ex=None):
        """Asks the threads to stop; ex (an exception or a sys.exc_info() triple) is re-raised by join().

        After join() has returned, a request with an exception raises it at once (TF's rule)."""
        with self._lock:
            ex = self._filter_exception(ex)
            if self._joined:
                if isinstance(ex, tuple):
                    raise ex[1].with_traceback(ex[2])
                if ex is not None:
                    raise ex
            if not self._stop_event.is_set():
                if ex is not None and self._exc_info_to_raise is None:
                    self._exc_info_to_raise = ex if isinstance(ex, tuple) else (type(ex), ex, ex.__traceback__)
                self._stop_event.set()

    def clear_stop(self):
        """Forgets a stop request and its exception, so threads may start again."""
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            self._stop_event.clear()

    def should_stop(self):
        """True once a stop was requested."""
        return self._stop_event.is_set()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """A context in which an exception requests a stop with it (and is not re-raised)."""
        try:
            yield
        except BaseException:  # noqa: BLE001 - TF's rule: every exception stops the coordinator
            self.request_stop(ex=sys.exc_info())

    def wait_for_stop(self, timeout=None):
        """Waits until a stop is requested or timeout seconds pass; True if a stop was requested."""
        return self._stop_event.wait(timeout)

    def register_thread(self, thread):
        """Adds thread to those join() waits for."""
        with self._lock:
            self._registered_threads.add(thread)

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Waits until the threads (given and registered) end or a stop is requested, then gives them
        stop_grace_period_secs to end; re-raises the exception given to request_stop, else raises
        RuntimeError naming the threads still alive (unless ignore_live_threads)."""
        with self._lock:
            threads = list(self._registered_threads.union(threads or []))
        while any(t.is_alive() for t in threads) and not self.wait_for_stop(0.05):
            pass
        deadline = time.monotonic() + float(stop_grace_period_secs)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stragglers = [t.name for t in threads if t.is_alive()]
        with self._lock:
            self._joined = True
            self._registered_threads = set()
            if self._exc_info_to_raise:
                _, value, tb = self._exc_info_to_raise
                raise value.with_traceback(tb)
            if stragglers and not ignore_live_threads:
                raise RuntimeError("Coordinator stopped with threads still running: " + " ".join(stragglers))

    @property
    def joined(self):
        return self._joined

    def raise_requested_exception(self):
        """Raises the exception given to request_stop, if any."""
        with self._lock:
            if self._exc_info_to_raise:
                _, value, tb = self._exc_info_to_raise
                raise value.with_traceback(tb)


class QueueRunner:
    """Holds a queue and the enqueue ops that fill it; create_threads runs each op in its own thread
    (TF 1.x's tf.train.QueueRunner(queue, enqueue_ops, close_op=None, cancel_op=None)).

    close_op (default queue.close()) runs when the last thread ends because an
    enqueue raised one of queue_closed_exception_types (default OutOfRangeError);
    cancel_op (default queue.close(cancel_pending_enqueues=True)) runs once the
    coordinator is asked to stop, to free threads waiting on a full queue.
    restart_op (shardflow's; default None) runs when an enqueue failed because
    the cluster moved or lost a part of it (sf.data.is_moved: the queue it
    filled may be gone with what it held), and the thread goes on enqueueing;
    for a shared input it is the input's release, which hands the worker's
    chunks back so their untrained rows are read again. A restart_op that fails
    so runs again; after max_restarts such failures in a row (no enqueue
    passing between) the thread ends with the last one.
    """

    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None, queue_runner_def=None, import_scope=None,
                 restart_op=None, max_restarts=20):
        if queue_runner_def is not None:
            raise errors.UnimplementedError("QueueRunner(queue_runner_def=) is not supported: shardflow writes "
                                            "no MetaGraph; build the QueueRunner from its queue and enqueue ops")
        if queue is None or not enqueue_ops:
            raise ValueError("Must provide queue and enqueue_ops.")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else queue.close(cancel_pending_enqueues=True)
        if queue_closed_exception_types is None:
            queue_closed_exception_types = (errors.OutOfRangeError,)
        if not queue_closed_exception_types or not all(
                isinstance(t, type) and issubclass(t, errors.OpError) for t in queue_closed_exception_types):
            raise TypeError("queue_closed_exception_types, when provided, must be a tuple of tf.error types, "
                            f"but saw: {queue_closed_exception_types}")
        self._queue_closed_exception_types = tuple(queue_closed_exception_types)
        if not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be a non-negative int, got {max_restarts!r}")
        self._restart_op = restart_op
        self._max_restarts = max_restarts
        self._lock = threading.Lock()
        self._runs_per_session = weakref.WeakKeyDictionary()
        self._exceptions_raised = []

    queue = property(lambda self: self._queue)
    enqueue_ops = property(lambda self: self._enqueue_ops)
    close_op = property(lambda self: self._close_op)
    cancel_op = property(lambda self: self._cancel_op)
    restart_op = property(lambda self: self._restart_op)
    queue_closed_exception_types = property(lambda self: self._queue_closed_exception_types)

    @property
    def exceptions_raised(self):
        """Exceptions the threads raised when run without a coordinator."""
        return self._exceptions_raised

    @property
    def name(self):
        return self._queue.queue_ref.op.name

    def _restart(self, sess, coord, why, in_a_row):
        """Runs restart_op after `why` moved the cluster under an enqueue, again while it fails so; the
        restarts in a row so far, or the last such error re-raised past max_restarts of them."""
        while True:
            in_a_row += 1
            if in_a_row > self._max_restarts:
                raise why
            if coord is not None and coord.should_stop():
                return in_a_row
            try:
                sess.run(self._restart_op)
                return in_a_row
            except errors.OpError as e:
                # The release may meet the same move (its part is refused at the old holder): it runs
                # again on the new map; left undone, the worker's chunks stay leased to a reader gone.
                if not _shared_input.is_moved(e):
                    raise
                why = e

    def _run(self, sess, enqueue_op, coord):
        decremented = False
        restarts_in_a_row = 0
        try:
            while True:
                if coord is not None and coord.should_stop():
                    break
                try:
                    sess.run(enqueue_op)
                    restarts_in_a_row = 0
                except self._queue_closed_exception_types:
                    with self._lock:
                        self._runs_per_session[sess] -= 1
                        decremented = True
                        last = self._runs_per_session[sess] == 0
                    if last:
                        try:
                            sess.run(self._close_op)
                        except errors.OpError:
                            pass  # TF ignores it too: the queue may be closed already
                    return
                except errors.OpError as e:
                    if self._restart_op is None or not _shared_input.is_moved(e):
                        raise
                    restarts_in_a_row = self._restart(sess, coord, e, restarts_in_a_row)
        except Exception as e:  # noqa: BLE001 - handed to the coordinator, or recorded and re-raised (TF's rule)
            if coord is not None:
                coord.request_stop(e)
            else:
                with self._lock:
                    self._exceptions_raised.append(e)
                raise
        finally:
            if not decremented:
                with self._lock:
                    self._runs_per_session[sess] -= 1

    def _close_on_stop(self, sess, coord):
        coord.wait_for_stop()
        try:
            sess.run(self._cancel_op)
        except errors.OpError:
            pass  # the queue may be closed already

    def create_threads(self, sess, coord=None, daemon=False, start=False):
        """The threads running the enqueue ops in sess (one each, plus one running cancel_op once coord
        stops); [] if this runner's threads already run in sess."""
        with self._lock:
            if self._runs_per_session.get(sess, 0) > 0:
                return []
            self._runs_per_session[sess] = len(self._enqueue_ops)
            self._exceptions_raised = []
        threads = [threading.Thread(target=self._run, args=(sess, op, coord),
                                    name=f"QueueRunnerThread-{self.name}-{i}")
                   for i, op in enumerate(self._enqueue_ops)]
        if coord is not None:
            threads.append(threading.Thread(target=self._close_on_stop, args=(sess, coord),
                                            name=f"QueueRunnerThread-{self.name}-close_on_stop"))
        for t in threads:
            if coord is not None:
                coord.register_thread(t)
            t.daemon = bool(daemon)
            if start:
                t.start()
        return threads


def add_queue_runner(qr, collection=QUEUE_RUNNERS):
    """Adds qr to the default graph's collection (what start_queue_runners starts)."""
    g = _graph.get_default_graph()
    g._collections.setdefault(collection, []).append(qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True, collection=QUEUE_RUNNERS):
    """Creates (and starts) the threads of every QueueRunner in sess.graph's collection; returns them."""
    if sess is None:
        from .session import get_default_session
        sess = get_default_session()
        if sess is None:
            raise ValueError("Cannot start queue runners: No default session is registered. Use `with "
                             "sess.as_default()` or pass an explicit session to tf.start_queue_runners(sess=sess)")
    threads = []
    for qr in list(sess.graph._collections.get(collection, [])):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads
