"""TF 1.x's tf.logging over Python's logging (the "tensorflow" logger, as TF 1.x used).

    tf.logging.set_verbosity(tf.logging.INFO)
    tf.logging.info("step %d: loss %f", step, loss)
"""

import logging as _logging
import sys as _sys

__all__ = ["DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "set_verbosity", "get_verbosity", "debug", "info",
           "warn", "warning", "error", "fatal", "log", "vlog", "log_every_n", "log_first_n", "log_if", "flush"]

DEBUG, INFO, WARN, ERROR, FATAL = _logging.DEBUG, _logging.INFO, _logging.WARN, _logging.ERROR, _logging.FATAL
WARNING = WARN

_logger = _logging.getLogger("tensorflow")
if not _logger.handlers:
    _handler = _logging.StreamHandler(_sys.stderr)
    _handler.setFormatter(_logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    _logger.addHandler(_handler)
    _logger.setLevel(WARN)  # TF 1.x's default: warnings and above
    _logger.propagate = False

_counts = {}


def set_verbosity(v):
    """Logs messages of level v and above."""
    _logger.setLevel(v)


def get_verbosity():
    return _logger.getEffectiveLevel()


def log(level, msg, *args, **kwargs):
    _logger.log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs):
    _logger.debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs):
    _logger.info(msg, *args, **kwargs)


def warn(msg, *args, **kwargs):
    _logger.warning(msg, *args, **kwargs)


warning = warn


def error(msg, *args, **kwargs):
    _logger.error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs):
    _logger.critical(msg, *args, **kwargs)


def vlog(level, msg, *args, **kwargs):
    _logger.log(level, msg, *args, **kwargs)


def log_if(level, msg, condition, *args):
    if condition:
        _logger.log(level, msg, *args)


def _site():
    frame = _sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def log_every_n(level, msg, n, *args):
    """Logs at the first call from a line and every n-th after it."""
    key = _site()
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    log_if(level, msg, count % max(1, int(n)) == 0, *args)


def log_first_n(level, msg, n, *args):
    """Logs the first n calls from a line."""
    key = _site()
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    log_if(level, msg, count < n, *args)


def flush():
    for h in _logger.handlers:
        h.flush()
