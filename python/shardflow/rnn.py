"""TF 1.x's recurrent networks: the cells of tf.nn.rnn_cell / tf.contrib.rnn, static_rnn and dynamic_rnn.

    cell = tf.contrib.rnn.BasicLSTMCell(64)
    outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)  # x [batch, time, d]
    logits = tf.layers.dense(state.h, 10)

The cells compute TensorFlow 1.x's equations with TF's variable names
("rnn/basic_lstm_cell/kernel", "bias"; GRU's "gates/..." and "candidate/...";
kernels are [input_depth + num_units, k * num_units] applied to
concat([inputs, h], 1)). A cell makes its variables on its first call, under
the variable scope open then (a unique "<cell name>" inside it), and uses the
same ones on every later call, as a TF 1.x cell (a Layer) does.

static_rnn unrolls the cell in Python over a list of inputs. dynamic_rnn runs
it in a graph while loop (sf.while_loop) over the time steps, whose number may
be known only when the step runs; gradients flow back through the loop. With
sequence_length, the outputs after a sequence's length are zeros and its state
is copied through, so the final state is the one after its own last step
(TF's rule). Not supported (UnimplementedError): swap_memory, the LSTM's
num_unit_shards/num_proj_shards, DropoutWrapper's variational_recurrent.
"""

import collections
import types

from . import dtypes as _dt
from . import errors
from . import graph as _graph
from . import init_ops
from . import nn
from . import tf_api as _tf
from . import variable_scopes as vs
from .control_flow import while_loop

__all__ = ["RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell", "MultiRNNCell", "DropoutWrapper",
           "LSTMStateTuple", "static_rnn", "dynamic_rnn"]


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """An LSTM's state: c (the cell) and h (the output), as TF 1.x's tf.nn.rnn_cell.LSTMStateTuple."""

    __slots__ = ()

    @property
    def dtype(self):
        return self.c.dtype


def _flatten(structure):
    if isinstance(structure, (list, tuple)):
        out = []
        for s in structure:
            out.extend(_flatten(s))
        return out
    return [structure]


def _pack_as(structure, flat):
    flat = list(flat)

    def pack(s):
        if isinstance(s, (list, tuple)):
            items = [pack(x) for x in s]
            return type(s)(*items) if isinstance(s, LSTMStateTuple) else type(s)(items)
        return flat.pop(0)
    return pack(structure)


class RNNCell:
    """A cell: output, new_state = cell(inputs, state). Subclasses give state_size, output_size, _build
    (make the variables, given the input depth) and _step."""

    _base_name = "rnn_cell"

    def __init__(self, reuse=None, name=None, dtype=None):
        self._reuse = reuse
        self._name = name
        self._dtype = dtype
        self._built = False

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    def _check_depth(self, inputs):
        if inputs.shape.rank != 2 or inputs.shape[1] is None:
            raise ValueError(f"{type(self).__name__}: inputs must be [batch, depth] with the depth known, got "
                             f"{inputs.shape}")
        return inputs.shape[1]

    def build_for(self, depth, dtype):
        """Makes the variables for inputs of that depth (once); dynamic_rnn calls it before its loop."""
        if self._built:
            return
        if self._reuse:
            scope = vs.variable_scope(self._name or self._base_name, reuse=self._reuse)
        else:
            scope = vs.variable_scope(self._name, default_name=None if self._name else self._base_name)
        with scope:
            self._build(int(depth), _dt.as_dtype(dtype))
        self._built = True

    def __call__(self, inputs, state, scope=None):
        inputs = _graph.convert_to_tensor(inputs)
        if scope is not None and not self._built:
            with vs.variable_scope(scope):
                self.build_for(self._check_depth(inputs), inputs.dtype)
        else:
            self.build_for(self._check_depth(inputs), inputs.dtype)
        return self._step(inputs, state)

    def zero_state(self, batch_size, dtype):
        """Zeros of state_size for batch_size rows (an int or a scalar int32 Tensor)."""
        def zeros(size):
            if isinstance(batch_size, _graph.Tensor):
                z = _tf.fill(_tf.stack([batch_size, _graph.constant(int(size))]),
                             _graph.constant(0, dtype=_dt.as_dtype(dtype)))
                return _tf.reshape(z, [-1, int(size)])  # [None, size] statically
            return _tf.zeros([int(batch_size), int(size)], dtype=dtype)
        return _map_sizes(self.state_size, zeros)


def _map_sizes(size, fn):
    if isinstance(size, LSTMStateTuple):
        return LSTMStateTuple(fn(size.c), fn(size.h))
    if isinstance(size, (list, tuple)):
        return tuple(_map_sizes(s, fn) for s in size)
    return fn(size)


def _affine(args, kernel, bias):
    x = args[0] if len(args) == 1 else _tf.concat(list(args), 1)
    return nn.bias_add(_tf.matmul(x, kernel), bias)


class BasicRNNCell(RNNCell):
    """output = new_state = activation(W [inputs, state] + b) (activation default tanh)."""

    _base_name = "basic_rnn_cell"

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = int(num_units)
        self._activation = activation or _tf.tanh

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def _build(self, depth, dtype):
        self._kernel = vs.get_variable("kernel", [depth + self._num_units, self._num_units], dtype=dtype)
        self._bias = vs.get_variable("bias", [self._num_units], dtype=dtype,
                                     initializer=init_ops.zeros_initializer())

    def _step(self, inputs, state):
        out = self._activation(_affine([inputs, state], self._kernel, self._bias))
        return out, out


class BasicLSTMCell(RNNCell):
    """TF 1.x's BasicLSTMCell: i, j, f, o = split(W [inputs, h] + b, 4);
    c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j); h' = tanh(c') * sigmoid(o)."""

    _base_name = "basic_lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = int(num_units)
        self._forget_bias = float(forget_bias)
        self._state_is_tuple = bool(state_is_tuple)
        self._activation = activation or _tf.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    output_size = property(lambda self: self._num_units)

    def _build(self, depth, dtype):
        n = self._num_units
        self._kernel = vs.get_variable("kernel", [depth + n, 4 * n], dtype=dtype)
        self._bias = vs.get_variable("bias", [4 * n], dtype=dtype, initializer=init_ops.zeros_initializer())

    def _step(self, inputs, state):
        if self._state_is_tuple:
            c, h = state
        else:
            c, h = _tf.split(state, 2, axis=1)
        i, j, f, o = _tf.split(_affine([inputs, h], self._kernel, self._bias), 4, axis=1)
        forget = _graph.convert_to_tensor(self._forget_bias, dtype=f.dtype)
        new_c = c * _tf.sigmoid(f + forget) + _tf.sigmoid(i) * self._activation(j)
        new_h = self._activation(new_c) * _tf.sigmoid(o)
        new_state = LSTMStateTuple(new_c, new_h) if self._state_is_tuple else _tf.concat([new_c, new_h], 1)
        return new_h, new_state


class LSTMCell(RNNCell):
    """TF 1.x's LSTMCell: BasicLSTMCell's equations plus peepholes (use_peepholes), cell clipping
    (cell_clip), a projection of the output (num_proj, proj_clip) and a kernel initializer."""

    _base_name = "lstm_cell"

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None, num_proj=None,
                 proj_clip=None, num_unit_shards=None, num_proj_shards=None, forget_bias=1.0, state_is_tuple=True,
                 activation=None, reuse=None, name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        if num_unit_shards is not None or num_proj_shards is not None:
            raise errors.UnimplementedError("LSTMCell(num_unit_shards=, num_proj_shards=) is not supported "
                                            "(TF deprecated them; the kernel is one variable here)")
        self._num_units = int(num_units)
        self._use_peepholes = bool(use_peepholes)
        self._cell_clip = cell_clip
        self._initializer = initializer
        self._num_proj = None if num_proj is None else int(num_proj)
        self._proj_clip = proj_clip
        self._forget_bias = float(forget_bias)
        self._state_is_tuple = bool(state_is_tuple)
        self._activation = activation or _tf.tanh

    @property
    def state_size(self):
        out = self._num_proj or self._num_units
        return LSTMStateTuple(self._num_units, out) if self._state_is_tuple else self._num_units + out

    @property
    def output_size(self):
        return self._num_proj or self._num_units

    def _build(self, depth, dtype):
        n, out = self._num_units, self._num_proj or self._num_units
        self._kernel = vs.get_variable("kernel", [depth + out, 4 * n], dtype=dtype, initializer=self._initializer)
        self._bias = vs.get_variable("bias", [4 * n], dtype=dtype, initializer=init_ops.zeros_initializer())
        if self._use_peepholes:
            self._w_f = vs.get_variable("w_f_diag", [n], dtype=dtype, initializer=self._initializer)
            self._w_i = vs.get_variable("w_i_diag", [n], dtype=dtype, initializer=self._initializer)
            self._w_o = vs.get_variable("w_o_diag", [n], dtype=dtype, initializer=self._initializer)
        if self._num_proj is not None:
            with vs.variable_scope("projection"):
                self._proj = vs.get_variable("kernel", [n, self._num_proj], dtype=dtype,
                                             initializer=self._initializer)

    def _step(self, inputs, state):
        n = self._num_units
        if self._state_is_tuple:
            c_prev, m_prev = state
        else:
            c_prev = state[:, :n]
            m_prev = state[:, n:]
        i, j, f, o = _tf.split(_affine([inputs, m_prev], self._kernel, self._bias), 4, axis=1)
        forget = _graph.convert_to_tensor(self._forget_bias, dtype=f.dtype)
        if self._use_peepholes:
            c = (_tf.sigmoid(f + forget + self._w_f * c_prev) * c_prev
                 + _tf.sigmoid(i + self._w_i * c_prev) * self._activation(j))
        else:
            c = _tf.sigmoid(f + forget) * c_prev + _tf.sigmoid(i) * self._activation(j)
        if self._cell_clip is not None:
            c = _tf.clip_by_value(c, -float(self._cell_clip), float(self._cell_clip))
        if self._use_peepholes:
            m = _tf.sigmoid(o + self._w_o * c) * self._activation(c)
        else:
            m = _tf.sigmoid(o) * self._activation(c)
        if self._num_proj is not None:
            m = _tf.matmul(m, self._proj)
            if self._proj_clip is not None:
                m = _tf.clip_by_value(m, -float(self._proj_clip), float(self._proj_clip))
        new_state = LSTMStateTuple(c, m) if self._state_is_tuple else _tf.concat([c, m], 1)
        return m, new_state


class GRUCell(RNNCell):
    """TF 1.x's GRUCell: r, u = split(sigmoid(W_g [inputs, h] + b_g), 2) (b_g starts at 1.0);
    c = activation(W_c [inputs, r * h] + b_c); h' = u * h + (1 - u) * c."""

    _base_name = "gru_cell"

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None, bias_initializer=None,
                 name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = int(num_units)
        self._activation = activation or _tf.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def _build(self, depth, dtype):
        n = self._num_units
        with vs.variable_scope("gates"):
            self._gate_kernel = vs.get_variable("kernel", [depth + n, 2 * n], dtype=dtype,
                                                initializer=self._kernel_initializer)
            self._gate_bias = vs.get_variable(
                "bias", [2 * n], dtype=dtype,
                initializer=self._bias_initializer or init_ops.constant_initializer(1.0))
        with vs.variable_scope("candidate"):
            self._cand_kernel = vs.get_variable("kernel", [depth + n, n], dtype=dtype,
                                                initializer=self._kernel_initializer)
            self._cand_bias = vs.get_variable("bias", [n], dtype=dtype,
                                              initializer=self._bias_initializer or init_ops.zeros_initializer())

    def _step(self, inputs, state):
        r, u = _tf.split(_tf.sigmoid(_affine([inputs, state], self._gate_kernel, self._gate_bias)), 2, axis=1)
        c = self._activation(_affine([inputs, r * state], self._cand_kernel, self._cand_bias))
        new_h = u * state + (1 - u) * c
        return new_h, new_h


class MultiRNNCell(RNNCell):
    """Cells stacked: each one's output is the next one's input; the state is the tuple of their states
    (variables under "multi_rnn_cell/cell_<k>/")."""

    _base_name = "multi_rnn_cell"

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        if not cells:
            raise ValueError("Must specify at least one cell for MultiRNNCell.")
        if not state_is_tuple:
            raise errors.UnimplementedError("MultiRNNCell(state_is_tuple=False) is not supported (TF deprecated it)")
        self._cells = list(cells)

    state_size = property(lambda self: tuple(c.state_size for c in self._cells))
    output_size = property(lambda self: self._cells[-1].output_size)

    def _build(self, depth, dtype):
        for k, cell in enumerate(self._cells):
            with vs.variable_scope(f"cell_{k}"):
                cell.build_for(depth, dtype)
            depth = cell.output_size

    def _step(self, inputs, state):
        new_states = []
        x = inputs
        for cell, s in zip(self._cells, state):
            x, s2 = cell._step(x, s)
            new_states.append(s2)
        return x, tuple(new_states)


class DropoutWrapper(RNNCell):
    """A cell with dropout on its inputs, outputs and new state (keep probabilities, floats or scalar
    tensors, as TF 1.x's tf.nn.rnn_cell.DropoutWrapper); a fresh mask at every time step."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        super().__init__()
        if variational_recurrent:
            raise errors.UnimplementedError("DropoutWrapper(variational_recurrent=True) is not supported")
        if dropout_state_filter_visitor is not None:
            raise errors.UnimplementedError("DropoutWrapper(dropout_state_filter_visitor=) is not supported: the "
                                            "default filter (an LSTM's c is kept) applies")
        self._cell = cell
        self._keep = (input_keep_prob, output_keep_prob, state_keep_prob)
        self._seed = seed

    state_size = property(lambda self: self._cell.state_size)
    output_size = property(lambda self: self._cell.output_size)

    def _drop(self, x, keep):
        if not isinstance(keep, _graph.Tensor) and float(keep) == 1.0:
            return x
        return nn.dropout(x, keep, seed=self._seed)

    def build_for(self, depth, dtype):
        self._cell.build_for(depth, dtype)

    def _step(self, inputs, state):
        out, new_state = self._cell._step(self._drop(inputs, self._keep[0]), state)
        out = self._drop(out, self._keep[1])
        if isinstance(self._keep[2], _graph.Tensor) or float(self._keep[2]) != 1.0:
            flat = _flatten(new_state)
            # TF's default filter leaves an LSTM's c alone and drops the rest.
            kept = [s if isinstance(new_state, LSTMStateTuple) and k == 0 else self._drop(s, self._keep[2])
                    for k, s in enumerate(flat)]
            new_state = _pack_as(new_state, kept)
        return out, new_state


def _initial_state(cell, initial_state, batch_size, dtype):
    if initial_state is not None:
        return initial_state
    if dtype is None:
        raise ValueError("If no initial_state is provided, dtype must be specified")
    return cell.zero_state(batch_size, dtype)


def _copy_through(mask, new, old):
    """new where mask (one bool per row), else old."""
    return _tf.where(_tf.expand_dims(mask, 1), new, old)


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """TF 1.x's tf.nn.static_rnn / tf.contrib.rnn.static_rnn: the cell unrolled over inputs (a list of
    [batch, depth] tensors, one per step); returns (outputs, final state)."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("inputs must be a sequence")
    if not inputs:
        raise ValueError("inputs must not be empty")
    inputs = [_graph.convert_to_tensor(x) for x in inputs]
    with vs.variable_scope(scope or "rnn"):
        batch = inputs[0].shape[0] if inputs[0].shape[0] is not None else _tf.shape(inputs[0])[0]
        state = _initial_state(cell, initial_state, batch, dtype)
        if sequence_length is not None:
            sequence_length = _tf.cast(sequence_length, _dt.int32)
        outputs = []
        for t, x in enumerate(inputs):
            out, new_state = cell(x, state)
            if sequence_length is not None:
                valid = sequence_length > t
                out = _copy_through(valid, out, _tf.zeros_like(out))
                new_state = _pack_as(new_state, [_copy_through(valid, n, o) for n, o in
                                                 zip(_flatten(new_state), _flatten(state))])
            outputs.append(out)
            state = new_state
        return outputs, state


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None, parallel_iterations=None,
                swap_memory=False, time_major=False, scope=None):
    """TF 1.x's tf.nn.dynamic_rnn: the cell run over the time steps of inputs in a graph while loop.

    inputs is [batch, time, depth] ([time, batch, depth] with time_major); returns (outputs of the same
    layout with the cell's output size, final state)."""
    if swap_memory:
        raise errors.UnimplementedError("dynamic_rnn(swap_memory=True) is not supported")
    inputs = _graph.convert_to_tensor(inputs)
    if inputs.shape.rank != 3 or inputs.shape[2] is None:
        raise ValueError(f"dynamic_rnn's inputs must be rank 3 with the depth known, got {inputs.shape}")
    with vs.variable_scope(scope or "rnn"):
        x = inputs if time_major else _tf.transpose(inputs, [1, 0, 2])  # [time, batch, depth]
        steps = _tf.shape(x)[0]
        batch = x.shape[1] if x.shape[1] is not None else _tf.shape(x)[1]
        state = _initial_state(cell, initial_state, batch, dtype)
        cell.build_for(x.shape[2], x.dtype)  # the variables, outside the loop
        flat_state = [_graph.convert_to_tensor(s) for s in _flatten(state)]
        out_size = int(cell.output_size)
        acc = _tf.fill(_tf.stack([steps, _tf.shape(x)[1], _graph.constant(out_size)]),
                       _graph.constant(0, dtype=x.dtype))
        times = _tf.range(steps)
        lengths = None if sequence_length is None else _tf.cast(sequence_length, _dt.int32)

        def cond(t, acc, *flat):
            return t < steps

        def body(t, acc, *flat):
            old = _pack_as(state, flat)
            out, new = cell._step(_tf.gather(x, t), old)
            new_flat = [_graph.convert_to_tensor(s) for s in _flatten(new)]
            if lengths is not None:
                valid = lengths > t
                out = _copy_through(valid, out, _tf.zeros_like(out))
                new_flat = [_copy_through(valid, n, o) for n, o in zip(new_flat, flat)]
            # acc[t] = out: a fixed-shape accumulator, so the loop's variables keep their shapes
            at_t = _tf.reshape(_tf.cast(_tf.equal(times, t), x.dtype), [-1, 1, 1])
            acc = acc + at_t * _tf.expand_dims(out, 0)
            return [t + 1, acc] + new_flat

        kwargs = {} if parallel_iterations is None else {"parallel_iterations": int(parallel_iterations)}
        result = while_loop(cond, body, [_graph.constant(0), acc] + flat_state, **kwargs)
        # The loop's outputs carry no static shape: give back what is known (TF's shapes).
        outputs = _with_shape(result[1], [x.shape[0], x.shape[1], out_size])
        final = _pack_as(state, [_with_shape(r, list(s.shape.dims)) for r, s in zip(result[2:], flat_state)])
        if not time_major:
            outputs = _tf.transpose(outputs, [1, 0, 2])
        return outputs, final


def _with_shape(t, dims):
    """t reshaped to its own shape, so the static dims (at most one unknown) show."""
    if any(d is None for d in dims) and sum(d is None for d in dims) > 1:
        return t
    return _tf.reshape(t, [-1 if d is None else int(d) for d in dims])


# tf.nn.rnn_cell: the cells under TF 1.x's module name (tf.contrib.rnn adds static_rnn; contrib.py).
rnn_cell = types.SimpleNamespace(RNNCell=RNNCell, BasicRNNCell=BasicRNNCell, BasicLSTMCell=BasicLSTMCell,
                                 LSTMCell=LSTMCell, GRUCell=GRUCell, MultiRNNCell=MultiRNNCell,
                                 DropoutWrapper=DropoutWrapper, LSTMStateTuple=LSTMStateTuple)
