"""Training: optimizers (their updates run in the variables' shard actors),
checkpoints (TF 1.x's Saver, shardflow's CheckpointSaver), queue runners (TF 1.x's QueueRunner and
Coordinator, shardflow's FeedRunner) and TF 1.x's queue input (batch, shuffle_batch, slice_input_producer).

    train = sf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    saver = sf.train.Saver(max_to_keep=3)
    path = saver.save(sess, "/tmp/model/ckpt", global_step=100)   # "/tmp/model/ckpt-100"
    saver.restore(sess, sf.train.latest_checkpoint("/tmp/model"))
"""

import ast
import os
import shutil
import threading
import time
import weakref

import numpy as np

from . import _core
from . import errors
from . import graph as _graph
from .gradients import gradients
from .queue_runners import Coordinator, QueueRunner, add_queue_runner, start_queue_runners
from .train_input import (limit_epochs, input_producer, range_input_producer, slice_input_producer, batch,  # noqa: F401
                          shuffle_batch, batch_join, shuffle_batch_join)
from . import queue_runners as queue_runner  # tf.train.queue_runner.QueueRunner, as TF 1.x
from .distribute import (ClusterSpec, Server, replica_device_setter, Supervisor,  # noqa: F401 - distribute.py
                         SyncReplicasOptimizer)
from .learning_rate_decay import (exponential_decay, inverse_time_decay, natural_exp_decay,  # noqa: F401
                                  polynomial_decay, piecewise_constant)
from .monitored_session import (SessionRunArgs, SessionRunContext, SessionRunValues, SessionRunHook,  # noqa: F401
                                SecondOrStepTimer, StopAtStepHook, NanLossDuringTrainingError, NanTensorHook,
                                LoggingTensorHook, CheckpointSaverHook, CheckpointSaverListener, SummarySaverHook,
                                StepCounterHook, FeedFnHook, FinalOpsHook, Scaffold, ChiefSessionCreator,
                                WorkerSessionCreator, MonitoredSession, SingularMonitoredSession,
                                MonitoredTrainingSession)

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer",
           "AdamOptimizer", "RMSPropOptimizer", "Saver", "CheckpointSaver", "CheckpointState", "FeedRunner",
           "list_checkpoints", "latest_checkpoint", "latest_checkpoint_id", "get_checkpoint_state",
           "checkpoint_exists", "describe_checkpoint", "read_checkpoint_variable", "get_global_step",
           "create_global_step", "get_or_create_global_step", "global_step",
           # TF 1.x's queue input (queue_runners.py, train_input.py)
           "Coordinator", "QueueRunner", "add_queue_runner", "start_queue_runners", "queue_runner", "limit_epochs",
           "input_producer", "range_input_producer", "slice_input_producer", "batch", "shuffle_batch", "batch_join",
           "shuffle_batch_join", "ClusterSpec", "Server", "replica_device_setter", "Supervisor",
           "SyncReplicasOptimizer", "exponential_decay",
           "inverse_time_decay", "natural_exp_decay", "polynomial_decay", "piecewise_constant"]


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
        sparse = self.__dict__.get("_sparse")
        opt.set_sparse_optimizer(sparse._core_optimizer(g) if sparse is not None else None)
        return opt

    def set_sparse_optimizer(self, sparse):
        """Has `sparse` (an Optimizer, or None for this one) make the sparse updates of the embedding tables this
        optimizer's minimize trains, with one backward pass for both (Adagrad on the tables, Adam on the rest, as
        DLRM); two minimize calls would each build the backward of everything between the loss and their
        variables. Returns self. InvalidArgumentError when sparse is not an Optimizer or is this one."""
        if sparse is not None and not isinstance(sparse, Optimizer):
            raise errors.InvalidArgumentError(
                f"set_sparse_optimizer takes an Optimizer or None, got {type(sparse).__name__}")
        if sparse is self:
            raise errors.InvalidArgumentError("set_sparse_optimizer: an optimizer cannot be its own sparse optimizer")
        self._sparse = sparse
        return self

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1, aggregation_method=None,
                 colocate_gradients_with_ops=False, name=None, grad_loss=None):
        """The Operation that computes gradients of loss and updates var_list (default: all trainable variables
        and tables); with global_step (a variable), it also adds 1 to it after the update, as TF 1.x."""
        if grad_loss is not None:
            raise errors.UnimplementedError("minimize(grad_loss=) is not supported")
        loss = _graph.convert_to_tensor(loss)
        g = loss.graph
        with g.as_default():
            nid = self._core_optimizer(g).minimize(g._g, loss._ref(), _var_refs(var_list or [], g))
        return _count_step(g, g._op(_after_enclosing_deps(g, nid)), global_step, name)

    def compute_gradients(self, loss, var_list=None, gate_gradients=1, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None):
        """[(gradient, variable)] for loss (var_list default: the trainable variables); a variable loss does not
        depend on gets None."""
        if grad_loss is not None:
            raise errors.UnimplementedError("compute_gradients(grad_loss=) is not supported")
        if var_list is None:
            from .variables import trainable_variables
            var_list = trainable_variables(_graph.convert_to_tensor(loss).graph)
        grads = gradients(loss, list(var_list), allow_unconnected=True)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The Operation applying each (gradient, variable read) pair; pairs with a None gradient are skipped.
        With global_step (a variable), it also adds 1 to it after the update, as TF 1.x."""
        pairs = [(gr, v) for gr, v in grads_and_vars if gr is not None]
        if not pairs:
            raise errors.InvalidArgumentError("apply_gradients got no gradients")
        g = _graph.convert_to_tensor(pairs[0][0]).graph
        with g.as_default():
            nid = self._core_optimizer(g).apply_gradients(
                g._g, [(_graph._ref_in(gr, g, "gradient"), _graph._ref_in(v, g, "variable")) for gr, v in pairs])
        return _count_step(g, g._op(_after_enclosing_deps(g, nid)), global_step, name)


def _after_enclosing_deps(g, nid):
    """nid, with it and the updates it groups running after the enclosing control_dependencies' ops.

    The C++ optimizer does not see Python's control_dependencies scopes; TF 1.x's idiom
    `with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)): train = opt.minimize(loss)`
    needs the updates (batch normalization's moving averages) to run with, and before, the variable updates.
    """
    deps = g._current_control_inputs()
    if not deps:
        return nid
    for node in [nid] + list(g._g.node_control_inputs(nid)):
        have = g._g.node_control_inputs(node)
        for c in deps:
            if c not in have and c != node:
                g._g.add_control_input(node, c)
    return nid


def _count_step(g, update, global_step, name):
    if global_step is None:
        return update
    if not hasattr(global_step, "assign_add"):
        raise errors.InvalidArgumentError(f"global_step must be a Variable (tf.train.get_or_create_global_step()), "
                                          f"got {type(global_step).__name__}")
    with g.as_default(), g.control_dependencies([update]):
        inc = global_step.assign_add(1)
    with g.as_default():
        return _graph.group(update, inc, name=name or "train")


def get_global_step(graph=None):
    """The graph's global step variable, or None (TF 1.x's tf.train.get_global_step)."""
    g = graph or _graph.get_default_graph()
    return g._global_step


def create_global_step(graph=None):
    """Makes the graph's global step: an int64 variable named "global_step", 0, not trainable."""
    from .variables import Variable
    g = graph or _graph.get_default_graph()
    if get_global_step(g) is not None:
        raise ValueError('"global_step" already exists.')
    with g.as_default():
        g._global_step = Variable(np.int64(0), name="global_step", trainable=False)
    return g._global_step


def get_or_create_global_step(graph=None):
    """The graph's global step variable, made if missing (TF 1.x's tf.train.get_or_create_global_step)."""
    return get_global_step(graph) or create_global_step(graph)


def global_step(sess, global_step_tensor):
    """The global step's value in sess, as an int (TF 1.x's tf.train.global_step)."""
    return int(sess.run(global_step_tensor))


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


class CheckpointSaver:
    """shardflow's own checkpoints: a directory of numbered checkpoints (every variable and slot, RocksDB).

    The checkpoints are the C++ ones: `shardflow ckpt ls DIR` lists them and a
    C++ Session restores them. (sf.train.Saver is TensorFlow 1.x's interface
    over the same checkpoints, one directory per checkpoint path.)
    """

    def __init__(self, keep_last=5):
        self.keep_last = keep_last

    def save(self, sess, directory, global_step=0, incremental=False):
        """Checkpoints every variable of sess into directory; returns the checkpoint id (raises UnavailableError naming it)."""
        return sess._save(directory, global_step, self.keep_last, incremental)

    def restore(self, sess, directory, checkpoint_id=-1):
        """Assigns sess's variables from checkpoint_id (-1: newest readable); returns its global step."""
        return sess._restore(directory, checkpoint_id)


class CheckpointState:
    """What get_checkpoint_state reads from a directory's "checkpoint" file (TF 1.x's CheckpointState)."""

    def __init__(self, model_checkpoint_path, all_model_checkpoint_paths):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = list(all_model_checkpoint_paths)

    def __repr__(self):
        return (f"model_checkpoint_path: {self.model_checkpoint_path!r}\n"
                + "".join(f"all_model_checkpoint_paths: {p!r}\n" for p in self.all_model_checkpoint_paths))


def _checkpoint_exists(path):
    return os.path.isdir(path) and os.path.exists(os.path.join(path, _MARK))


# Written into each checkpoint path by Saver.save: marks the directory as a TF-style checkpoint (a shardflow
# checkpoint directory holding one checkpoint), so max_to_keep deletes only what a Saver wrote.
_MARK = "shardflow_checkpoint"


def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _state_path(directory, latest_filename=None):
    return os.path.join(directory, latest_filename or "checkpoint")


def _write_state(directory, latest, all_paths, latest_filename=None):
    # TF 1.x's text format; a path relative to a relative directory is written relative to it.
    def rel(p):
        if not os.path.isabs(directory) and not os.path.isabs(p):
            return os.path.relpath(p, directory)
        return p
    lines = [f"model_checkpoint_path: {_quote(rel(latest))}"]
    lines += [f"all_model_checkpoint_paths: {_quote(rel(p))}" for p in all_paths]
    tmp = _state_path(directory, latest_filename) + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, _state_path(directory, latest_filename))


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """The CheckpointState of checkpoint_dir's "checkpoint" file, or None when there is none (TF 1.x's).

    Relative paths in it are taken relative to checkpoint_dir, as TensorFlow does.
    """
    path = _state_path(str(checkpoint_dir), latest_filename)
    if not os.path.isfile(path):
        return None
    latest, all_paths = None, []
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition(":")
            value = value.strip()
            if not value:
                continue
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise errors.DataLossError(f"{path}: cannot read the line {line.strip()!r}") from None
            if not os.path.isabs(value):
                value = os.path.join(str(checkpoint_dir), value)
            if key == "model_checkpoint_path":
                latest = value
            elif key == "all_model_checkpoint_paths":
                all_paths.append(value)
    if latest is None:
        raise errors.DataLossError(f"{path} names no model_checkpoint_path")
    return CheckpointState(latest, all_paths)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The path of the newest checkpoint saved into checkpoint_dir by a Saver, or None (TF 1.x's)."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None or not _checkpoint_exists(state.model_checkpoint_path):
        return None
    return state.model_checkpoint_path


def checkpoint_exists(checkpoint_prefix):
    """True when checkpoint_prefix is a checkpoint a Saver wrote (TF 1.x's tf.train.checkpoint_exists)."""
    return _checkpoint_exists(str(checkpoint_prefix))


class Saver:
    """TF 1.x's tf.train.Saver: save(sess, path, global_step) returns "path-step"; restore(sess, that path).

    Each checkpoint path is a directory holding one shardflow checkpoint of every
    variable and optimizer slot (where TensorFlow writes path.index and
    path.data-* files); the directory of the path gets TensorFlow's "checkpoint"
    state file, which latest_checkpoint and get_checkpoint_state read. The newest
    max_to_keep checkpoints this Saver wrote are kept (None or 0: all), plus one
    every keep_checkpoint_every_n_hours.

    shardflow checkpoints every variable: var_list may be omitted or hold every
    trainable variable (a list, as TF programs pass tf.global_variables() or
    tf.trainable_variables()); a subset or a {name: variable} dict raises
    UnimplementedError. A checkpoint restores into a session of a graph whose
    variables have the same names.
    """

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False, saver_def=None,
                 builder=None, defer_build=False, allow_empty=False, write_version=None, pad_step_number=False,
                 save_relative_paths=False, filename=None):
        if var_list is not None:
            _check_var_list(var_list)
        if reshape:
            raise errors.UnimplementedError(
                "Saver(reshape=True) is not supported: a variable restores into its own shape")
        self._max_to_keep = max_to_keep
        self._keep_every_s = float(keep_checkpoint_every_n_hours) * 3600.0
        self._next_keep_time = time.time() + self._keep_every_s
        self._pad_step_number = bool(pad_step_number)
        self._last = []  # [(path, time saved)], oldest first

    @property
    def last_checkpoints(self):
        """The paths of the checkpoints this Saver wrote and keeps, oldest first."""
        return [p for p, _ in self._last]

    def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
             write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
        """Checkpoints every variable of sess as save_path (or "save_path-<global_step>"); returns that path.

        global_step may be an int or a Tensor/Variable (run in sess). The
        directory gets the "checkpoint" state file unless write_state is False.
        No meta graph is written (Graph.save writes the graph).
        """
        save_path = os.fspath(save_path)
        if global_step is not None:
            if not isinstance(global_step, (int, np.integer)):
                global_step = int(sess.run(global_step))
            step = int(global_step)
            path = f"{save_path}-{step:08d}" if self._pad_step_number else f"{save_path}-{step}"
        else:
            step, path = 0, save_path
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)  # as TF's V2 checkpoint writer does
        if os.path.exists(path) and not _checkpoint_exists(path):
            raise errors.FailedPreconditionError(f"Saver.save: {path!r} exists and is not a checkpoint a Saver wrote")
        sess._save(path, step, 1, False)
        with open(os.path.join(path, _MARK), "w") as f:
            f.write("a TF 1.x-style checkpoint written by shardflow's tf.train.Saver\n")
        self._last = [(p, t) for p, t in self._last if p != path] + [(path, time.time())]
        self._drop_old()
        if write_state:
            _write_state(parent or os.curdir, path, self.last_checkpoints, latest_filename)
        return path

    def _drop_old(self):
        if not self._max_to_keep:
            return
        while len(self._last) > self._max_to_keep:
            path, saved = self._last.pop(0)
            if saved > self._next_keep_time:  # kept for keep_checkpoint_every_n_hours
                self._next_keep_time += self._keep_every_s
                continue
            if _checkpoint_exists(path):
                shutil.rmtree(path, ignore_errors=True)

    def restore(self, sess, save_path):
        """Assigns sess's variables from the checkpoint at save_path (a path save() returned)."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        save_path = os.fspath(save_path)
        if not _checkpoint_exists(save_path):
            raise ValueError(f"The passed save_path is not a valid checkpoint: {save_path}")
        sess._restore(save_path, -1)

    def recover_last_checkpoints(self, checkpoint_paths):
        """Takes checkpoint_paths (e.g. get_checkpoint_state(dir).all_model_checkpoint_paths) as saved by this Saver."""
        self._last = [(os.fspath(p), time.time()) for p in checkpoint_paths if _checkpoint_exists(os.fspath(p))]


def _check_var_list(var_list):
    if isinstance(var_list, dict):
        raise errors.UnimplementedError("Saver({name: variable}) is not supported: shardflow checkpoints every "
                                        "variable under its own name; give no var_list")
    given = list(var_list)
    if not given:
        raise errors.UnimplementedError("Saver(var_list=[]) is not supported: shardflow checkpoints every variable")
    g = _graph.convert_to_tensor(given[0]).graph
    names = {_graph.convert_to_tensor(v).name for v in given}
    from .variables import trainable_variables
    missing = [t.name for t in trainable_variables(g) if t.name not in names]
    if missing:
        raise errors.UnimplementedError(
            f"Saver(var_list=...) without {missing[:3]}: shardflow checkpoints every variable, so saving or "
            "restoring a subset is not supported; give no var_list, or every variable")


def list_checkpoints(directory):
    """Every checkpoint id in a CheckpointSaver directory, oldest first; NotFoundError when it holds none."""
    return _core.checkpoint_list(str(directory))


def latest_checkpoint_id(directory):
    """The newest committed checkpoint id of a CheckpointSaver directory; NotFoundError when there is none."""
    return _core.checkpoint_latest(str(directory))


def describe_checkpoint(directory, checkpoint_id):
    """{id, global_step, parent, variables: [(name, dtype number, shape)]} of a checkpoint."""
    return _core.checkpoint_describe(str(directory), int(checkpoint_id))


def read_checkpoint_variable(directory, checkpoint_id, name):
    """One variable's value in a checkpoint, as a NumPy array; NotFoundError naming it."""
    return _core.checkpoint_read(str(directory), int(checkpoint_id), name)


class FeedRunner:
    """Keeps a queue fed from Python: `threads` threads run enqueue_op (steps release the GIL) until stopped.

    shardflow's own (TF 1.x's tf.train.QueueRunner(queue, enqueue_ops) is queue_runners.QueueRunner).

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
            raise errors.FailedPreconditionError("this FeedRunner was already started")
        self._sess = sess
        for i in range(self.threads):
            t = threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"sf-feed-runner-{i}")
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
