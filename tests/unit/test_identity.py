"""Identity's pure parts: what each scope grants, token secrets, the per-token rate limit and the
token cache that revocations empty (no servers, no sleeps: clocks are handed in)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from vmsched_api.identity.authenticator import Authenticator
from vmsched_api.identity.cache import MAX_AGE, TokenCache
from vmsched_api.identity.rate_limit import RateLimiter, retry_after_header
from vmsched_api.identity.scopes import Principal
from vmsched_api.identity.store import TokenRecord
from vmsched_api.identity.token_secrets import PREFIX, new_secret, secret_hash
from vmsched_contract.scopes import Scope


def principal(*scopes: Scope, project: str = "p") -> Principal:
    return Principal(token_id="t", name="t", project=project, scopes=frozenset(scopes))


@pytest.mark.parametrize(
    ("held", "granted"),
    [
        (Scope.VMS_READ, {Scope.VMS_READ}),
        (Scope.VMS_WRITE, {Scope.VMS_READ, Scope.VMS_WRITE}),
        (Scope.HOSTS_READ, {Scope.HOSTS_READ}),
        (Scope.HOSTS_ADMIN, {Scope.HOSTS_READ, Scope.HOSTS_ADMIN}),
        (Scope.ADMIN, set(Scope)),
    ],
)
def test_a_scope_grants_itself_and_what_it_includes_only(held: Scope, granted: set[Scope]) -> None:
    assert {scope for scope in Scope if principal(held).may(scope)} == granted


def test_a_token_sees_its_own_project_and_an_admin_every_one() -> None:
    member, admin = principal(Scope.VMS_WRITE, project="a"), principal(Scope.ADMIN, project="a")
    assert member.sees("a")
    assert not member.sees("b")
    assert admin.sees("b")
    assert member.project_filter("b") == "a"  # whatever it asks for
    assert (admin.project_filter("b"), admin.project_filter(None)) == ("b", None)


def test_secrets_are_random_prefixed_and_kept_as_sha256() -> None:
    first, second = new_secret(), new_secret()
    assert first != second
    assert first.startswith(PREFIX)
    assert len(first) > 40
    assert secret_hash(first) == secret_hash(first) != secret_hash(second)
    assert len(secret_hash(first)) == 64
    assert first not in secret_hash(first)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_gets_its_burst_then_its_rate_with_the_wait_named() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # another token has its own bucket
    clock.now += 0.5
    assert limiter.take("a") == 0.0
    assert retry_after_header(0.01) == "1"
    assert retry_after_header(2.2) == "3"


def test_a_rate_of_zero_limits_nothing() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    assert all(limiter.take("a") == 0.0 for _ in range(1000))


@given(
    rate=st.floats(0.1, 100),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0, 2), min_size=1, max_size=200),
)
def test_no_window_lets_more_through_than_the_burst_plus_the_rate(rate: float, burst: int, gaps: list[float]) -> None:
    clock = Clock()
    limiter = RateLimiter(rate=rate, burst=burst, clock=clock)
    start = clock.now
    allowed = 0
    for gap in gaps:
        clock.now += gap
        allowed += limiter.take("k") == 0.0
    assert allowed <= burst + (clock.now - start) * rate + 1e-6


def record(token_id: uuid.UUID | None = None, expires_at: datetime | None = None) -> TokenRecord:
    return TokenRecord(
        id=token_id or uuid.uuid4(),
        name="n",
        project="p",
        scopes=(Scope.VMS_READ,),
        created_at=datetime.now(UTC),
        expires_at=expires_at,
        revoked_at=None,
    )


def listening_cache(clock: Clock) -> TokenCache:
    cache = TokenCache(clock=clock)
    cache.listening = True
    return cache


def test_the_cache_serves_a_token_until_its_revocation_is_heard() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    token = record()
    cache.put("h", token, cache.generation)
    assert cache.get("h") == token
    cache.revoked(str(token.id))
    assert cache.get("h") is None


def test_a_lookup_that_overlapped_a_revocation_is_not_cached() -> None:
    cache = listening_cache(Clock())
    token = record()
    generation = cache.generation  # the lookup starts ...
    cache.revoked(str(token.id))  # ... the revocation is heard ...
    cache.put("h", token, generation)  # ... and the lookup's (stale) answer arrives
    assert cache.get("h") is None


def test_nothing_is_cached_or_served_while_revocations_are_not_heard() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    cache.put("h", record(), cache.generation)
    cache.stop_using()
    assert cache.get("h") is None
    cache.put("h", record(), cache.generation)
    cache.listening = True
    assert cache.get("h") is None  # it started empty again


def test_an_entry_ages_out_and_an_expired_token_is_not_served() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    cache.put("old", record(), cache.generation)
    cache.put("expired", record(expires_at=datetime.now(UTC) - timedelta(seconds=1)), cache.generation)
    assert cache.get("expired") is None
    clock.now += MAX_AGE + 1
    assert cache.get("old") is None


class Store:
    """Tokens by the hash of their secret; counts the lookups."""

    def __init__(self, secret: str, token: TokenRecord) -> None:
        self.tokens = {secret_hash(secret): token}
        self.lookups = 0

    async def live_token(self, hashed: str) -> TokenRecord | None:
        self.lookups += 1
        return self.tokens.get(hashed)


async def test_the_authenticator_knows_the_bootstrap_token_and_live_ones_and_asks_once() -> None:
    secret, token = new_secret(), record()
    store = Store(secret, token)
    cache = listening_cache(Clock())
    authenticator = Authenticator(bootstrap=SecretStr("b" * 40), store=store, cache=cache)  # type: ignore[arg-type]
    bootstrap = await authenticator.principal("b" * 40)
    assert bootstrap is not None
    assert bootstrap.is_admin
    assert bootstrap.project == "default"
    assert await authenticator.principal("b" * 39) is None
    assert await authenticator.principal("not-one-of-ours") is None
    assert store.lookups == 0  # neither was worth asking PostgreSQL
    assert (await authenticator.principal(secret)) == token.principal()
    assert (await authenticator.principal(secret)) == token.principal()
    assert store.lookups == 1
    authenticator.forget(str(token.id))
    await authenticator.principal(secret)
    assert store.lookups == 2


def test_the_first_limit_exceeded_is_named_with_its_numbers() -> None:
    from vmsched_api.quota import QuotaExceeded, first_excess

    limits = {"instances": 10, "cpu": 8, "memory_mb": None, "disk_gb": None, "gpu": 0}
    asked = {"instances": 1, "cpu": 4, "memory_mb": 1 << 20, "disk_gb": 10, "gpu": 0}
    within = {"instances": 3, "cpu": 8, "memory_mb": 1 << 30, "disk_gb": 99, "gpu": 0}
    assert first_excess(limits, within, asked) is None  # at the limit is within it; None: no limit
    past = {**within, "cpu": 9, "gpu": 1}
    assert first_excess(limits, past, asked) == QuotaExceeded("cpu", limit=8, used=5, requested=4)


def test_a_vm_above_its_projects_max_priority_is_refused_and_none_above_it_is() -> None:
    from types import SimpleNamespace

    from vmsched_api.quota import priority_excess

    rows = [SimpleNamespace(priority=100), SimpleNamespace(priority=600)]
    refused = priority_excess(500, rows)
    assert refused is not None
    assert refused.answer() == {
        "reason": "quota_exceeded",
        "resource": "max_priority",
        "limit": 500,
        "used": 0,
        "requested": 600,
    }
    assert priority_excess(600, rows) is None
    assert priority_excess(None, rows) is None
