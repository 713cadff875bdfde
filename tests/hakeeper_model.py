"""An independent, deliberately plain model of what HAKeeper's checkers should schedule for a state.

It shares no code with engine/hakeeper/checkers: it reads the state's fields and applies the rules
of docs/hakeeper.md as one flat list of candidate actions per shard, each with its priority, and
answers with command *signatures* (kind, target, shard, replica or new-replica store, learner), so
fresh replica ids do not have to match.
"""
from __future__ import annotations

from logtide.engine.hakeeper import CommandType, StoreRole
from logtide.engine.hakeeper.cluster_info import BootstrapState

C = CommandType
NEW = "new"   # a replica id the checker allocates


def is_up(state, cfg, sid: str, role) -> bool:
    s = state.stores.get(sid)
    if s is None or s.role != role:
        return False
    timeout = {StoreRole.LOG: cfg.log_store_timeout, StoreRole.TN: cfg.tn_store_timeout,
               StoreRole.CN: cfg.cn_store_timeout, StoreRole.PRIMARY: cfg.primary_timeout,
               StoreRole.RO: cfg.ro_timeout}[role]
    return max(1, round(timeout * cfg.ticks_per_second)) + s.tick >= state.tick


def runs(state, sid, shard_id):
    """The replica id a log store reports for a shard, or None."""
    rep = state.stores[sid].report
    for r in (rep.replicas if rep is not None else ()):
        if r.shard_id == shard_id:
            return r
    return None


def expected(state, cfg) -> set[tuple]:
    if state.bootstrap != BootstrapState.RUNNING:
        return set()
    flying = list(state.in_flight.values())
    out: set[tuple] = set()
    log_up = sorted(s for s in state.stores if is_up(state, cfg, s, StoreRole.LOG))
    for shard_id, sh in state.shards.items():
        members = {**sh.voters, **sh.learners}
        # starts: every member on an up store that runs nothing of the shard, unless a start is flying
        for rid, sid in members.items():
            if sid in log_up and runs(state, sid, shard_id) is None and not any(
                    c.kind in (C.START_REPLICA, C.START_NON_VOTING_REPLICA) and c.shard_id == shard_id
                    and c.replica_id == rid for c in flying):
                kind = C.START_NON_VOTING_REPLICA if rid in sh.non_voting else C.START_REPLICA
                out.add((kind, sid, shard_id, rid, False))
        # membership: one change, via an up leader, none flying
        if any(c.kind in (C.ADD_REPLICA, C.REMOVE_REPLICA, C.ADD_NON_VOTING_REPLICA, C.REMOVE_NON_VOTING_REPLICA)
               and c.shard_id == shard_id for c in flying):
            continue
        lead = sh.voters.get(sh.leader_id)
        if lead not in log_up:
            continue
        want, want_nv = state.cluster.log_replicas, state.cluster.non_voting_replicas
        good = [r for r, s in sh.voters.items() if s in log_up]
        bad = [r for r, s in sh.voters.items() if s not in log_up]
        learning = {r: s for r, s in sh.learners.items() if r not in sh.non_voting}
        nv = {r: s for r, s in sh.learners.items() if r in sh.non_voting}
        spares = [s for s in log_up if s not in members.values() and runs(state, s, shard_id) is None]
        load = {s: sum(s in {**x.voters, **x.learners}.values() for x in state.shards.values()) for s in spares}
        spare = sorted(spares, key=lambda s: (load[s], s))[0] if spares else None
        lead_rep = runs(state, lead, shard_id)
        lead_lsn = lead_rep.latest_lsn if lead_rep else 0
        candidates = []   # (priority, signature)
        for r, s in learning.items():
            rep = runs(state, s, shard_id) if s in log_up else None
            if rep is not None and rep.replica_id == r and rep.latest_lsn + cfg.promote_lag >= lead_lsn:
                candidates.append(((1, r), (C.ADD_REPLICA, lead, shard_id, r, False)))
        if len(good) + sum(s in log_up for s in learning.values()) < want and spare:
            candidates.append(((2, 0), (C.ADD_REPLICA, lead, shard_id, (NEW, spare), True)))
        if bad and (len(good) >= want or (spare is None and not any(s in log_up for s in learning.values()))):
            candidates.append(((3, min(bad)), (C.REMOVE_REPLICA, lead, shard_id, min(bad), False)))
        if len(good) > want:
            victim = min([r for r in good if r != sh.leader_id] or [sh.leader_id])
            candidates.append(((4, 0), (C.REMOVE_REPLICA, lead, shard_id, victim, False)))
        for r, s in sh.learners.items():
            if s not in log_up:
                candidates.append(((5, r), (C.REMOVE_NON_VOTING_REPLICA, lead, shard_id, r, False)))
        if len(nv) < want_nv and spare:
            candidates.append(((6, 0), (C.ADD_NON_VOTING_REPLICA, lead, shard_id, (NEW, spare), True)))
        if len(nv) > want_nv:
            candidates.append(((7, 0), (C.REMOVE_NON_VOTING_REPLICA, lead, shard_id, min(nv), False)))
        if candidates:
            out.add(min(candidates)[1])
    # zombies: a replica on an up store, outside the membership, behind the shard's epoch
    for sid in log_up:
        rep = state.stores[sid].report
        for r in (rep.replicas if rep is not None else ()):
            sh = state.shards.get(r.shard_id)
            if sh is None or {**sh.voters, **sh.learners}.get(r.replica_id) == sid or r.epoch >= sh.epoch:
                continue
            if not any(c.kind == C.KILL_ZOMBIE and c.shard_id == r.shard_id and c.replica_id == r.replica_id
                       for c in flying):
                out.add((C.KILL_ZOMBIE, sid, r.shard_id, r.replica_id, False))
    # TN: each shard on exactly one up TN store
    tn_up = sorted(s for s in state.stores if is_up(state, cfg, s, StoreRole.TN))
    for shard_id in range(1, state.cluster.tn_shards + 1):
        holders = sorted((dict(state.stores[s].report.shards)[shard_id], s) for s in tn_up
                         if state.stores[s].report is not None and shard_id in dict(state.stores[s].report.shards))
        starting = any(c.kind == C.START_TN and c.shard_id == shard_id for c in flying)
        if not holders and tn_up and not starting:
            # least loaded first; the checker's own choice within this round is not modelled for >1 shard
            out.add((C.START_TN, "*", shard_id, NEW, False))
        if not holders and not tn_up and not starting:
            # no TN store works: the first working log store restarts the down one with the newest replica
            log_up = sorted(s for s in state.stores if is_up(state, cfg, s, StoreRole.LOG))
            last = sorted((dict(state.stores[s].report.shards)[shard_id], s) for s in state.stores
                          if state.stores[s].role == StoreRole.TN and state.stores[s].report is not None
                          and shard_id in dict(state.stores[s].report.shards))
            if log_up and last:
                out.add((C.START_TN, log_up[0], shard_id, last[-1], False))
        if len(holders) > 1 and not any(c.kind == C.STOP_TN and c.shard_id == shard_id for c in flying):
            for rid, s in holders[:-1]:
                out.add((C.STOP_TN, s, shard_id, rid, False))
    for sid, s in state.stores.items():
        if s.role == StoreRole.CN and not is_up(state, cfg, sid, StoreRole.CN):
            out.add((C.DELETE_CN_STORE, sid, 0, 0, False))
        if s.role == StoreRole.RO and not is_up(state, cfg, sid, StoreRole.RO):
            out.add((C.DROP_RO_NODE, sid, 0, 0, False))
    return out


def signature(c, state) -> tuple:
    """A checker command as the model's signature (new replica ids replaced by NEW)."""
    if c.kind in (C.ADD_REPLICA, C.ADD_NON_VOTING_REPLICA) and c.learner:
        return (c.kind, c.target, c.shard_id, (NEW, c.replica_store), True)
    if c.kind == C.START_TN and state.stores.get(c.target) is not None \
            and state.stores[c.target].role == StoreRole.LOG:
        return (c.kind, c.target, c.shard_id, (c.replica_id, c.replica_store), False)
    if c.kind == C.START_TN:
        return (c.kind, "*", c.shard_id, NEW, False)
    if c.kind in (C.DELETE_CN_STORE, C.DROP_RO_NODE):
        return (c.kind, c.target, 0, 0, False)
    return (c.kind, c.target, c.shard_id, c.replica_id, False)
