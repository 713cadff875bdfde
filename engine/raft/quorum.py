"""Majority quorums over a set of voters: the committed index and vote tallies."""
from __future__ import annotations

VOTE_PENDING, VOTE_WON, VOTE_LOST = 0, 1, 2


def committed_index(voters, match_of) -> int:
    """The largest index that a majority of voters has (match_of(id) -> index)."""
    n = len(voters)
    if n == 0:
        return 0
    matches = sorted((match_of(v) for v in voters), reverse=True)
    return matches[n // 2]


def vote_result(voters, votes: dict) -> int:
    """WON once a majority granted, LOST once a majority can no longer grant, else PENDING."""
    granted = rejected = 0
    for v in voters:
        g = votes.get(v)
        if g is True:
            granted += 1
        elif g is False:
            rejected += 1
    q = len(voters) // 2 + 1
    if granted >= q:
        return VOTE_WON
    if len(voters) - rejected < q:
        return VOTE_LOST
    return VOTE_PENDING


def has_quorum(voters, ids) -> bool:
    """Does `ids` contain a majority of voters?"""
    return sum(1 for v in voters if v in ids) >= len(voters) // 2 + 1
