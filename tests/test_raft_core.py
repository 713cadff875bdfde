"""The Raft core, feature by feature, on real RawNodes over a lock-step network (tests/raft_harness.py)."""
import os
import sys

import pytest

from logtide.engine.raft import ADD_LEARNER, ADD_VOTER, REMOVE, ConfChange, Entry, MemoryStorage, Message
from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import MalformedMessage, NotLeader, ProposalDropped, ReadyOutstanding, UnknownPeer
from logtide.engine.raft.messages import Snapshot, SnapshotMeta, ConfState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from raft_harness import Net  # noqa: E402


def test_elects_one_leader_and_replicates_in_order():
    net = Net([1, 2, 3])
    lead = net.elect()
    terms = {n.raft.term for n in net.nodes.values()}
    assert len(terms) == 1 and sum(n.raft.state == M.LEADER for n in net.nodes.values()) == 1
    for k in range(20):
        net.nodes[lead].propose(b"cmd%d" % k)
    net.settle()
    want = [b"cmd%d" % k for k in range(20)]
    assert all(net.data(i) == want for i in net.nodes)
    idx = [[e.index for e in net.applied[i]] for i in net.nodes]
    assert idx[0] == idx[1] == idx[2] == list(range(1, idx[0][-1] + 1))


def test_ready_contract_nothing_leaves_before_advance():
    st = MemoryStorage.bootstrap([1])
    net = Net([1])
    n = net.add(1, st)
    n.campaign()
    rd = n.ready()
    assert not hasattr(rd, "messages") and not hasattr(rd, "committed_entries")
    assert rd.must_sync and rd.hard_state is not None and rd.hard_state.vote == 1
    with pytest.raises(ReadyOutstanding):
        n.tick()
    with pytest.raises(ReadyOutstanding):
        n.propose(b"x")
    with pytest.raises(ReadyOutstanding):
        n.ready()
    st.set_hard_state(rd.hard_state)
    st.append(rd.entries)
    n.advance(rd)
    # a single-voter leader: its proposal commits only once the driver says it is durable
    index, term = n.propose(b"payload")
    rd = n.ready()
    assert [e.data for e in rd.entries][-1] == b"payload"
    assert n.raft.log.committed < index
    st.append(rd.entries)
    out = n.advance(rd)
    assert n.raft.log.committed >= index
    assert out.committed_entries[-1].index == index and out.committed_entries[-1].term == term
    with pytest.raises(ReadyOutstanding):
        n.advance(rd)  # a Ready is advanced exactly once


def test_votes_are_sent_only_after_the_vote_is_in_the_ready():
    net = Net([1, 2, 3])
    n2 = net.nodes[2]
    n2.step(Message(M.VOTE, to=2, frm=1, term=5, index=99, log_term=4))
    rd = n2.ready()
    assert rd.hard_state.term == 5 and rd.hard_state.vote == 1 and rd.must_sync
    net.stores[2].set_hard_state(rd.hard_state)
    out = n2.advance(rd)
    assert [(m.type, m.to, m.reject) for m in out.messages] == [(M.VOTE_RESP, 1, False)]
    # after a restart from storage the vote is still there: node 2 refuses a second candidate
    n2 = net.restart(2)
    n2.step(Message(M.VOTE, to=2, frm=3, term=5, index=99, log_term=4))
    rd = n2.ready()
    out = n2.advance(rd)
    assert [(m.type, m.reject) for m in out.messages] == [(M.VOTE_RESP, True)]


def test_prevote_keeps_a_partitioned_node_from_raising_terms():
    net = Net([1, 2, 3])
    lead = net.elect()
    term = net.nodes[lead].raft.term
    other = next(i for i in net.nodes if i != lead)
    net.isolate(other)
    net.tick(60)
    assert net.nodes[other].raft.term == term  # pre-votes failed, the term never moved
    net.heal()
    net.tick(5)
    assert net.leader() == lead and net.nodes[lead].raft.term == term


def test_check_quorum_deposes_an_isolated_leader_and_lease_ignores_disruptors():
    net = Net([1, 2, 3])
    lead = net.elect()
    net.isolate(lead)
    net.tick(40)
    assert net.nodes[lead].raft.state != M.LEADER  # stepped down: no quorum heard from
    new = net.leader()
    assert new and new != lead
    # a vote request of a higher term, without transfer, is ignored inside the leader lease
    follower = next(i for i in net.nodes if i not in (new, lead))
    before = net.nodes[follower].raft.term
    net.nodes[follower].step(Message(M.VOTE, to=follower, frm=lead, term=before + 5, index=1000, log_term=1000))
    assert net.nodes[follower].raft.term == before
    net.heal()
    net.tick(5)
    assert net.leader() == new


def test_read_index_needs_a_quorum():
    net = Net([1, 2, 3])
    lead = net.elect()
    net.nodes[lead].propose(b"w")
    net.settle()
    commit = net.nodes[lead].raft.log.committed
    net.nodes[lead].read_index(b"ctx-1")
    net.settle()
    assert [(r.index, r.context) for r in net.read_states[lead]] == [(commit, b"ctx-1")]
    follower = next(i for i in net.nodes if i != lead)
    net.nodes[follower].read_index(b"ctx-2")
    net.settle()
    assert [(r.index, r.context) for r in net.read_states[follower]] == [(commit, b"ctx-2")]
    # a leader cut off from everyone cannot confirm it still leads: no read comes out
    net.isolate(lead)
    net.nodes[lead].read_index(b"ctx-3")
    net.settle()
    assert [r.context for r in net.read_states[lead]] == [b"ctx-1"]


def test_leadership_transfer():
    net = Net([1, 2, 3])
    lead = net.elect()
    target = next(i for i in net.nodes if i != lead)
    term = net.nodes[lead].raft.term
    net.nodes[lead].transfer_leader(target)
    net.settle()
    assert net.leader() == target and net.nodes[target].raft.term == term + 1
    with pytest.raises(NotLeader) as ei:
        net.nodes[lead].propose(b"x")
    assert ei.value.leader == target


def test_learner_joins_is_promoted_then_an_old_member_is_removed():
    net = Net([1, 2, 3])
    lead = net.elect()
    for k in range(10):
        net.nodes[lead].propose(b"a%d" % k)
    net.settle()
    net.add(4, MemoryStorage())
    net.nodes[lead].propose_conf_change(ConfChange(ADD_LEARNER, 4))
    with pytest.raises(ProposalDropped):  # one change at a time
        net.nodes[lead].propose_conf_change(ConfChange(ADD_VOTER, 4))
    net.settle()
    assert net.nodes[4].raft.conf.learners == {4} and net.data(4) == net.data(lead)
    assert 4 not in net.nodes[lead].raft.conf.voters
    net.tick(30, only={4})  # a learner never campaigns
    assert net.nodes[4].raft.state == M.FOLLOWER and net.nodes[4].raft.term == net.nodes[lead].raft.term
    net.nodes[lead].propose_conf_change(ConfChange(ADD_VOTER, 4))
    net.settle()
    assert net.nodes[lead].raft.conf.voters == {1, 2, 3, 4}
    victim = next(i for i in (1, 2, 3) if i != lead)
    net.nodes[lead].propose_conf_change(ConfChange(REMOVE, victim))
    net.settle()
    for i in net.nodes:
        if i != victim:
            assert net.nodes[i].raft.conf.voters == {1, 2, 3, 4} - {victim}
    del net.nodes[victim]
    net.nodes[lead].propose(b"after")
    net.settle()
    assert net.data(4)[-1] == b"after"


def test_leader_removing_itself_steps_down():
    net = Net([1, 2, 3])
    lead = net.elect()
    net.nodes[lead].propose_conf_change(ConfChange(REMOVE, lead))
    net.settle()
    assert net.nodes[lead].raft.state == M.FOLLOWER
    del net.nodes[lead]
    new = net.elect()
    assert new != lead and net.nodes[new].raft.conf.voters == {1, 2, 3} - {lead}


def test_lagging_follower_catches_up_through_a_snapshot():
    net = Net([1, 2, 3])
    lead = net.elect()
    lag = next(i for i in net.nodes if i != lead)
    net.isolate(lag)
    for k in range(30):
        net.nodes[lead].propose(b"s%d" % k)
    net.settle()
    # every live node snapshots its state machine and compacts its log
    for i in net.nodes:
        if i == lag:
            continue
        applied = net.applied[i][-1].index
        st = net.stores[i]
        st.create_snapshot(applied, net.nodes[i].conf_at(applied), b"|".join(net.data(i)))
        st.compact(applied)
        net.nodes[i].compacted()
    net.heal()
    net.tick(3)
    snaps = [m for m in net.sent if m.type == M.SNAP and m.to == lag]
    assert snaps and net.stores[lag].snapshot().data == b"|".join(net.data(lead))
    net.nodes[lead].propose(b"tail")
    net.settle()
    assert net.applied[lag][-1].data == b"tail"
    assert net.nodes[lag].raft.log.committed == net.nodes[lead].raft.log.committed


def test_malformed_and_foreign_messages_are_refused_without_change():
    net = Net([1, 2, 3])
    lead = net.elect()
    f = next(i for i in net.nodes if i != lead)
    n = net.nodes[f]
    term, last, commit = n.raft.term, n.raft.log.last_index(), n.raft.log.committed
    bad = [
        (Message(99, to=f, frm=lead, term=term), MalformedMessage),
        (Message(M.HUP, to=f, frm=lead, term=term), MalformedMessage),
        (Message(M.APP, to=f, frm=lead, term=-1), MalformedMessage),
        (Message(M.APP, to=f, frm=lead, term=term, index=last, log_term=term,
                 entries=[Entry(term, last + 5, 0, b"gap")]), MalformedMessage),
        (Message(M.APP, to=f, frm=lead, term=term, index=last, log_term=term,
                 entries=[Entry(term + 3, last + 1, 0, b"future")]), MalformedMessage),
        (Message(M.APP, to=f, frm=lead, term=term, index=last, log_term=term,
                 entries=[Entry(term, last + 1, 7, b"type")]), MalformedMessage),
        (Message(M.SNAP, to=f, frm=lead, term=term, snapshot=Snapshot(SnapshotMeta(0, 0, ConfState()))),
         MalformedMessage),
        (Message(M.HEARTBEAT, to=f, frm=0, term=term), UnknownPeer),
        (Message(M.HEARTBEAT, to=f + 10, frm=lead, term=term), UnknownPeer),
        (Message(M.HEARTBEAT, to=f, frm=lead, term=term, commit="1"), MalformedMessage),
    ]
    for m, err in bad:
        with pytest.raises(err):
            n.step(m)
    assert (n.raft.term, n.raft.log.last_index(), n.raft.log.committed) == (term, last, commit)
    assert not n.raft.msgs
    # a message from a node that is not a member changes nothing either
    n.step(Message(M.APP_RESP, to=f, frm=42, term=term, index=10**6))
    assert (n.raft.term, n.raft.log.last_index()) == (term, last)


def test_stale_term_messages_are_answered_with_the_current_term():
    net = Net([1, 2, 3])
    lead = net.elect()
    f = next(i for i in net.nodes if i != lead)
    n = net.nodes[f]
    # a leader from an older term that comes back is told the new term and steps down
    old = net.nodes[lead]
    net.isolate(lead)
    net.tick(40)
    new = net.leader()
    assert new != lead
    net.heal()
    old.step(Message(M.HEARTBEAT, to=lead, frm=new, term=net.nodes[new].raft.term))
    assert old.raft.state == M.FOLLOWER and old.raft.term == net.nodes[new].raft.term
    # and a message of a term below ours changes nothing
    before = (n.raft.term, n.raft.log.last_index(), n.raft.lead)
    n.step(Message(M.APP, to=f, frm=lead, term=1, index=n.raft.log.last_index(), log_term=1,
                   entries=[Entry(1, n.raft.log.last_index() + 1, 0, b"stale")]))
    assert (n.raft.term, n.raft.log.last_index(), n.raft.lead) == before


def test_conflicting_uncommitted_entries_are_replaced():
    net = Net([1, 2, 3])
    lead = net.elect()
    net.isolate(lead)
    for k in range(3):
        net.nodes[lead].propose(b"lost%d" % k)  # never reach a majority
    net.settle()
    net.tick(40)
    new = net.leader()
    assert new != lead
    net.nodes[new].propose(b"kept")
    net.settle()
    net.heal()
    net.tick(5)
    for i in net.nodes:
        assert b"kept" in net.data(i) and not any(d.startswith(b"lost") for d in net.data(i))
    logs = [[(e.index, e.term) for e in net.stores[i].ents[1:]] for i in net.nodes]
    assert logs[0] == logs[1] == logs[2]


def test_a_leader_that_cannot_commit_refuses_proposals_past_its_uncommitted_bound():
    """Config.max_uncommitted_size: while no quorum acknowledges, the leader's log stops growing
    at the bound (ProposalDropped), and takes proposals again once its tail commits."""
    net = Net([1, 2, 3], max_uncommitted_size=100)
    lead = net.elect()
    node = net.nodes[lead]
    for i in net.nodes:
        if i != lead:
            net.isolate(i)
    taken = 0
    with pytest.raises(ProposalDropped, match="uncommitted"):
        for _ in range(50):
            node.propose(b"x" * 30)
            taken += 1
            net.settle()
    assert taken == 3  # 90 bytes fit under 100; a fourth would make 120
    last = node.raft.log.last_index()
    with pytest.raises(ProposalDropped):
        node.propose(b"y" * 11)  # 101 bytes
    assert node.raft.log.last_index() == last
    net.heal()
    net.tick(2)
    assert node.raft.log.committed == last
    node.propose(b"z" * 30)  # the tail committed: proposals are taken again
    net.settle()
    assert net.data(lead)[-4:] == [b"x" * 30] * 3 + [b"z" * 30]


def test_a_single_entry_larger_than_the_bound_still_goes_through():
    net = Net([1, 2, 3], max_uncommitted_size=10)
    lead = net.elect()
    net.nodes[lead].propose(b"big" * 20)
    net.settle()
    assert all(net.data(i)[-1] == b"big" * 20 for i in net.nodes)


def _ticks_to_new_leader(net, dead: int, hint: bool) -> int:
    """Ticks after `dead` (the leader) stops until another node leads; with hint, the survivors are
    told at once that its process is gone (report_leader_gone, as the transport does on a refused
    connection)."""
    net.isolate(dead)
    if hint:
        for i, n in net.nodes.items():
            if i != dead:
                n.report_leader_gone(dead)
    for t in range(1, 200):
        net.tick(only=[i for i in net.nodes if i != dead])
        new = [i for i, n in net.nodes.items() if i != dead and n.raft.state == M.LEADER]
        if new:
            return t
    raise AssertionError("no new leader")


def test_a_leader_known_gone_is_replaced_without_waiting_out_its_lease():
    """Told that the leader's process is gone, followers stop defending its lease: the first to
    reach its randomized timeout wins at once, before a whole election timeout since the last
    heartbeat. Measured over seeds against the same networks without the hint (a split vote can
    still cost a round, as in any election)."""
    with_hint, without = [], []
    for seed in range(12):
        for hint, out in ((True, with_hint), (False, without)):
            net = Net([1, 2, 3], election_tick=10, seed=seed)
            lead = net.elect()
            out.append(_ticks_to_new_leader(net, lead, hint))
    assert min(without) >= 10                      # at least one election timeout after the last heartbeat
    assert sorted(with_hint)[len(with_hint) // 2] <= 5 and sum(with_hint) * 2 < sum(without), (with_hint, without)


def test_a_leader_gone_hint_about_another_node_or_on_a_leader_changes_nothing():
    net = Net([1, 2, 3])
    lead = net.elect()
    follower = next(i for i in net.nodes if i != lead)
    other = next(i for i in net.nodes if i not in (lead, follower))
    before = net.nodes[follower].raft.election_elapsed
    net.nodes[follower].report_leader_gone(other)        # not its leader: the lease stands
    assert net.nodes[follower].raft.election_elapsed == before
    net.nodes[lead].report_leader_gone(follower)        # a leader has no lease to drop
    net.tick(3)
    assert net.leader() == lead
    # a vote of a higher term is still refused inside the lease of a live leader
    t = net.nodes[follower].raft.term
    net.nodes[follower].step(Message(M.VOTE, to=follower, frm=other, term=t + 3, index=1000, log_term=1000))
    assert net.nodes[follower].raft.term == t


def test_a_probe_rejected_below_match_never_sends_next_at_or_under_match():
    """Probe state: a rejection whose hint lies under the follower's acknowledged match (a reordered,
    older reply) moves next back only to match + 1, as etcd does; it used to go to hint + 1, at or
    under match, and a slow follower then spent its round trips on entries it already held."""
    from logtide.engine.raft.progress import PROBE, REPLICATE, Progress
    pr = Progress(next_index=1, max_inflight=8)
    pr.maybe_update(293)
    pr.become_probe()
    assert (pr.state, pr.match, pr.next) == (PROBE, 293, 294)
    assert not pr.maybe_decr_to(300, 291)            # not the probe in flight: stale
    assert pr.maybe_decr_to(293, 291) and pr.next == 294
    pr.next = 320                                    # a probe far ahead, refused with the follower's end
    assert pr.maybe_decr_to(319, 296) and pr.next == 297
    assert pr.match < pr.next
    pr.become_replicate()
    pr.next = 310
    assert not pr.maybe_decr_to(293, 291)            # replicate: at or under match is stale
    assert pr.maybe_decr_to(300, 291) and (pr.match, pr.next) == (293, 294)
    assert pr.state == REPLICATE                     # the caller turns it to probe
