"""Replies and read requests as plain JSON objects: what the gRPC server and client exchange.

Commands travel as log_entry.command_to_obj / command_from_obj (the log's own form), so a write
crosses the wire in the same shape it is logged in.
"""
from __future__ import annotations

import base64
from typing import Any, Optional

from logtide.engine.meta.log_entry import _unb64
from logtide.engine.meta.seqv import KVMeta, SeqV
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse, TxnReply)
from logtide.engine.meta.watch import WatchEvent
from logtide.errors import MetaInvalidArgument


def seqv_to_obj(v: Optional[SeqV]):
    if v is None:
        return None
    return {"seq": v.seq, "data": base64.b64encode(v.data).decode("ascii"),
            "expire_at_ms": v.meta.expire_at_ms, "proposed_at_ms": v.meta.proposed_at_ms}


def seqv_from_obj(o) -> Optional[SeqV]:
    if o is None:
        return None
    if not isinstance(o, dict):
        raise MetaInvalidArgument("a SeqV must be an object")
    return SeqV(o["seq"], _unb64(o["data"]), KVMeta(o.get("expire_at_ms"), o.get("proposed_at_ms")))


def upsert_reply_to_obj(r) -> Any:
    return [seqv_to_obj(r[0]), seqv_to_obj(r[1])]


def upsert_reply_from_obj(o):
    return seqv_from_obj(o[0]), seqv_from_obj(o[1])


_RESP = {
    TxnGetResponse: ("get", lambda r: {"key": r.key, "value": seqv_to_obj(r.value)},
                     lambda d: TxnGetResponse(d["key"], seqv_from_obj(d["value"]))),
    TxnPutResponse: ("put", lambda r: {"key": r.key, "prev": seqv_to_obj(r.prev), "current": seqv_to_obj(r.current)},
                     lambda d: TxnPutResponse(d["key"], seqv_from_obj(d["prev"]), seqv_from_obj(d["current"]))),
    TxnDeleteResponse: ("delete", lambda r: {"key": r.key, "success": r.success, "prev": seqv_to_obj(r.prev)},
                        lambda d: TxnDeleteResponse(d["key"], d["success"], seqv_from_obj(d["prev"]))),
    TxnDeleteByPrefixResponse: ("delete_by_prefix", lambda r: {"prefix": r.prefix, "count": r.count},
                                lambda d: TxnDeleteByPrefixResponse(d["prefix"], d["count"])),
    TxnFetchAddU64Response: ("fetch_add_u64",
                             lambda r: {"key": r.key, "before_seq": r.before_seq, "before": r.before,
                                        "after_seq": r.after_seq, "after": r.after},
                             lambda d: TxnFetchAddU64Response(d["key"], d["before_seq"], d["before"],
                                                              d["after_seq"], d["after"])),
}
_RESP_BY_NAME = {name: dec for name, _, dec in _RESP.values()}


def txn_reply_to_obj(r: TxnReply):
    resps = []
    for x in r.responses:
        name, enc, _ = _RESP[type(x)]
        resps.append({name: enc(x)})
    return {"success": r.success, "execution_path": r.execution_path, "responses": resps}


def txn_reply_from_obj(o) -> TxnReply:
    resps = []
    for x in o["responses"]:
        (name, body), = x.items()
        resps.append(_RESP_BY_NAME[name](body))
    return TxnReply(o["success"], tuple(resps), o["execution_path"])


def event_to_obj(e: WatchEvent):
    return {"key": e.key, "prev": seqv_to_obj(e.prev), "current": seqv_to_obj(e.current),
            "init": e.is_initialization}


def event_from_obj(o) -> WatchEvent:
    return WatchEvent(o["key"], seqv_from_obj(o["prev"]), seqv_from_obj(o["current"]), o["init"])
