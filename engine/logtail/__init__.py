"""Logtail: a transaction node (TN) streams row changes and object metadata to compute nodes (CN)."""
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.cn import ComputeNode
from logtide.engine.logtail.partition_state import PartitionState
from logtide.engine.logtail.reference import ReferenceModel
from logtide.engine.logtail.tn import TransactionNode

__all__ = ["ComputeNode", "PartitionState", "ReferenceModel", "TableDef", "TransactionNode"]
