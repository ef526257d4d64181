"""shardflow's errors as Python exceptions: one class per status code.

Every failed C++ Status reaches Python as an instance of the class for its
code, with the C++ message unchanged. `node` and `op` hold the node name and
op type when the message names them ("node 'x' (op MatMul): ...").

As tf.errors: the classes have TensorFlow's names, `error_code` is
TensorFlow's code number (the constants OK, CANCELLED, ... INVALID_ARGUMENT
are TensorFlow's), and a class can be raised as TensorFlow's,
`InvalidArgumentError(node_def, op, message)`. CancelledError, UnknownError,
AlreadyExistsError and UnauthenticatedError exist so that TensorFlow code
catching them runs; shardflow raises none of them.
"""

import re

__all__ = [
    "OpError", "InvalidArgumentError", "NotFoundError", "FailedPreconditionError",
    "OutOfRangeError", "UnimplementedError", "InternalError", "AbortedError",
    "DataLossError", "UnavailableError", "PermissionDeniedError", "DeadlineExceededError",
    "ResourceExhaustedError", "CancelledError", "UnknownError", "AlreadyExistsError", "UnauthenticatedError",
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
]

# TensorFlow's code numbers (tf.errors.*; absl's status codes), which are not shardflow's `code`.
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = 0, 1, 2, 3, 4, 5, 6
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE = 7, 8, 9, 10, 11
UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED = 12, 13, 14, 15, 16

_WHERE = re.compile(r"node '([^']+)' \(op ([A-Za-z0-9_]+)\)")


class OpError(Exception):
    """A shardflow operation failed; `code` is shardflow's status code number, `error_code` TensorFlow's.

    OpError(message, node=None, op=None), or TensorFlow's OpError(node_def, op, message[, error_code]) and
    XError(node_def, op, message): node_def is kept as given; an Operation given as op names the node.
    """

    code = None
    error_code = UNKNOWN

    def __init__(self, *args, **kwargs):
        node_def = None
        if len(args) >= 3 or "node_def" in kwargs:  # TensorFlow's (node_def, op, message[, error_code])
            names = ("node_def", "op", "message", "error_code")
            given = dict(zip(names, args), **kwargs)
            node_def, op_obj, message = given.get("node_def"), given.get("op"), given.get("message", "")
            if "error_code" in given:
                self.error_code = given["error_code"]
            node = getattr(op_obj, "name", None)
            op = getattr(op_obj, "type", None)
        else:
            names = ("message", "node", "op")
            given = dict(zip(names, args), **kwargs)
            message, node, op = given.get("message", ""), given.get("node"), given.get("op")
        message = "" if message is None else str(message)
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        m = _WHERE.search(message) if (node is None or op is None) else None
        self.node = node if node is not None else (m.group(1) if m else None)
        self.op = op if op is not None else (m.group(2) if m else None)


class InvalidArgumentError(OpError, ValueError):
    """The caller's input is wrong (feed, attribute, shape, file)."""
    code = 1
    error_code = INVALID_ARGUMENT


class NotFoundError(OpError, LookupError):
    """A named thing (node, file, checkpoint, variable) does not exist."""
    code = 2
    error_code = NOT_FOUND


class FailedPreconditionError(OpError):
    """The system is not in a state where the operation can run."""
    code = 3
    error_code = FAILED_PRECONDITION


class OutOfRangeError(OpError):
    """Input exhausted (a closed queue) or a value out of its range."""
    code = 4
    error_code = OUT_OF_RANGE


class UnimplementedError(OpError, NotImplementedError):
    """Not supported (yet)."""
    code = 5
    error_code = UNIMPLEMENTED


class InternalError(OpError):
    """A bug in shardflow itself."""
    code = 6
    error_code = INTERNAL


class AbortedError(OpError):
    """A step was aborted because another part of it failed."""
    code = 7
    error_code = ABORTED


class DataLossError(OpError):
    """Corrupt or truncated data."""
    code = 8
    error_code = DATA_LOSS


class UnavailableError(OpError):
    """A node, file or service cannot be reached now."""
    code = 9
    error_code = UNAVAILABLE


class PermissionDeniedError(OpError, PermissionError):
    """A peer refused by TLS (a certificate of another CA) or a role that may not do this."""
    code = 10
    error_code = PERMISSION_DENIED


class DeadlineExceededError(OpError, TimeoutError):
    """A remote request timed out."""
    code = 11
    error_code = DEADLINE_EXCEEDED


class ResourceExhaustedError(OpError):
    """A tensor past the allocation limit, or memory that is not there."""
    code = 12
    error_code = RESOURCE_EXHAUSTED


class CancelledError(OpError):
    """TensorFlow's: an operation was cancelled (shardflow reports a stopped step as AbortedError)."""
    error_code = CANCELLED


class UnknownError(OpError):
    """TensorFlow's: an error of no other kind (shardflow raises none)."""
    error_code = UNKNOWN


class AlreadyExistsError(OpError):
    """TensorFlow's: what was to be created exists (shardflow raises none)."""
    error_code = ALREADY_EXISTS


class UnauthenticatedError(OpError):
    """TensorFlow's: no valid credentials (shardflow reports a refused peer as PermissionDeniedError)."""
    error_code = UNAUTHENTICATED


_BY_CODE = {c.code: c for c in (
    InvalidArgumentError, NotFoundError, FailedPreconditionError, OutOfRangeError,
    UnimplementedError, InternalError, AbortedError, DataLossError, UnavailableError,
    PermissionDeniedError, DeadlineExceededError, ResourceExhaustedError)}


def exception_class(code):
    """The exception class of a status code number (OpError for an unknown one)."""
    return _BY_CODE.get(code, OpError)


def _from_status(code, message):
    # Called by the C++ module to build the exception it raises.
    return exception_class(code)(message)
