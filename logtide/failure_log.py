"""How often a background loop that retries a peer logs its failures."""


def worth_logging(failures: int) -> bool:
    """Whether the failures-th failure in a row is logged: the first three, then every thirtieth, so
    a peer that stays down for long gives a line now and then, not one per attempt."""
    return failures <= 3 or failures % 30 == 0
