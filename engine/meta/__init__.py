"""The meta-service: Databend's KV semantics (seq, MatchSeq, TTL on log time, transactions, watch)."""
from logtide.engine.meta.command import Branch, BoolExpr, Condition, MetaSpec, TxnCmd, UpsertCmd, cond, op
from logtide.engine.meta.match_seq import ANY, AS_IS, DELETE, GE, Exact
from logtide.engine.meta.node_info import NodeInfo
from logtide.engine.meta.seqv import KVMeta, SeqV
from logtide.engine.meta.service import MetaService
from logtide.engine.meta.state_machine import MetaStateMachine
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse, TxnReply)
from logtide.engine.meta.watch import ALL, FLUSH_MARKER, UPDATE, WatchEvent, Watcher

__all__ = [
    "ALL", "ANY", "AS_IS", "BoolExpr", "Branch", "Condition", "DELETE", "Exact", "FLUSH_MARKER", "GE", "KVMeta",
    "MetaService", "MetaSpec", "MetaStateMachine", "NodeInfo", "SeqV", "TxnCmd", "TxnDeleteByPrefixResponse",
    "TxnDeleteResponse", "TxnFetchAddU64Response", "TxnGetResponse", "TxnPutResponse", "TxnReply", "UPDATE", "UpsertCmd",
    "WatchEvent", "Watcher", "cond", "op",
]
