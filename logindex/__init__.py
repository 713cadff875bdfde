"""LogIndex: the PolarDB page -> LSN index (memtable ring, table files, meta file)."""
from logtide.logindex.manager import MAX_LSN, LogIndex
from logtide.logindex.meta_file import CorruptMetaError, Meta

__all__ = ["MAX_LSN", "CorruptMetaError", "LogIndex", "Meta"]
