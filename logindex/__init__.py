"""LogIndex: the PolarDB page -> LSN index (memtable ring, table files, meta file)."""
