"""Training: optimizers (their updates run in the variables' shard actors),
checkpoints (Saver) and queue runners.

    train = sf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    saver = sf.train.Saver(keep_last=3)
    saver.save(sess, "/tmp/ckpt", global_step=100)
"""

import threading
import weakref

from . import _core
from . import errors
from . import graph as _graph
from .gradients import gradients

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer",
           "AdamOptimizer", "RMSPropOptimizer", "Saver", "QueueRunner", "list_checkpoints",
           "latest_checkpoint", "describe_checkpoint", "read_checkpoint_variable"]


def _var_refs(var_list, g):
    refs = []
    for v in var_list:
        shards = getattr(v, "shards", None)
        if shards is not None and not isinstance(v, _graph.Tensor):  # an EmbeddingTable
            refs.extend(_graph._ref_in(s, g, "var_list table shard") for s in shards)
        else:
            refs.append(_graph._ref_in(v, g, "var_list entry"))
    return refs


class Optimizer:
    """Builds the ops applying gradients to variables (the C++ sf::Optimizer)."""

    _kind = None

    def __init__(self, learning_rate, *params, flag=False):
        self.learning_rate = learning_rate
        self._params = params
        self._flag = flag

    def _core_optimizer(self, g):
        # One C++ optimizer per graph for this object: it names its slots, so
        # every minimize of this optimizer shares them and another optimizer's
        # are its own (as TensorFlow).
        cores = self.__dict__.setdefault("_cores", weakref.WeakKeyDictionary())
        lr = self.learning_rate
        numeric = not isinstance(lr, _graph.Tensor) and not hasattr(lr, "_as_graph_tensor")
        opt = cores.get(g)
        if opt is None:
            opt = _core.optimizer(self._kind, [float(lr) if numeric else 0.0] + [float(p) for p in self._params],
                                  self._flag)
            cores[g] = opt
        if not numeric:
            opt.set_learning_rate(g._g, _graph._ref_in(lr, g, "learning rate"))
        return opt

    def minimize(self, loss, var_list=None, name=None):
        """The Operation that computes gradients of loss and updates var_list (default: all trainable variables and tables)."""
        loss = _graph.convert_to_tensor(loss)
        g = loss.graph
        with g.as_default():
            nid = self._core_optimizer(g).minimize(g._g, loss._ref(), _var_refs(var_list or [], g))
        return g._op(nid)

    def compute_gradients(self, loss, var_list):
        """[(gradient, variable)] for loss; a variable loss does not depend on gets None."""
        grads = gradients(loss, list(var_list), allow_unconnected=True)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, name=None):
        """The Operation applying each (gradient, variable read) pair; pairs with a None gradient are skipped."""
        pairs = [(gr, v) for gr, v in grads_and_vars if gr is not None]
        if not pairs:
            raise errors.InvalidArgumentError("apply_gradients got no gradients")
        g = _graph.convert_to_tensor(pairs[0][0]).graph
        with g.as_default():
            nid = self._core_optimizer(g).apply_gradients(
                g._g, [(_graph._ref_in(gr, g, "gradient"), _graph._ref_in(v, g, "variable")) for gr, v in pairs])
        return g._op(nid)


class GradientDescentOptimizer(Optimizer):
    """var -= lr * grad (sparse for embedding tables)."""
    _kind = "GradientDescent"

    def __init__(self, learning_rate):
        super().__init__(learning_rate)


class MomentumOptimizer(Optimizer):
    """accum = momentum * accum + grad; var -= lr * accum (Nesterov optional)."""
    _kind = "Momentum"

    def __init__(self, learning_rate, momentum, use_nesterov=False):
        super().__init__(learning_rate, momentum, flag=use_nesterov)


class AdagradOptimizer(Optimizer):
    """Adagrad (sparse for embedding tables)."""
    _kind = "Adagrad"

    def __init__(self, learning_rate, initial_accumulator_value=0.1):
        super().__init__(learning_rate, initial_accumulator_value)


class AdamOptimizer(Optimizer):
    """Adam (lazy Adam for embedding tables)."""
    _kind = "Adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(learning_rate, beta1, beta2, epsilon)


class RMSPropOptimizer(Optimizer):
    """RMSProp with optional momentum."""
    _kind = "RMSProp"

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10):
        super().__init__(learning_rate, decay, momentum, epsilon)


class Saver:
    """Writes a session's checkpoints (every variable and slot, RocksDB) and restores them.

    The checkpoints are the C++ ones: `shardflow ckpt ls DIR` lists them and a
    C++ Session restores them.
    """

    def __init__(self, keep_last=5):
        self.keep_last = keep_last

    def save(self, sess, directory, global_step=0, incremental=False):
        """Checkpoints every variable of sess into directory; returns the checkpoint id (raises UnavailableError naming it)."""
        return sess._save(directory, global_step, self.keep_last, incremental)

    def restore(self, sess, directory, checkpoint_id=-1):
        """Assigns sess's variables from checkpoint_id (-1: newest readable); returns its global step."""
        return sess._restore(directory, checkpoint_id)


def list_checkpoints(directory):
    """Every checkpoint id in directory, oldest first; NotFoundError when it holds none."""
    return _core.checkpoint_list(str(directory))


def latest_checkpoint(directory):
    """The newest committed checkpoint id; NotFoundError when there is none."""
    return _core.checkpoint_latest(str(directory))


def describe_checkpoint(directory, checkpoint_id):
    """{id, global_step, parent, variables: [(name, dtype number, shape)]} of a checkpoint."""
    return _core.checkpoint_describe(str(directory), int(checkpoint_id))


def read_checkpoint_variable(directory, checkpoint_id, name):
    """One variable's value in a checkpoint, as a NumPy array; NotFoundError naming it."""
    return _core.checkpoint_read(str(directory), int(checkpoint_id), name)


class QueueRunner:
    """Keeps queues fed: `threads` Python threads run enqueue_op (steps release the GIL) until stopped.

    feed_fn(thread_index), when given, returns each step's feed_dict and raises
    StopIteration (or sf.errors.OutOfRangeError) when input is exhausted. Once
    every thread has ended normally close_op runs, so consumers see
    OutOfRangeError after the last element.
    """

    def __init__(self, enqueue_op, threads=1, feed_fn=None, close_op=None, cancel_op=None):
        self.enqueue_op = enqueue_op
        self.threads = int(threads)
        self.feed_fn = feed_fn
        self.close_op = close_op
        self.cancel_op = cancel_op
        self._stop = threading.Event()
        self._threads = []
        self._errors = []
        self._lock = threading.Lock()
        self._ended = 0
        self.steps = 0

    def start(self, sess):
        """Starts the threads; FailedPreconditionError if already started."""
        if self._threads:
            raise errors.FailedPreconditionError("this QueueRunner was already started")
        self._sess = sess
        for i in range(self.threads):
            t = threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"sf-queue-runner-{i}")
            self._threads.append(t)
            t.start()
        return self._threads

    def _loop(self, i):
        normal = False
        try:
            while not self._stop.is_set():
                try:
                    feeds = self.feed_fn(i) if self.feed_fn else None
                except (StopIteration, errors.OutOfRangeError):
                    normal = True
                    break
                try:
                    self._sess.run(self.enqueue_op, feed_dict=feeds)
                except (errors.OutOfRangeError, errors.AbortedError):
                    normal = True  # the queue was closed
                    break
                with self._lock:
                    self.steps += 1
            else:
                normal = True
        except Exception as e:  # noqa: BLE001 - reported by join()
            with self._lock:
                self._errors.append(e)
        finally:
            with self._lock:
                self._ended += 1
                last = self._ended == self.threads
            if last and normal and not self._errors and self.close_op is not None and not self._stop.is_set():
                try:
                    self._sess.run(self.close_op)
                except errors.OpError as e:
                    with self._lock:
                        self._errors.append(e)

    def stop(self):
        """Asks every thread to end after its current step and runs cancel_op (to wake full-queue waits)."""
        self._stop.set()
        if self.cancel_op is not None:
            try:
                self._sess.run(self.cancel_op)
            except errors.OpError:
                pass  # the queue may be closed already

    def join(self, timeout=None):
        """Waits for the threads; raises the first error that was not the normal end of input."""
        for t in self._threads:
            t.join(timeout)
        if self._errors:
            raise self._errors[0]
