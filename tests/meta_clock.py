"""A hand-driven millisecond clock for meta-service tests: the proposer's clock and the read clock."""
import os

T0 = 1_700_000_000_000


class ManualClock:
    """Returns `t`; a test moves time by changing `t`. After share(path), every change is also
    written to `path`, which meta replicas started with --clock-file read as their wall clock."""

    def __init__(self, t: int = T0) -> None:
        self.path = None
        self.t = t

    @property
    def t(self) -> int:
        return self._t

    @t.setter
    def t(self, value: int) -> None:
        self._t = value
        if self.path is not None:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                f.write(str(value))
            os.replace(tmp, self.path)   # readers see the old time or the new one, never a torn one

    def share(self, path) -> None:
        self.path = str(path)
        self.t = self._t

    def __call__(self) -> int:
        return self._t
