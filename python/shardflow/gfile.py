"""TF 1.x's tf.gfile for local files (TF's other file systems, gs:// and hdfs://, raise UnimplementedError).

Exists, IsDirectory, MakeDirs, MkDir, ListDirectory, Glob, Remove, DeleteRecursively, Rename, Copy, Stat,
Walk, and GFile / Open / FastGFile (file objects; "r" reads text, "rb" bytes, as TF's).
"""

import glob as _glob
import os as _os
import shutil as _shutil
import stat as _stat

from . import errors

__all__ = ["Exists", "IsDirectory", "MakeDirs", "MkDir", "ListDirectory", "Glob", "Remove", "DeleteRecursively",
           "Rename", "Copy", "Stat", "Walk", "GFile", "Open", "FastGFile"]


def _local(path):
    path = _os.fspath(path)
    if "://" in str(path):
        raise errors.UnimplementedError(f"tf.gfile: only local files are supported, got {path!r}")
    return path


def _not_found(e, path):
    return errors.NotFoundError(f"{path}: {e.strerror or e}")


def Exists(filename):  # noqa: N802 - TF's names
    return _os.path.exists(_local(filename))


def IsDirectory(dirname):  # noqa: N802
    return _os.path.isdir(_local(dirname))


def MakeDirs(dirname):  # noqa: N802
    _os.makedirs(_local(dirname), exist_ok=True)


def MkDir(dirname):  # noqa: N802
    path = _local(dirname)
    if _os.path.isdir(path):
        return
    try:
        _os.mkdir(path)
    except FileNotFoundError as e:
        raise _not_found(e, path) from None


def ListDirectory(dirname):  # noqa: N802
    path = _local(dirname)
    if not _os.path.isdir(path):
        raise errors.NotFoundError(f"Could not find directory {path}")
    return sorted(_os.listdir(path))


def Glob(filename):  # noqa: N802
    return sorted(_glob.glob(_local(filename)))


def Remove(filename):  # noqa: N802
    path = _local(filename)
    try:
        _os.remove(path)
    except FileNotFoundError as e:
        raise _not_found(e, path) from None


def DeleteRecursively(dirname):  # noqa: N802
    path = _local(dirname)
    if not _os.path.exists(path):
        raise errors.NotFoundError(f"{path}: no such file or directory")
    if _os.path.isdir(path):
        _shutil.rmtree(path)
    else:
        _os.remove(path)


def Rename(oldname, newname, overwrite=False):  # noqa: N802
    old, new = _local(oldname), _local(newname)
    if _os.path.exists(new) and not overwrite:
        raise errors.FailedPreconditionError(f"{new} exists (Rename with overwrite=True to replace it)")
    try:
        _os.replace(old, new)
    except FileNotFoundError as e:
        raise _not_found(e, old) from None


def Copy(oldpath, newpath, overwrite=False):  # noqa: N802
    old, new = _local(oldpath), _local(newpath)
    if _os.path.exists(new) and not overwrite:
        raise errors.FailedPreconditionError(f"{new} exists (Copy with overwrite=True to replace it)")
    try:
        _shutil.copyfile(old, new)
    except FileNotFoundError as e:
        raise _not_found(e, old) from None


class _FileStatistics:
    def __init__(self, st):
        self.length, self.mtime_nsec, self.is_directory = st.st_size, st.st_mtime_ns, _stat.S_ISDIR(st.st_mode)


def Stat(filename):  # noqa: N802
    path = _local(filename)
    try:
        return _FileStatistics(_os.stat(path))
    except FileNotFoundError as e:
        raise _not_found(e, path) from None


def Walk(top, in_order=True):  # noqa: N802
    yield from _os.walk(_local(top), topdown=in_order)


class GFile:
    """A local file with TF's GFile methods (read, readline, readlines, write, flush, close, size, seek, tell)."""

    def __init__(self, name, mode="r"):
        self.name, self.mode = _local(name), mode
        try:
            self._f = open(self.name, mode)
        except FileNotFoundError as e:
            raise _not_found(e, self.name) from None

    def read(self, n=-1):
        return self._f.read(n)

    def readline(self):
        return self._f.readline()

    def readlines(self):
        return self._f.readlines()

    def write(self, data):
        self._f.write(data)

    def flush(self):
        self._f.flush()

    def close(self):
        self._f.close()

    def size(self):
        return _os.path.getsize(self.name)

    def seek(self, offset=None, whence=0, position=None):
        self._f.seek(position if position is not None else offset, whence)

    def tell(self):
        return self._f.tell()

    def __iter__(self):
        return iter(self._f)

    def __next__(self):
        return next(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


Open = GFile
FastGFile = GFile
