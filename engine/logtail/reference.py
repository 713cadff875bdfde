"""The reference model of a table: a dict of committed versions, read at any ts."""
from __future__ import annotations

import pyarrow as pa


class ReferenceModel:
    """pk -> [(commit ts, row dict or None for a delete)], in commit order."""

    def __init__(self, columns: list[str], pk: str) -> None:
        self.columns = columns
        self.pk = pk
        self.versions: dict[int, list] = {}

    def commit(self, ts: int, upserts: list[dict], deletes: list[int]) -> None:
        for pk in deletes:
            self.versions.setdefault(pk, []).append((ts, None))
        for row in upserts:
            self.versions.setdefault(row[self.pk], []).append((ts, dict(row)))

    def at(self, ts: int) -> dict:
        out = {}
        for pk, vs in self.versions.items():
            row = None
            for t, r in vs:
                if t > ts:
                    break
                row = r
            if row is not None:
                out[pk] = row
        return out

    @staticmethod
    def rows_of(table: pa.Table, pk: str) -> dict:
        """A read result as pk -> row, for comparing with at(); a repeated pk raises."""
        d = table.to_pydict()
        out = {}
        for i, k in enumerate(d[pk]):
            if k in out:
                raise AssertionError(f"primary key {k} appears twice")
            out[k] = {c: d[c][i] for c in d}
        return out
