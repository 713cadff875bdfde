"""The TN's logtail pull: one table's changes in a ts range, from the newest checkpoint when the
range starts below it (docs/logtail_format.md)."""
from __future__ import annotations

from logtide.engine.logtail.logtail_format import META
from logtide.engine.logtail.logtail_args import ts_arg


class TnPull:
    """TransactionNode's pull (a part of TransactionNode, see tn.py)."""

    def pull(self, table: str, from_ts: int, to_ts: int | None = None) -> dict:
        """Logtail of `table` for (from_ts, to_ts]: {"checkpoint", "from_ts", "to_ts", "entries"}.

        A range that starts before the checkpoint starts after it instead and names the checkpoint.
        A response above max_pull_rows in-memory rows flushes the table first (when to_ts is open).
        TypeError for a ts that is not an int, InvalidArgument (a ValueError) for a negative one.
        """
        self._table(table)
        from_ts = ts_arg("from_ts", from_ts)
        if to_ts is not None:
            to_ts = ts_arg("to_ts", to_ts)
        with self._cv:      # no checkpoint may truncate between choosing the range and visiting it
            resp = self._collect(table, from_ts, self.last_ts if to_ts is None else to_ts)
        if to_ts is None and sum(e.rows for e in resp["entries"]) > self.max_pull_rows:
            self.flush([table])
            with self._cv:
                resp = self._collect(table, from_ts, self.last_ts)
        return resp

    def _collect(self, table: str, from_ts: int, to_ts: int) -> dict:
        # the one rule (docs/logtail_format.md): a response that starts below the newest checkpoint
        # carries it, even when to_ts is below it too; the logtail below it is cut, so the response
        # then reaches the checkpoint's ts (to_ts may come back higher than asked)
        ckp = None
        if self.checkpoint is not None and from_ts < self.checkpoint.ts:
            ckp = self.checkpoint.name
            from_ts = self.checkpoint.ts
            to_ts = max(to_ts, from_ts)
        raw = [e for _, _, es in self.logtail.visit(from_ts, to_ts, table) for e in es]
        # in-memory entries that a flush inside the range already put in objects are left out
        covered = max((e.meta["cleanup_ts"] for e in raw if e.kind == META), default=0)
        entries = [e for e in raw if e.kind == META or e.ts >= covered]
        return {"table": table, "checkpoint": ckp, "from_ts": from_ts, "to_ts": to_ts, "entries": entries}
