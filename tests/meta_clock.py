"""A hand-driven millisecond clock for meta-service tests: the proposer's clock and the read clock."""

T0 = 1_700_000_000_000


class ManualClock:
    """Returns `t`; a test moves time by changing `t`."""

    def __init__(self, t: int = T0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t
