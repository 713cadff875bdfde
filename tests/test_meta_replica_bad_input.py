"""A 3-replica meta-service group of real processes given bad input between replicas and from
clients: malformed forwarded requests (membership changes too), a forward that would loop (sent
to a follower), requests naming unknown members, membership changes that cannot be made, bad
watch cursors, bad read consistency. Each gets a typed error, no replica crashes, and the
group keeps serving. Also: the leader's address in the gRPC header of a follower's reply, the
status command, and a client given only a follower's address."""
import subprocess

import grpc
import pytest

from logtide import connect_meta
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.replica_server import LEADER_HEADER, META_FORWARD
from logtide.engine.meta.server import META
from logtide.engine.rpc import connect
from logtide.errors import MetaForwardRefused, MetaInvalidArgument, MetaMembershipRefused, MetaUnknownMember

from meta_cluster import LOGTIDE, MetaCluster, wait_ready


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = MetaCluster(tmp_path_factory.mktemp("meta_bad_input"))
    wait_ready(c)
    yield c
    c.stop()


def _forward(cluster, i, **fields):
    c = connect(META_FORWARD, cluster.addr(i), carrier="wire", timeout=10)   # replicas forward on the framed carrier only
    try:
        return c.invoke("Forward", pb.ForwardRequest(**fields))
    finally:
        c.close()


def _ok(fields=None):
    base = dict(method="Upsert", request=pb.UpsertRequest(key="fwd", update=b"v").SerializeToString(),
                from_id=2, timeout_ms=5000)
    base.update(fields or {})
    return base


@pytest.mark.parametrize("fields, error", [
    ({"request": b"\xff\xff\xff garbage"}, MetaInvalidArgument),     # not an UpsertRequest
    ({"method": "Watch"}, MetaInvalidArgument),                       # not forwardable
    ({"method": "DropEverything"}, MetaInvalidArgument),              # no such method
    ({"method": ""}, MetaInvalidArgument),
    ({"timeout_ms": 0}, MetaInvalidArgument),                         # no deadline to keep
    ({"from_id": 99}, MetaUnknownMember),                             # not a member of the group
    ({"from_id": 0}, MetaUnknownMember),
    ({"request": pb.UpsertRequest(key="k" * 5000, update=b"v").SerializeToString()}, MetaInvalidArgument),
    ({"method": "Txn", "request": pb.TxnRequest(if_then=[pb.TxnOp()]).SerializeToString()}, MetaInvalidArgument),
    # membership changes: a bad op, node 0, a bad address, members that do not exist
    ({"method": "ChangeMember", "request": pb.MemberRequest(op="nuke", node_id=4).SerializeToString()},
     MetaInvalidArgument),
    ({"method": "ChangeMember",
      "request": pb.MemberRequest(op="add_learner", node_id=0, address="127.0.0.1:1").SerializeToString()},
     MetaInvalidArgument),
    ({"method": "ChangeMember",
      "request": pb.MemberRequest(op="add_learner", node_id=5, address="no port").SerializeToString()},
     MetaInvalidArgument),
    ({"method": "ChangeMember", "request": pb.MemberRequest(op="remove", node_id=99).SerializeToString()},
     MetaUnknownMember),
    ({"method": "ChangeMember", "request": pb.MemberRequest(op="promote", node_id=99).SerializeToString()},
     MetaUnknownMember),
    ({"method": "ChangeMember", "request": b"\x08\x01 not a MemberRequest"}, MetaInvalidArgument),
])
def test_malformed_forwarded_requests_get_typed_errors(cluster, fields, error):
    lead = cluster.leader()
    with connect_meta(cluster.addrs()) as c:
        seq = c.seq
        with pytest.raises(error):
            _forward(cluster, lead, **_ok(fields))
        assert c.seq == seq                      # nothing was applied
        m = c.members()
        assert m["voters"] == [1, 2, 3] and m["learners"] == []
        assert c.upsert("after-bad", b"ok")[1].seq == seq + 1
    assert all(p.poll() is None for p in cluster.procs.values()), "a replica crashed"


def test_a_forward_to_a_follower_is_refused_not_forwarded_again(cluster):
    lead = cluster.leader()
    follower = next(i for i in cluster.ports if i != lead)
    with pytest.raises(MetaForwardRefused, match=f"leader {lead} at {cluster.addr(lead)}"):
        _forward(cluster, follower, **_ok({"from_id": lead}))
    with connect_meta(cluster.addrs()) as c:
        assert c.get("fwd") is None              # refused: not applied anywhere
    # the client follows the leader a refusal names
    with connect_meta(cluster.addr(follower)) as c:
        _prev, res = c.upsert("via-follower", b"x")
        assert c.leader == cluster.addr(lead) and res.data == b"x"


def test_bad_membership_changes_and_watches_through_any_replica(cluster):
    """Sent to each replica (a follower forwards them): typed errors, membership unchanged."""
    for i in cluster.ports:
        with connect_meta(cluster.addr(i), follow_leader=False, timeout=20) as c:
            with pytest.raises(MetaUnknownMember):
                c.remove_member(42)
            with pytest.raises(MetaUnknownMember):
                c.promote_member(42)
            with pytest.raises(MetaInvalidArgument):
                c.add_learner(5, "127.0.0.1")            # no port
            with pytest.raises(MetaInvalidArgument):
                c.add_learner(-1, "127.0.0.1:1")
            with pytest.raises(MetaMembershipRefused):   # already a voter
                c.add_learner(i, cluster.addr(i))
            with pytest.raises(MetaInvalidArgument):
                c.watch("a", after=(-1, 0))
            assert c.members()["voters"] == [1, 2, 3]
        raw = connect(META, cluster.addr(i), timeout=10)
        try:
            with pytest.raises(MetaInvalidArgument):
                raw.invoke("ChangeMember", pb.MemberRequest(op="", node_id=1))
        finally:
            raw.close()
        with connect_meta(cluster.addr(i), follow_leader=False, timeout=20) as c:
            with pytest.raises(MetaInvalidArgument):     # a resume and a flush at once: refused by the replica
                c.watch("a", initial_flush=True, after=(1, 0)).close()
    assert all(p.poll() is None for p in cluster.procs.values()), "a replica crashed"


def test_bad_consistency_is_a_typed_error_on_every_replica(cluster):
    for i in cluster.ports:
        c = connect(META, cluster.addr(i), timeout=10)
        try:
            with pytest.raises(MetaInvalidArgument):
                c.invoke("Get", pb.GetRequest(key="a", consistency="eventual"))
            with pytest.raises(MetaInvalidArgument):
                c.invoke("List", pb.ListRequest(prefix="", consistency="LINEARIZABLE"))
        finally:
            c.close()
    with connect_meta(cluster.addrs()) as c:
        with pytest.raises(MetaInvalidArgument):
            c.get("a", consistency="sometimes")


def test_a_follower_names_the_leader_in_the_grpc_header_and_the_reply(cluster):
    lead = cluster.leader()
    follower = next(i for i in cluster.ports if i != lead)
    with grpc.insecure_channel(cluster.addr(follower)) as ch:
        upsert = ch.unary_unary("/logtide.meta.MetaService/Upsert",
                                request_serializer=pb.UpsertRequest.SerializeToString,
                                response_deserializer=pb.UpsertReply.FromString)
        reply, call = upsert.with_call(pb.UpsertRequest(key="hdr", update=b"1"), timeout=10)
        assert dict(call.initial_metadata())[LEADER_HEADER] == cluster.addr(lead)
        assert reply.leader == cluster.addr(lead) and reply.result.data == b"1"


def test_stale_reads_on_a_follower_and_linearizable_reads_through_it(cluster):
    lead = cluster.leader()
    follower = next(i for i in cluster.ports if i != lead)
    with connect_meta(cluster.addr(follower), follow_leader=False) as c:
        _p, res = c.upsert("lin", b"v1")
        assert c.get("lin").seq == res.seq            # forwarded, after a ReadIndex barrier on the leader
        st = c.status()
        assert st.role == "leader" and st.seq >= res.seq
        cluster.wait_applied(st.applied_index, ids=[follower])
        assert c.get("lin", consistency="stale").seq == res.seq
        own = c.status("stale")
        assert own.role == "follower" and own.id == follower and own.leader == cluster.addr(lead)


def test_status_command_prints_every_replica(cluster):
    cluster.leader()
    out = subprocess.run([LOGTIDE, "meta", "status", *(cluster.addr(i) for i in cluster.ports), "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60, cwd=cluster.tmp)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and len(lines) == 4, out.stdout + out.stderr
    assert all(k in l for l in lines[:3] for k in ("term", "leader", "commit", "applied", "lag"))
    assert [l.split()[3] for l in lines[:3]].count("leader") == 1
    assert "unreachable" in lines[3]
