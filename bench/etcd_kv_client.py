"""etcd's v3 KV calls on a raw gRPC channel, built from bench/etcd_kv.proto's descriptor (what a
generated stub does)."""
from __future__ import annotations

from types import SimpleNamespace


def etcd_kv(channel, pb) -> SimpleNamespace:
    from google.protobuf import message_factory
    svc = pb.DESCRIPTOR.services_by_name["KV"]
    calls = {}
    for m in svc.methods:
        req = message_factory.GetMessageClass(m.input_type)
        resp = message_factory.GetMessageClass(m.output_type)
        calls[m.name] = channel.unary_unary(f"/{svc.full_name}/{m.name}", request_serializer=req.SerializeToString,
                                            response_deserializer=resp.FromString)
    return SimpleNamespace(**calls)
