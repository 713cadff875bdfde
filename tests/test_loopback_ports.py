"""free_ports: distinct ports, below the kernel's ephemeral range, that a server can bind."""
import socket

from logtide.engine.cluster.loopback_ports import free_ports


def _ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = map(int, f.read().split())
    return lo, hi


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    lo, _ = _ephemeral_range()
    for _ in range(20):
        ports = free_ports(5)
        assert len(set(ports)) == 5
        assert all(1024 <= p < lo for p in ports), (ports, lo)
        socks = []
        try:
            for p in ports:      # each is free now: a server binds and listens on it
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
                s.listen()
        finally:
            for s in socks:
                s.close()


def test_a_held_port_is_never_handed_out():
    held = [socket.socket() for _ in range(50)]
    try:
        taken = set()
        for s in held:
            s.bind(("127.0.0.1", free_ports(1)[0]))
            s.listen()
            taken.add(s.getsockname()[1])
        for _ in range(50):
            assert not taken & set(free_ports(8))
    finally:
        for s in held:
            s.close()


def test_ports_handed_to_one_process_are_not_handed_to_another(tmp_path):
    """Two test workers starting replicas at once must not be told the same port: a port handed
    out is claimed across processes for a while. 100 ports to a child, then 1,000 here: drawn at
    random from 10,000 without the claims, about ten would collide."""
    import subprocess
    import sys
    child = subprocess.run(
        [sys.executable, "-c",
         "from logtide.engine.cluster.loopback_ports import free_ports; print(*free_ports(100))"],
        capture_output=True, text=True, timeout=60, check=True,
        cwd=tmp_path)    # not the source tree, whose logtide/ would shadow the installed package
    theirs = set(map(int, child.stdout.split()))
    assert len(theirs) == 100
    ours = set()
    for _ in range(10):
        ours |= set(free_ports(100))
    assert len(ours) == 1000
    assert not ours & theirs


def test_a_stale_claim_is_taken_over(monkeypatch):
    """A claim older than CLAIM_SECONDS holds nothing: its port is handed out again (200 claimed
    ports among 10,000, then 1,000 drawn with every claim stale: about 20 meet one of them)."""
    from logtide.engine.cluster import loopback_ports
    first = set(free_ports(200))
    monkeypatch.setattr(loopback_ports, "CLAIM_SECONDS", 0.0)
    again = set()
    for _ in range(10):
        again |= set(free_ports(100))
    assert first & again
