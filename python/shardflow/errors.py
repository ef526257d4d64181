"""shardflow's errors as Python exceptions: one class per status code.

Every failed C++ Status reaches Python as an instance of the class for its
code, with the C++ message unchanged. `node` and `op` hold the node name and
op type when the message names them ("node 'x' (op MatMul): ...").
"""

import re

__all__ = [
    "OpError", "InvalidArgumentError", "NotFoundError", "FailedPreconditionError",
    "OutOfRangeError", "UnimplementedError", "InternalError", "AbortedError",
    "DataLossError", "UnavailableError", "PermissionDeniedError", "DeadlineExceededError",
]

_WHERE = re.compile(r"node '([^']+)' \(op ([A-Za-z0-9_]+)\)")


class OpError(Exception):
    """A shardflow operation failed; `code` is the status code number."""

    code = None

    def __init__(self, message, node=None, op=None):
        super().__init__(message)
        self.message = message
        m = _WHERE.search(message) if (node is None or op is None) else None
        self.node = node if node is not None else (m.group(1) if m else None)
        self.op = op if op is not None else (m.group(2) if m else None)


class InvalidArgumentError(OpError, ValueError):
    """The caller's input is wrong (feed, attribute, shape, file)."""
    code = 1


class NotFoundError(OpError, LookupError):
    """A named thing (node, file, checkpoint, variable) does not exist."""
    code = 2


class FailedPreconditionError(OpError):
    """The system is not in a state where the operation can run."""
    code = 3


class OutOfRangeError(OpError):
    """Input exhausted (a closed queue) or a value out of its range."""
    code = 4


class UnimplementedError(OpError, NotImplementedError):
    """Not supported (yet)."""
    code = 5


class InternalError(OpError):
    """A bug in shardflow itself."""
    code = 6


class AbortedError(OpError):
    """A step was aborted because another part of it failed."""
    code = 7


class DataLossError(OpError):
    """Corrupt or truncated data."""
    code = 8


class UnavailableError(OpError):
    """A node, file or service cannot be reached now."""
    code = 9


class PermissionDeniedError(OpError, PermissionError):
    """A peer refused by TLS (a certificate of another CA) or a role that may not do this."""
    code = 10


class DeadlineExceededError(OpError, TimeoutError):
    """A remote request timed out."""
    code = 11


_BY_CODE = {c.code: c for c in (
    InvalidArgumentError, NotFoundError, FailedPreconditionError, OutOfRangeError,
    UnimplementedError, InternalError, AbortedError, DataLossError, UnavailableError,
    PermissionDeniedError, DeadlineExceededError)}


def exception_class(code):
    """The exception class of a status code number (OpError for an unknown one)."""
    return _BY_CODE.get(code, OpError)


def _from_status(code, message):
    # Called by the C++ module to build the exception it raises.
    return exception_class(code)(message)
