"""What a transaction returns: TxnReply and one response per executed op."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

from logtide.engine.meta.seqv import SeqV


@dataclass(frozen=True)
class TxnGetResponse:
    key: str
    value: Optional[SeqV]


@dataclass(frozen=True)
class TxnPutResponse:
    key: str
    prev: Optional[SeqV]
    current: Optional[SeqV]


@dataclass(frozen=True)
class TxnDeleteResponse:
    key: str
    success: bool
    prev: Optional[SeqV]


@dataclass(frozen=True)
class TxnDeleteByPrefixResponse:
    prefix: str
    count: int


@dataclass(frozen=True)
class TxnFetchAddU64Response:
    key: str
    before_seq: int
    before: int
    after_seq: int
    after: int


TxnResponse = Union[TxnGetResponse, TxnPutResponse, TxnDeleteResponse, TxnDeleteByPrefixResponse,
                    TxnFetchAddU64Response]


@dataclass(frozen=True)
class TxnReply:
    """success: whether the taken path is a branch or `then`; execution_path: "operation:i", "then" or "else"."""
    success: bool
    responses: Tuple[TxnResponse, ...]
    execution_path: str
