# SPDX-License-Identifier: MIT
"""gpushm.Error and its subclasses: one per GPUSHM_E_* code of include/gpushm.h.

Each also derives from the built-in exception a Python program would catch for the same
failure (``NotFound`` is a ``FileNotFoundError``, ``Timeout`` a ``TimeoutError``, ...), so
that code written without gpushm in mind handles it.  Every error carries the library's
code (``code``, negative, as C returns it) and the detail the library or the daemon gave
(``detail``: gpushm_last_error_message()).
"""
from __future__ import annotations

import errno as _errno
from typing import Callable, Dict, Optional, Type


class Error(Exception):
    """A gpushm call failed.  ``code``: the GPUSHM_E_* value (negative); ``detail``: what
    the library or gpushmd said about it; ``operation``: what this package was doing."""

    code: int = 0
    detail: str = ""
    operation: str = ""
    # what to add when the message is read: NotFound's "did you mean" asks gpushmd for
    # the names there are, which a caller that polls for a name never needs
    _hint: Optional[Callable[[], str]] = None

    def __str__(self) -> str:
        # one text, as built by make_error(): not OSError's "[Errno N] ..." form
        text = str(self.args[0]) if self.args else ""
        hint, self._hint = self._hint, None
        if hint is not None:
            try:
                extra = hint()
            except Exception:  # (the hint is a courtesy: never an error of its own)
                extra = ""
            if extra:
                text += extra
                self.args = (text,) + tuple(self.args[1:])
        return text


class InvalidArgument(Error, ValueError):
    """GPUSHM_E_INVAL: an argument the library or the daemon refused."""


class NotFound(Error, FileNotFoundError):
    """GPUSHM_E_NOENT: no such buffer (or one the caller may not see)."""


class Exists(Error, FileExistsError):
    """GPUSHM_E_EXIST: the name is taken."""


class PermissionDenied(Error, PermissionError):
    """GPUSHM_E_PERM: the buffer's mode bits or owner say no."""


class OutOfMemory(Error, MemoryError):
    """GPUSHM_E_NOMEM: the daemon's memory budget, the GPU or this process ran out."""


class LimitExceeded(Error):
    """GPUSHM_E_LIMIT: a named limit or a quota (metadata size, buffers per uid, ...)."""


class ProtocolError(Error):
    """GPUSHM_E_PROTO: gpushmd or the library broke the protocol."""


class VersionMismatch(Error):
    """GPUSHM_E_VERSION: gpushmd speaks another protocol version."""


class ConnectFailed(Error, ConnectionError):
    """GPUSHM_E_CONNECT: gpushmd cannot be reached (not running, wrong socket)."""


class Disconnected(Error, ConnectionError):
    """GPUSHM_E_DISCONNECTED: the connection to gpushmd was lost."""


class Unsupported(Error):
    """GPUSHM_E_UNSUPPORTED: the daemon, this host or this process cannot do that."""


class SystemCallFailed(Error, OSError):
    """GPUSHM_E_IO: a system call failed."""


class CudaError(Error):
    """GPUSHM_E_CUDA: the CUDA driver failed (its error name is in ``detail``)."""


class InvalidName(InvalidArgument):
    """GPUSHM_E_NAME: names are 1-127 bytes of [A-Za-z0-9._-], not starting with '.' or
    '-'."""


class Timeout(Error, TimeoutError):
    """GPUSHM_E_TIMEOUT: gpushmd did not answer in time, or a release was not published
    in time (acquire)."""


class SignallerLost(Error):
    """GPUSHM_E_LOST: the value waited for was reached because the connection that
    promised it is gone (its process died, or it closed the buffer owing it), not
    because it was signalled: the buffer holds whatever the lost signaller's work
    left."""


class ManifestError(InvalidArgument):
    """A buffer's tensor manifest (its metadata) is malformed, or describes memory outside
    the buffer.  Producers are not trusted: nothing is mapped past what was checked."""

    code = -1  # GPUSHM_E_INVAL


class ClosedError(Error, ValueError):
    """The handle was closed (or belongs to the parent of this forked process)."""

    code = -1  # GPUSHM_E_INVAL


# GPUSHM_E_<name> -> (number, class, errno of the OSError bases).
_BY_NAME = {
    "INVAL": (1, InvalidArgument, None),
    "NOENT": (2, NotFound, _errno.ENOENT),
    "EXIST": (3, Exists, _errno.EEXIST),
    "PERM": (4, PermissionDenied, _errno.EACCES),
    "NOMEM": (5, OutOfMemory, None),
    "LIMIT": (6, LimitExceeded, None),
    "PROTO": (7, ProtocolError, None),
    "VERSION": (8, VersionMismatch, None),
    "CONNECT": (9, ConnectFailed, _errno.ECONNREFUSED),
    "DISCONNECTED": (10, Disconnected, _errno.ECONNRESET),
    "UNSUPPORTED": (11, Unsupported, None),
    "IO": (12, SystemCallFailed, _errno.EIO),
    "CUDA": (13, CudaError, None),
    "NAME": (14, InvalidName, None),
    "TIMEOUT": (15, Timeout, _errno.ETIMEDOUT),
    "LOST": (16, SignallerLost, None),
}

#: GPUSHM_E_* codes (negative, as the C API returns them) by name: E_NOENT, ...
CODES: Dict[str, int] = {name: -num for name, (num, _, _) in _BY_NAME.items()}
_CLASS_BY_CODE: Dict[int, Type[Error]] = {-num: cls for num, cls, _ in _BY_NAME.values()}
_ERRNO_BY_CODE: Dict[int, Optional[int]] = {-num: e for num, _, e in _BY_NAME.values()}


def _says_its_error(code: int, what: str, detail: str) -> bool:
    """Whether the library's detail already says what strerror would ("invalid buffer
    name: use ...", "unsupported: ...", "no buffer named 'x'"): printing both says it
    twice (as gpushmctl decides, ctl/fail.c)."""
    if detail.lower().startswith(what.lower()):
        return True
    if code == CODES["NOENT"]:
        return detail.startswith("no ")
    if code == CODES["EXIST"]:
        return "already exists" in detail
    if code == CODES["LIMIT"]:
        return "limit" in detail or "quota" in detail
    if code == CODES["UNSUPPORTED"]:
        return detail.startswith("unsupported")
    return False


def make_error(code: int, detail: str, operation: str = "",
               strerror: Optional[str] = None, os_errno: int = 0) -> Error:
    """The exception for a GPUSHM_E_* code (an unknown code: plain Error).  ``os_errno``:
    the system error behind it where the library knows one (a failed connect's ENOENT,
    ECONNREFUSED, EACCES), kept as the OSError's errno instead of the code's usual one."""
    cls = _CLASS_BY_CODE.get(code, Error)
    what = strerror or "error %d" % code
    if detail and _says_its_error(code, what, detail):
        body = detail
    elif detail:
        body = f"{what}: {detail}"
    else:
        body = what
    text = f"{operation}: {body}" if operation else body
    err = cls(text)
    err.code = code
    err.detail = detail
    err.operation = operation
    if isinstance(err, OSError):
        # OSError prints "[Errno N] strerror" once errno is set: the whole text goes there
        err.errno = os_errno or _ERRNO_BY_CODE.get(code)
        err.strerror = text
    return err
