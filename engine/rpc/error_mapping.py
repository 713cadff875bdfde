"""Typed errors across the wire.

A LogtideError raised by a servicer travels as a gRPC status (a code chosen by its kind) with its
class name in the trailing metadata and its message as details; the client re-raises the same class.
"""
from __future__ import annotations

import logging

import grpc

from logtide import errors as E

log = logging.getLogger("logtide.rpc")

ERROR_TYPE_KEY = "logtide-error-type"

# most specific first: the first class the error is an instance of picks the status code
_CODES: list[tuple[type, grpc.StatusCode]] = [
    (E.InvalidRange, grpc.StatusCode.OUT_OF_RANGE),
    (E.InvalidTruncateLsn, grpc.StatusCode.FAILED_PRECONDITION),
    (E.RecordTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (E.CorruptionError, grpc.StatusCode.DATA_LOSS),
    (E.LogServiceClosed, grpc.StatusCode.UNAVAILABLE),
    (E.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (E.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (E.LogtideError, grpc.StatusCode.FAILED_PRECONDITION),
]


def status_code(exc: BaseException) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _all_error_classes() -> dict[str, type]:
    found, todo = {}, [E.LogtideError]
    while todo:
        cls = todo.pop()
        found[type_name(cls)] = cls
        todo.extend(cls.__subclasses__())
    return found


def error_class(name: str) -> type | None:
    """The LogtideError subclass of that qualified name, if it is loaded."""
    return _all_error_classes().get(name)


def make_error(name: str, message: str) -> BaseException:
    """Rebuild a typed error on the client; unknown types become RemoteError naming the type."""
    cls = error_class(name)
    if cls is None:
        return E.RemoteError(f"{name}: {message}")
    try:
        return cls(message)
    except TypeError:  # a class whose constructor wants more than the message
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        return exc


def from_rpc_error(err: grpc.RpcError, method: str) -> BaseException:
    """The typed error a failed gRPC call stands for."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    meta = dict(err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else {}
    return from_status(code, meta.get(ERROR_TYPE_KEY), details, method)


def from_status(code: grpc.StatusCode | None, error_type: str | None, details: str, method: str) -> BaseException:
    """The typed error of a status (code, error type name, details): a gRPC call's or a call of a framed batch."""
    if error_type:
        return make_error(error_type, details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return E.MessageTooLarge(f"{method}: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return E.InvalidRequest(f"{method}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return E.DeadlineExceededError(f"{method}: DEADLINE_EXCEEDED: {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return E.RpcError(f"{method}: {code.name}: {details}")
    return E.RemoteError(f"{method}: {code.name if code else 'error'}: {details}")


_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def code_of(number: int) -> grpc.StatusCode | None:
    """The status code of its wire number."""
    return _BY_NUMBER.get(number)


def failure_status(exc: BaseException, path: str) -> tuple[int, str, str]:
    """(code, type, details) of a failed call, as a gRPC status and its trailer would carry it; an
    error that is not a logtide one is a bug of the servicer's: logged, and INTERNAL."""
    if isinstance(exc, E.LogtideError):
        return status_code(exc).value[0], type_name(type(exc)), str(exc)
    log.error("rpc: unexpected %s in %s: %s", type(exc).__name__, path, exc, exc_info=exc)
    return grpc.StatusCode.INTERNAL.value[0], "", f"{type(exc).__name__}: {exc}"
