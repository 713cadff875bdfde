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
