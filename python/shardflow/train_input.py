"""TF 1.x's queue-based input: tf.train.slice_input_producer, range_input_producer, input_producer,
limit_epochs, batch, shuffle_batch, batch_join, shuffle_batch_join.

    image, label = tf.train.slice_input_producer([images, labels], num_epochs=2, shuffle=True)
    xs, ys = tf.train.shuffle_batch([image, label], batch_size=32, capacity=1000, min_after_dequeue=500)
    ...
    sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)

Each function builds queues (sf.FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue)
and adds a tf.train.QueueRunner for them to the graph's QUEUE_RUNNERS collection,
as TensorFlow 1.x does (tensorflow/python/training/input.py). A producer with
num_epochs raises OutOfRangeError from its enqueue once that many epochs are
out; its runner then closes the queue, and every queue downstream closes in
turn, so the consumer sees OutOfRangeError after the last element (the last
partial batch too with allow_smaller_final_batch=True).

Shuffling an epoch is a uniform permutation of its elements (each epoch
separately), drawn by a private RandomShuffleQueue; the random streams are not
TensorFlow's, so a seed gives a repeatable order, not TF's order. There are no
string tensors, so string_input_producer and the file readers do not exist.
"""

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import tf_api
from .control_flow import cond
from .queue_runners import QueueRunner, add_queue_runner
from .queues import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue
from .variables import Variable

__all__ = ["limit_epochs", "input_producer", "range_input_producer", "slice_input_producer", "batch",
           "shuffle_batch", "batch_join", "shuffle_batch_join"]

LOCAL_VARIABLES = "local_variables"  # tf.GraphKeys.LOCAL_VARIABLES


def _seed(seed):
    return 0 if seed is None else int(seed)


def limit_epochs(tensor, num_epochs=None, name=None):
    """tensor, whose evaluation raises OutOfRangeError after num_epochs evaluations (TF 1.x's).

    The count is a local variable "<name>/epochs" (int64, in LOCAL_VARIABLES):
    tf.local_variables_initializer() (or global_variables_initializer) must run
    first. Unlike TF's count_up_to the count is not atomic across concurrent
    steps; a QueueRunner's one thread per enqueue op evaluates it.
    """
    tensor = _graph.convert_to_tensor(tensor)
    if num_epochs is None:
        return tensor
    if int(num_epochs) <= 0:
        raise ValueError(f"num_epochs must be > 0 not {num_epochs}.")
    g = tensor.graph
    with g.as_default(), _graph.name_scope(name or "limit_epochs"):
        epochs = Variable(_graph.constant(0, dtype=_dt.int64), name="epochs", trainable=False)
        g._collections.setdefault(LOCAL_VARIABLES, []).append(epochs)
        # OutOfRangeError comes from a dequeue of a queue that is closed and empty: the runtime's own
        # end-of-input error, raised by a node (TF's CountUpTo raises the same code).
        exhausted = FIFOQueue([_dt.int64], shapes=[[]], name="exhausted")

        def counted():
            return epochs.assign_add(_graph.constant(1, dtype=_dt.int64))

        def over():
            with _graph.control_dependencies([exhausted.close()]):
                return exhausted.dequeue()

        count = cond(epochs.read_value() < int(num_epochs), counted, over)
        with _graph.control_dependencies([count]):
            return _graph.identity(tensor, name="limited")


def _shuffled(tensor, seed, name):
    """tensor with dimension 0 in a uniformly random order, a fresh one per evaluation.

    A private RandomShuffleQueue receives the indices 0..n-1 and gives all n back:
    each dequeue takes a uniformly chosen remaining element, so the n form a
    uniform permutation. Only one step may evaluate it at a time (it is run by a
    QueueRunner's single thread)."""
    n = tensor.shape[0] if tensor.shape.rank else None
    if n is None:
        raise errors.InvalidArgumentError(
            f"shuffling {tensor.name!r} needs its size along dimension 0 known when the graph is built")
    with _graph.name_scope(name):
        q = RandomShuffleQueue(capacity=max(int(n), 1), min_after_dequeue=0, dtypes=[_dt.int32], shapes=[[]],
                               seed=_seed(seed), name="permutation")
        fill = q.enqueue_many([tf_api.range(int(n))])
        with _graph.control_dependencies([fill]):
            order = q.dequeue_many(int(n))
        return tf_api.gather(tensor, order)


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None, capacity=32,
                   shared_name=None, summary_name=None, name=None, cancel_op=None):
    """A FIFOQueue fed with the rows of input_tensor, epoch after epoch (shuffled in each with shuffle),
    by a QueueRunner in QUEUE_RUNNERS; TF 1.x's tf.train.input_producer."""
    input_tensor = _graph.convert_to_tensor(input_tensor)
    if input_tensor.shape.rank == 0:
        raise ValueError("Shape must be at least rank 1")
    row = None if input_tensor.shape.rank is None else list(input_tensor.shape.dims[1:])
    if element_shape is not None:
        row = list(_graph.TensorShape(element_shape))
    if row is None or any(d is None for d in row):
        raise ValueError("Either `input_tensor` must have a fully defined shape or `element_shape` must be "
                         "specified")
    g = input_tensor.graph
    with g.as_default(), _graph.name_scope(name or "input_producer"):
        if shuffle:
            input_tensor = _shuffled(input_tensor, seed, "shuffle")
        input_tensor = limit_epochs(input_tensor, num_epochs)
        q = FIFOQueue([input_tensor.dtype], shapes=[row], capacity=int(capacity), shared_name=shared_name or "",
                      name="fifo_queue")
        enq = q.enqueue_many([input_tensor])
        add_queue_runner(QueueRunner(q, [enq], cancel_op=cancel_op))
    return q


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None):
    """A queue of the int32 integers 0..limit-1, epoch after epoch (TF 1.x's tf.train.range_input_producer)."""
    with _graph.name_scope(name or "input_producer"):
        rng = tf_api.range(int(limit))
        return input_producer(rng, [], num_epochs, shuffle, seed, capacity, shared_name, "fraction_of_%d_full"
                              % capacity, "range_input")


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None):
    """One row (a slice along dimension 0) of each tensor of tensor_list at a time, the same row of each,
    every row once per epoch (TF 1.x's tf.train.slice_input_producer); returns a list of Tensors."""
    tensor_list = [_graph.convert_to_tensor(t) for t in tensor_list]
    if not tensor_list:
        raise ValueError("Expected at least one tensor in slice_input_producer().")
    sizes = {t.shape[0] for t in tensor_list if t.shape.rank}
    if None in sizes or len(sizes) != 1:
        raise errors.InvalidArgumentError(
            "slice_input_producer needs tensors with one known size along dimension 0, got shapes "
            + ", ".join(str(t.shape) for t in tensor_list))
    with _graph.name_scope(name or "input_producer"):
        queue = range_input_producer(sizes.pop(), num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                                     capacity=capacity, shared_name=shared_name)
        index = queue.dequeue()
        return [tf_api.gather(t, index) for t in tensor_list]


def _as_list(tensors, what):
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [_graph.convert_to_tensor(tensors[k]) for k in keys], keys
    if isinstance(tensors, (list, tuple)):
        return [_graph.convert_to_tensor(t) for t in tensors], None
    return [_graph.convert_to_tensor(tensors)], None


def _shapes(tensor_lists, shapes, enqueue_many, dynamic_pad):
    if shapes is not None:
        return [list(_graph.TensorShape(s)) for s in shapes]

    def dims(t):
        if t.shape.rank is None:
            return None
        return list(t.shape.dims[1:] if enqueue_many else t.shape.dims)

    out = []
    for i, t in enumerate(tensor_lists[0]):
        d = dims(t)
        for other in tensor_lists[1:]:  # batch_join: TF merges the shapes of every list
            o = dims(other[i])
            if d is None or o is None or len(o) != len(d):
                d = None if (d is None or o is None) else d
                continue
            d = [a if a == b else None for a, b in zip(d, o)]
        if d is None or (not dynamic_pad and any(x is None for x in d)):
            raise ValueError(f"All shapes must be fully defined: {[str(x.shape) for x in tensor_lists[0]]}")
        out.append(d)
    return out


def _batch(tensor_lists, keys, batch_size, queue, enqueue_many, allow_smaller_final_batch, name):
    enqueues = []
    for tl in tensor_lists:
        enqueues.append(queue.enqueue_many(tl) if enqueue_many else queue.enqueue(tl))
    add_queue_runner(QueueRunner(queue, enqueues))
    dequeue = queue.dequeue_up_to if allow_smaller_final_batch else queue.dequeue_many
    out = dequeue(int(batch_size), name=name)
    if keys is not None:
        out = [out] if len(keys) == 1 else out
        return {k: out[i] for i, k in enumerate(keys)}
    return out


def _check_lists(tensors_list):
    lists, keys = [], None
    for tensors in tensors_list:
        tl, k = _as_list(tensors, "tensors")
        if lists and (len(tl) != len(lists[0]) or k != keys):
            raise ValueError("Expected every element of tensors_list to have the same structure")
        if lists and any(a.dtype != b.dtype for a, b in zip(tl, lists[0])):
            raise TypeError("Expected types to be consistent across tensors_list")
        lists.append(tl)
        keys = k
    if not lists or not lists[0]:
        raise ValueError("Expecting at least one tensor")
    return lists, keys


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
          allow_smaller_final_batch=False, shared_name=None, name=None):
    """tensors batched batch_size at a time through a FIFOQueue (a PaddingFIFOQueue with dynamic_pad) fed by
    num_threads threads of a QueueRunner (TF 1.x's tf.train.batch): a Tensor for one tensor, else a list
    (or a dict for a dict)."""
    lists, keys = _check_lists([tensors])
    return _build_batch(lists * int(num_threads), keys, batch_size, capacity, enqueue_many, shapes, dynamic_pad,
                        allow_smaller_final_batch, shared_name, name or "batch")


def batch_join(tensors_list, batch_size, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
               allow_smaller_final_batch=False, shared_name=None, name=None):
    """As batch, with one enqueuing thread per element of tensors_list (TF 1.x's tf.train.batch_join)."""
    lists, keys = _check_lists(tensors_list)
    return _build_batch(lists, keys, batch_size, capacity, enqueue_many, shapes, dynamic_pad,
                        allow_smaller_final_batch, shared_name, name or "batch_join")


def _build_batch(lists, keys, batch_size, capacity, enqueue_many, shapes, dynamic_pad, allow_smaller_final_batch,
                 shared_name, name):
    g = lists[0][0].graph
    with g.as_default(), _graph.name_scope(name):
        shapes = _shapes(lists, shapes, enqueue_many, dynamic_pad)
        dtypes = [t.dtype for t in lists[0]]
        kind = PaddingFIFOQueue if dynamic_pad else FIFOQueue
        q = kind(dtypes, shapes=shapes, capacity=int(capacity), shared_name=shared_name or "",
                 name="padding_fifo_queue" if dynamic_pad else "fifo_queue")
        return _batch(lists, keys, batch_size, q, enqueue_many, allow_smaller_final_batch, "batch")


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None, enqueue_many=False,
                  shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """tensors batched in a random order through a RandomShuffleQueue that keeps min_after_dequeue elements
    to mix (until its input ends), fed by num_threads threads (TF 1.x's tf.train.shuffle_batch)."""
    lists, keys = _check_lists([tensors])
    return _build_shuffle(lists * int(num_threads), keys, batch_size, capacity, min_after_dequeue, seed,
                          enqueue_many, shapes, allow_smaller_final_batch, shared_name, name or "shuffle_batch")


def shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, seed=None, enqueue_many=False,
                       shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """As shuffle_batch, with one enqueuing thread per element of tensors_list."""
    lists, keys = _check_lists(tensors_list)
    return _build_shuffle(lists, keys, batch_size, capacity, min_after_dequeue, seed, enqueue_many, shapes,
                          allow_smaller_final_batch, shared_name, name or "shuffle_batch_join")


def _build_shuffle(lists, keys, batch_size, capacity, min_after_dequeue, seed, enqueue_many, shapes,
                   allow_smaller_final_batch, shared_name, name):
    g = lists[0][0].graph
    with g.as_default(), _graph.name_scope(name):
        shapes = _shapes(lists, shapes, enqueue_many, False)
        q = RandomShuffleQueue(capacity=int(capacity), min_after_dequeue=int(min_after_dequeue),
                               dtypes=[t.dtype for t in lists[0]], shapes=shapes, seed=_seed(seed),
                               shared_name=shared_name or "", name="random_shuffle_queue")
        return _batch(lists, keys, batch_size, q, enqueue_many, allow_smaller_final_batch, "batch")
