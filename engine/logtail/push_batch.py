"""Push batching: the entries of one push message, merged into one batch per table and kind.

A push update covers many commits. Sending one Arrow batch per commit costs an IPC stream (and on
the CN a B-tree insert) per commit; merged, it costs one per table and kind. Every row keeps its
own `__ts`, so nothing is lost. A CN applies inserts and deletes by (row id, ts) keys, so within a
run of row entries their order does not matter; a META entry (a flush) is a boundary, because it
drops in-memory rows below its cleanup ts: rows before it and rows after it are merged separately.
"""
from __future__ import annotations

from logtide.engine.logtail.logtail_format import DELETE, INSERT, META, Entry, concat_batches


def merge_entries(entries: list[Entry]) -> list[Entry]:
    """Entries in commit order -> the same changes with one insert and one delete batch per run
    between META entries. A merged entry's ts is the newest commit ts in it."""
    out: list[Entry] = []
    run: dict[str, list[Entry]] = {INSERT: [], DELETE: []}

    def close_run() -> None:
        for kind in (INSERT, DELETE):
            es = run[kind]
            if len(es) == 1:
                out.append(es[0])
            elif es:
                out.append(Entry(kind, es[-1].ts, concat_batches(es)))
            run[kind] = []
    for e in entries:
        if e.kind == META:
            close_run()
            out.append(e)
        else:
            run[e.kind].append(e)
    close_run()
    return out
