"""The cache of verified tokens: a hit names the same caller without checking again, never after
the token's ``exp``; only tokens that verified are kept, at most its capacity."""

from __future__ import annotations

import time

import jwt
import pytest
from mahjong_platform.auth import Identity, VerifiedTokens, mint_token
from mahjong_platform.errors import UnauthenticatedError

SECRET = "cache-test-secret-that-is-long-enough-for-hs256-keys"
OTHER_SECRET = "another-cache-secret-long-enough-for-hs256-keys!!"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens whose signature and claims were really checked."""
    checked: list[str] = []
    real_decode = jwt.decode

    def counting_decode(token: str, *arguments: object, **keywords: object) -> object:
        checked.append(token)
        return real_decode(token, *arguments, **keywords)  # type: ignore[arg-type]

    monkeypatch.setattr(jwt, "decode", counting_decode)
    return checked


def test_a_token_is_checked_once_and_then_answered_from_the_cache(decodes: list[str]) -> None:
    cache = VerifiedTokens(clock=Clock())
    token = mint_token(SECRET, "alice", ["ops"], member=True)
    first = cache.verify(SECRET, token)
    second = cache.verify(SECRET, token)
    assert first == second == Identity("alice", frozenset({"ops"}), member=True)
    assert decodes == [token]


def test_the_cache_never_answers_after_exp_and_refuses_the_token_past_the_leeway(
    decodes: list[str],
) -> None:
    clock = Clock()
    cache = VerifiedTokens(clock=clock)
    token = mint_token(SECRET, "alice", ttl_seconds=60, issued_at_epoch_seconds=int(clock.now))
    cache.verify(SECRET, token)
    clock.now += 60  # at exp: checked again (the leeway still admits it, as without the cache)
    cache.verify(SECRET, token)
    assert decodes == [token, token]
    assert len(cache) == 0  # verified inside the leeway after exp: not kept


def test_an_expired_token_is_refused_and_not_kept() -> None:
    cache = VerifiedTokens()
    issued = int(time.time()) - 3600
    token = mint_token(SECRET, "alice", ttl_seconds=60, issued_at_epoch_seconds=issued)
    with pytest.raises(UnauthenticatedError, match="expired"):
        cache.verify(SECRET, token)
    assert len(cache) == 0


def test_a_token_is_cached_per_secret(decodes: list[str]) -> None:
    cache = VerifiedTokens(clock=Clock())
    token = mint_token(SECRET, "alice")
    cache.verify(SECRET, token)
    with pytest.raises(UnauthenticatedError, match="signature"):
        cache.verify(OTHER_SECRET, token)


def test_a_bad_token_is_refused_every_time_and_never_kept(decodes: list[str]) -> None:
    cache = VerifiedTokens(clock=Clock())
    token = mint_token(OTHER_SECRET, "mallory")
    for _ in range(2):
        with pytest.raises(UnauthenticatedError, match="signature"):
            cache.verify(SECRET, token)
    assert decodes == [token, token]
    assert len(cache) == 0


def test_the_cache_holds_at_most_its_capacity_oldest_out(decodes: list[str]) -> None:
    cache = VerifiedTokens(capacity=2, clock=Clock())
    tokens = [mint_token(SECRET, f"player{index}") for index in range(3)]
    for token in tokens:
        cache.verify(SECRET, token)
    assert len(cache) == 2
    cache.verify(SECRET, tokens[2])  # kept
    cache.verify(SECRET, tokens[0])  # pushed out: checked again
    assert decodes == [*tokens, tokens[0]]
