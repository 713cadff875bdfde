"""Which process of a local cluster a HAKeeper store id names.

The processes of `cluster up` heartbeat as `log-N` (the log stores, spares too), `tn-N`,
`cn-N`, `primary-N` and `ro-N` (engine/cluster/roles.py); this maps such an id back to the
process's role and id in D/cluster.json.
"""
from __future__ import annotations

from logtide.engine.cluster.layout import ClusterLayout, ProcessRecord
from logtide.errors import UnknownClusterProcess

_ROLES = {"log": ("logservice", "spare"), "tn": ("tn",), "cn": ("cn",), "primary": ("primary",), "ro": ("ro",)}


def process_of_store(layout: ClusterLayout, store_id: str) -> ProcessRecord:
    """The process that heartbeats as `store_id`; UnknownClusterProcess when the cluster has none."""
    kind, sep, n = store_id.rpartition("-")
    if not sep or kind not in _ROLES or not n.isdigit():
        raise UnknownClusterProcess(f"{store_id!r} names no process of a local cluster "
                                    f"(expected one of {', '.join(k + '-N' for k in _ROLES)})")
    for role in _ROLES[kind]:
        p = layout.get(role, int(n))
        if p is not None:
            return p
    raise UnknownClusterProcess(f"the cluster under {layout.dir} has no process for store {store_id!r}")
