"""SeqV: a value with its global seq and its meta (expiry and proposal time, both on log time)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from logtide.engine.meta.meta_format import EXPIRE_AT_MS_THRESHOLD


@dataclass(frozen=True)
class KVMeta:
    """expire_at_ms: when the key stops existing (None: never); proposed_at_ms: the writing entry's time."""
    expire_at_ms: Optional[int] = None
    proposed_at_ms: Optional[int] = None


@dataclass(frozen=True)
class SeqV:
    """A stored value: the seq of the write that produced it, its bytes and its meta."""
    seq: int
    data: bytes
    meta: KVMeta = KVMeta()

    def is_expired(self, now_ms: int) -> bool:
        """True once `now_ms` is past the expiry (a key expiring at t still exists at t)."""
        exp = self.meta.expire_at_ms
        return exp is not None and exp < now_ms


def expire_at_to_ms(expire_at: int) -> int:
    """Databend's rule: values above 100_000_000_000 are milliseconds, others seconds."""
    return expire_at if expire_at > EXPIRE_AT_MS_THRESHOLD else expire_at * 1000
