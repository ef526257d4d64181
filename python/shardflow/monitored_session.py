"""TF 1.x's training loop helpers: tf.train.MonitoredTrainingSession, MonitoredSession, SingularMonitoredSession,
Scaffold, the session creators and SessionRunHook with TF's hooks (StopAtStepHook, NanTensorHook,
LoggingTensorHook, CheckpointSaverHook, SummarySaverHook, StepCounterHook, FeedFnHook, FinalOpsHook).

    global_step = tf.train.get_or_create_global_step()
    train_op = optimizer.minimize(loss, global_step=global_step)
    hooks = [tf.train.StopAtStepHook(last_step=1000), tf.train.NanTensorHook(loss)]
    with tf.train.MonitoredTrainingSession(checkpoint_dir="/tmp/train", hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train_op)

As in TF 1.x: the session is made by the chief's creator (restoring the newest checkpoint of checkpoint_dir,
else running the scaffold's init op; the local init op always), the graph's queue runners start with a
Coordinator, each run gives every hook's before_run fetches and feeds alongside the caller's and hands the
results to after_run, a hook's request_stop() ends the loop (should_stop()), OutOfRangeError leaving the
`with` block ends it quietly, and close() runs the hooks' end(), stops the queue runners and closes the
session. With checkpoint_dir, MonitoredTrainingSession saves checkpoints (every 600 s by default), summaries
(every 100 steps) and global_step/sec (every 100 steps), which need a global step.

On a cluster, master is a tf.train.Server's target (shardflow/distribute.py): the session runs on the ps
nodes; the chief initializes (or restores) the variables the workers share, and a worker (is_chief=False)
waits until they are initialized (its scaffold's ready_op runs without a FailedPreconditionError), polling
up to max_wait_secs, and gets only `hooks` (no checkpoints, summaries or chief_only_hooks), as TF 1.x.
Another master raises UnimplementedError.
"""

import collections
import os
import time

from . import distribute as _distribute
import numpy as np

from . import errors
from . import graph as _graph
from . import summary as _summary
from . import tf_logging as _logging
from .queue_runners import Coordinator, start_queue_runners

__all__ = ["SessionRunArgs", "SessionRunContext", "SessionRunValues", "SessionRunHook", "SecondOrStepTimer",
           "StopAtStepHook", "NanLossDuringTrainingError", "NanTensorHook", "LoggingTensorHook", "CheckpointSaverHook",
           "CheckpointSaverListener", "SummarySaverHook", "StepCounterHook", "FeedFnHook", "FinalOpsHook", "Scaffold",
           "ChiefSessionCreator", "WorkerSessionCreator", "MonitoredSession", "SingularMonitoredSession",
           "MonitoredTrainingSession"]


class SessionRunArgs(collections.namedtuple("SessionRunArgs", ["fetches", "feed_dict", "options"])):
    """What a hook adds to a run: fetches, feeds (and options, which are ignored)."""

    def __new__(cls, fetches, feed_dict=None, options=None):
        return super().__new__(cls, fetches, feed_dict, options)


class SessionRunValues(collections.namedtuple("SessionRunValues", ["results", "options", "run_metadata"])):
    """The results of a hook's fetches."""


class SessionRunContext:
    """The run being made: original_args, session, and request_stop()."""

    def __init__(self, original_args, session):
        self.original_args, self.session = original_args, session
        self._stop_requested = False

    def request_stop(self):
        self._stop_requested = True

    @property
    def stop_requested(self):
        return self._stop_requested


class SessionRunHook:
    """The base of the hooks: every method does nothing."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class SecondOrStepTimer:
    """Triggers every every_secs seconds or every every_steps steps (exactly one)."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("exactly one of every_secs and every_steps should be provided.")
        self._every_secs, self._every_steps = every_secs, every_steps
        self.reset()

    def reset(self):
        self._last_time = self._last_step = None

    def should_trigger_for_step(self, step):
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._every_secs is not None:
            return time.time() >= self._last_time + self._every_secs
        return step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step):
        now = time.time()
        elapsed = (None, None) if self._last_time is None else (now - self._last_time, step - self._last_step)
        self._last_time, self._last_step = now, step
        return elapsed

    def last_triggered_step(self):
        return self._last_step


def _global_step_or_raise(hook):
    from .train import get_global_step
    gs = get_global_step()
    if gs is None:
        raise RuntimeError(f"Global step should be created to use {hook}.")
    return gs


class StopAtStepHook(SessionRunHook):
    """Requests a stop once the global step reaches last_step (or num_steps past its value at the start)."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and num_steps < 0:
            raise ValueError("num_steps must be non-negative.")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._gs = _global_step_or_raise("StopAtStepHook")

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        if self._last_step is None:
            self._last_step = step + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        if int(run_values.results) + 1 >= self._last_step:
            # the step may have moved on in this run: read it again
            if int(run_context.session.run(self._gs)) >= self._last_step:
                run_context.request_stop()


class NanLossDuringTrainingError(RuntimeError):
    def __str__(self):
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """Fails (NanLossDuringTrainingError) or requests a stop when loss_tensor is NaN."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results):
            if self._fail:
                _logging.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            _logging.warning("Model diverged with loss = NaN.")
            run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs (tf.logging.info) the values of tensors ({tag: tensor} or a list) every_n_iter runs or every_n_secs
    seconds, and at the end with at_end."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False, formatter=None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("either at_end and/or exactly one of every_n_iter and every_n_secs must be provided.")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}.")
        if not isinstance(tensors, dict):
            tensors = {getattr(t, "name", str(t)): t for t in tensors}
        self._tensors, self._order = tensors, sorted(tensors)
        self._timer = None if only_at_end else SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter)
        self._at_end, self._formatter = at_end, formatter

    def begin(self):
        self._iter = 0
        g = _graph.get_default_graph()
        self._fetch = {k: (g.get_tensor_by_name(v) if isinstance(v, str) else v) for k, v in self._tensors.items()}

    def before_run(self, run_context):
        self._should_log = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._fetch) if self._should_log else None

    def _log(self, values):
        if self._formatter:
            _logging.info(self._formatter(values))
        else:
            _logging.info(", ".join(f"{k} = {values[k]}" for k in self._order))

    def after_run(self, run_context, run_values):
        if self._should_log:
            self._timer.update_last_triggered_step(self._iter)
            self._log(run_values.results)
        self._iter += 1

    def end(self, session):
        if self._at_end:
            self._log(session.run(self._fetch))


class CheckpointSaverListener:
    """Called around each save of a CheckpointSaverHook."""

    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


class CheckpointSaverHook(SessionRunHook):
    """Saves checkpoint_dir/checkpoint_basename-<step> when the session is made, every save_secs seconds or
    save_steps steps (exactly one), and at the end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None, checkpoint_basename="model.ckpt",
                 scaffold=None, listeners=None):
        if saver is not None and scaffold is not None:
            raise ValueError("You cannot provide both saver and scaffold.")
        self._saver, self._scaffold = saver, scaffold
        self._path = os.path.join(os.fspath(checkpoint_dir), checkpoint_basename)
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])

    def begin(self):
        self._gs = _global_step_or_raise("CheckpointSaverHook")
        for listener in self._listeners:
            listener.begin()

    def _get_saver(self):
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None:
            return self._scaffold.saver
        from .train import Saver
        self._saver = Saver()
        return self._saver

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        stale = int(run_values.results)
        if self._timer.should_trigger_for_step(stale + 1):
            step = int(run_context.session.run(self._gs))
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                if self._save(run_context.session, step):
                    run_context.request_stop()

    def end(self, session):
        step = int(session.run(self._gs))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)

    def _save(self, session, step):
        _logging.info("Saving checkpoints for %d into %s.", step, self._path)
        for listener in self._listeners:
            listener.before_save(session, step)
        self._get_saver().save(session, self._path, global_step=step)
        stop = False
        for listener in self._listeners:
            stop = bool(listener.after_save(session, step)) or stop
        return stop


class SummarySaverHook(SessionRunHook):
    """Runs summary_op (or the scaffold's, tf.summary.merge_all() by default) every save_steps steps or
    save_secs seconds (exactly one) and writes it to output_dir (or summary_writer) at the global step."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None, scaffold=None,
                 summary_op=None):
        if (scaffold is None) == (summary_op is None):
            raise ValueError("Exactly one of scaffold or summary_op must be provided.")
        self._summary_op, self._scaffold = summary_op, scaffold
        self._writer, self._output_dir = summary_writer, output_dir
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)

    def begin(self):
        if self._writer is None and self._output_dir:
            self._writer = _summary.FileWriterCache.get(self._output_dir)
        self._gs = _global_step_or_raise("SummarySaverHook")
        self._next_step = None

    def _op(self):
        op = self._summary_op if self._summary_op is not None else self._scaffold.summary_op
        return op

    def before_run(self, run_context):
        self._request = self._next_step is None or self._timer.should_trigger_for_step(self._next_step)
        fetches = {"global_step": self._gs}
        if self._request and self._op() is not None:
            fetches["summary"] = self._op()
        return SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        if self._writer is None:
            return
        stale = int(run_values.results["global_step"])
        step = stale + 1
        if self._next_step is None or self._request:
            step = int(run_context.session.run(self._gs))
        if self._request:
            self._timer.update_last_triggered_step(step)
            if "summary" in run_values.results:
                self._writer.add_summary(run_values.results["summary"], step)
        self._next_step = step + 1

    def end(self, session=None):
        if self._writer is not None:
            self._writer.flush()


class StepCounterHook(SessionRunHook):
    """Writes global_step/sec (a scalar summary) and logs it every every_n_steps steps or every_n_secs seconds."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None, summary_writer=None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("exactly one of every_n_steps and every_n_secs should be provided.")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._writer, self._output_dir = summary_writer, output_dir

    def begin(self):
        if self._writer is None and self._output_dir:
            self._writer = _summary.FileWriterCache.get(self._output_dir)
        self._gs = _global_step_or_raise("StepCounterHook")

    def before_run(self, run_context):
        return SessionRunArgs(self._gs)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            secs, steps = self._timer.update_last_triggered_step(step)
            if secs is not None and secs > 0:
                rate = steps / secs
                _logging.info("global_step/sec: %g", rate)
                if self._writer is not None:
                    self._writer.add_summary(_summary.Summary(value=[_summary.Summary.Value(
                        tag="global_step/sec", simple_value=rate)]), step)


class FeedFnHook(SessionRunHook):
    """Feeds feed_fn()'s dict into every run."""

    def __init__(self, feed_fn):
        self._feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self._feed_fn())


class FinalOpsHook(SessionRunHook):
    """Runs final_ops at the end; their values are final_ops_values."""

    def __init__(self, final_ops, final_ops_feed_dict=None):
        self._ops, self._feed, self._values = final_ops, final_ops_feed_dict, None

    @property
    def final_ops_values(self):
        return self._values

    def end(self, session):
        if self._ops is not None:
            self._values = session.run(self._ops, feed_dict=self._feed)


class Scaffold:
    """What a monitored session needs of the graph: init_op (every variable's initializer by default),
    local_init_op, init_feed_dict, init_fn(scaffold, session) run after init_op, summary_op
    (tf.summary.merge_all() by default) and saver (a tf.train.Saver by default)."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None, ready_for_local_init_op=None,
                 local_init_op=None, summary_op=None, saver=None, copy_from_scaffold=None):
        if copy_from_scaffold is not None:
            base = copy_from_scaffold
            init_op = init_op or base.init_op
            init_feed_dict = init_feed_dict or base.init_feed_dict
            init_fn = init_fn or base._user_init_fn
            local_init_op = local_init_op or base.local_init_op
            summary_op = summary_op or base.summary_op
            saver = saver or base.saver
        self._init_op, self._init_feed_dict, self._user_init_fn = init_op, init_feed_dict, init_fn
        self._local_init_op, self._summary_op, self._saver = local_init_op, summary_op, saver
        self._ready_op = ready_op
        self._finalized = False

    def finalize(self):
        if self._finalized:
            return self
        from .train import Saver
        from .variables import global_variables, global_variables_initializer, local_variables_initializer
        if self._init_op is None:
            self._init_op = global_variables_initializer()
        if self._ready_op is None:
            # TF's is report_uninitialized_variables(); here: reads of every variable, which fail with
            # FailedPreconditionError while one is not initialized.
            self._ready_op = _graph.group(*global_variables(), name="ready_op")
        if self._local_init_op is None:
            self._local_init_op = local_variables_initializer()
        if self._summary_op is None:
            self._summary_op = _summary.merge_all()
        if self._saver is None and global_variables():
            self._saver = Saver()
        self._finalized = True
        return self

    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    local_init_op = property(lambda self: self._local_init_op)
    summary_op = property(lambda self: self._summary_op)
    saver = property(lambda self: self._saver)
    ready_op = property(lambda self: self._ready_op)
    ready_for_local_init_op = property(lambda self: None)

    def init_fn(self, session):
        if self._user_init_fn is not None:
            self._user_init_fn(self, session)


def _make_session(master, config):
    """A session in this process, or on a tf.train.Server's cluster (master is its target)."""
    from .session import Session
    if master and _distribute._parse_target(master) is None:
        raise errors.UnimplementedError(
            f"a monitored session on master {master!r} is not supported: give a tf.train.Server's target "
            "(server.target, \"shardflow://...\": its ps tasks are shardflow nodes) or run on nodes with "
            "sf.ClusterSession; leave master empty to train in this process")
    return Session(target=master or "", config=config)


class ChiefSessionCreator:
    """Makes the chief's session: restores checkpoint_filename_with_path or the newest checkpoint of
    checkpoint_dir, else runs the scaffold's init_op (and init_fn); runs local_init_op either way.
    master: "" (this process) or a tf.train.Server's target."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        if master and _distribute._parse_target(master) is None:
            _make_session(master, config)  # raises, naming what to use
        self._master = master
        self._scaffold = scaffold or Scaffold()
        self._config, self._dir, self._path = config, checkpoint_dir, checkpoint_filename_with_path

    def create_session(self):
        from .train import latest_checkpoint
        self._scaffold.finalize()
        sess = _make_session(self._master, self._config)
        path = self._path or (latest_checkpoint(self._dir) if self._dir else None)
        if path and self._scaffold.saver is not None:
            self._scaffold.saver.restore(sess, path)
        else:
            sess.run(self._scaffold.init_op, feed_dict=self._scaffold.init_feed_dict)
            self._scaffold.init_fn(sess)
        if self._scaffold.local_init_op is not None:
            sess.run(self._scaffold.local_init_op)
        return sess


class WorkerSessionCreator:
    """A non-chief worker's session on a tf.train.Server's cluster (master): waits up to max_wait_secs until
    the chief has initialized the variables (the scaffold's ready_op runs), then runs local_init_op."""

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=30 * 60):
        if not master:
            raise errors.UnimplementedError(
                "a non-chief monitored session needs master=server.target (a tf.train.Server's, whose ps tasks "
                "are shardflow nodes): its chief is another worker of that cluster")
        if _distribute._parse_target(master) is None:
            _make_session(master, config)  # raises, naming what to use
        self._scaffold = scaffold or Scaffold()
        self._master, self._config, self._max_wait = master, config, max_wait_secs

    def create_session(self):
        self._scaffold.finalize()
        sess = _make_session(self._master, self._config)
        deadline = time.monotonic() + self._max_wait
        delay = 0.05
        while True:
            try:
                sess.run(self._scaffold.ready_op)
                break
            except errors.FailedPreconditionError as e:
                if time.monotonic() > deadline:
                    sess.close()
                    raise errors.DeadlineExceededError(
                        f"Session was not ready after waiting {self._max_wait} secs: the chief has not initialized "
                        f"the variables ({e.message if hasattr(e, 'message') else e})") from None
                _logging.info("Waiting for the chief to initialize the variables: %s", e)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        if self._scaffold.local_init_op is not None:
            sess.run(self._scaffold.local_init_op)
        return sess


class MonitoredSession:
    """A session that runs hooks around every run and ends training on their request (TF 1.x's)."""

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        self._hooks = list(hooks or [])
        for h in self._hooks:
            h.begin()
        self._graph = _graph.get_default_graph()
        self._sess = (session_creator or ChiefSessionCreator()).create_session()
        self._coord = Coordinator()
        self._threads = start_queue_runners(sess=self._sess, coord=self._coord)
        self._grace = stop_grace_period_secs
        for h in self._hooks:
            h.after_create_session(self._sess, self._coord)
        self._stop = False
        self._closed = False

    @property
    def graph(self):
        return self._graph

    def should_stop(self):
        return self._stop or self._coord.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Runs fetches with feed_dict and every hook's fetches and feeds; returns the caller's results."""
        if self._closed:
            raise RuntimeError("Session is already closed.")
        if self._stop:
            raise RuntimeError("Run called even after should_stop requested.")
        ctx = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._sess)
        all_fetches = {"caller": fetches}
        feeds = dict(feed_dict or {})
        for i, h in enumerate(self._hooks):
            args = h.before_run(ctx)
            if args is None:
                continue
            if args.fetches is not None:
                all_fetches[i] = args.fetches
            for k, v in (args.feed_dict or {}).items():
                if k in feeds:
                    who = "a SessionRunHook and user" if feed_dict and k in feed_dict else "two hooks"
                    raise RuntimeError(f"Same tensor is fed by {who}.")
                feeds[k] = v
        results = self._sess.run(all_fetches, feed_dict=feeds, options=options)
        for i, h in enumerate(self._hooks):
            h.after_run(ctx, SessionRunValues(results.get(i), options, run_metadata))
        self._stop = self._stop or ctx.stop_requested
        return results["caller"]

    def raw_session(self):
        return self._sess

    def close(self):
        self._close(None)

    def _close(self, exception_type):
        if self._closed:
            return
        self._closed = True
        try:
            if exception_type is None:
                for h in self._hooks:
                    h.end(self._sess)
        finally:
            self._coord.request_stop()
            try:
                self._coord.join(self._threads, stop_grace_period_secs=self._grace)
            except errors.OutOfRangeError:
                pass
            finally:
                self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, exception_type, exception_value, traceback):
        if exception_type in (errors.OutOfRangeError, StopIteration):
            exception_type = None  # the end of the input ends training, as TF 1.x
        self._close(exception_type)
        return exception_type is None


class SingularMonitoredSession(MonitoredSession):
    """A MonitoredSession over a ChiefSessionCreator (TF 1.x's), with raw_session()."""

    def __init__(self, hooks=None, scaffold=None, master="", config=None, checkpoint_dir=None,
                 stop_grace_period_secs=120, checkpoint_filename_with_path=None):
        super().__init__(ChiefSessionCreator(scaffold, master, config, checkpoint_dir,
                                             checkpoint_filename_with_path), hooks, stop_grace_period_secs)


USE_DEFAULT = object()


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,  # noqa: N802
                             chief_only_hooks=None, save_checkpoint_secs=USE_DEFAULT,
                             save_summaries_steps=USE_DEFAULT, save_summaries_secs=USE_DEFAULT, config=None,
                             stop_grace_period_secs=120, log_step_count_steps=100, max_wait_secs=7200,
                             save_checkpoint_steps=USE_DEFAULT, summary_dir=None):
    """TF 1.x's MonitoredTrainingSession: the chief's, or on a cluster (master=server.target) a worker's
    (see the module's note)."""
    if not is_chief:
        return MonitoredSession(WorkerSessionCreator(scaffold, master, config, max_wait_secs), list(hooks or []),
                                stop_grace_period_secs)
    ChiefSessionCreator(None, master)  # refuses a master that is not a Server's target before anything runs
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_secs is USE_DEFAULT:
        save_summaries_secs = None
    elif save_summaries_steps is USE_DEFAULT:
        save_summaries_steps = None
    if save_checkpoint_steps is USE_DEFAULT and save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_steps, save_checkpoint_secs = None, 600
    elif save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_steps = None
    scaffold = scaffold or Scaffold()
    all_hooks = list(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir
    if summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(StepCounterHook(output_dir=summary_dir, every_n_steps=log_step_count_steps))
        if (save_summaries_steps and save_summaries_steps > 0) or (save_summaries_secs and save_summaries_secs > 0):
            all_hooks.append(SummarySaverHook(scaffold=scaffold, save_steps=save_summaries_steps,
                                              save_secs=save_summaries_secs, output_dir=summary_dir))
    if checkpoint_dir and ((save_checkpoint_secs and save_checkpoint_secs > 0)
                           or (save_checkpoint_steps and save_checkpoint_steps > 0)):
        all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_steps=save_checkpoint_steps,
                                             save_secs=save_checkpoint_secs, scaffold=scaffold))
    all_hooks.extend(hooks or [])
    return MonitoredSession(ChiefSessionCreator(scaffold, master, config, checkpoint_dir), all_hooks,
                            stop_grace_period_secs)

