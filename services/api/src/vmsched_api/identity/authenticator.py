"""From a presented secret to the principal a request acts as (or none)."""

from __future__ import annotations

import hmac

from pydantic import SecretStr

from vmsched_api.identity.cache import TokenCache
from vmsched_api.identity.scopes import BOOTSTRAP_TOKEN_ID, Principal
from vmsched_api.identity.store import TokenStore
from vmsched_api.identity.token_secrets import PREFIX, secret_hash
from vmsched_contract.messages import DEFAULT_PROJECT
from vmsched_contract.scopes import Scope

# Longer than any secret vmsched makes; a longer one is not looked up.
MAX_SECRET_LENGTH = 256

BOOTSTRAP = Principal(
    token_id=BOOTSTRAP_TOKEN_ID, name=BOOTSTRAP_TOKEN_ID, project=DEFAULT_PROJECT, scopes=frozenset({Scope.ADMIN})
)


class Authenticator:
    def __init__(self, *, bootstrap: SecretStr | None, store: TokenStore, cache: TokenCache | None = None) -> None:
        self._bootstrap = bootstrap.get_secret_value().encode() if bootstrap is not None else None
        self._store = store
        self._cache = cache

    async def principal(self, secret: str) -> Principal | None:
        """The principal of a live token whose secret this is; None for anything else."""
        if self._bootstrap is not None and hmac.compare_digest(secret.encode(), self._bootstrap):
            return BOOTSTRAP
        if not secret.startswith(PREFIX) or len(secret) > MAX_SECRET_LENGTH:
            return None  # not one of ours: no need to ask PostgreSQL
        hashed = secret_hash(secret)
        if self._cache is not None and (cached := self._cache.get(hashed)) is not None:
            return cached.principal()
        generation = self._cache.generation if self._cache is not None else 0
        record = await self._store.live_token(hashed)
        if record is None:
            return None
        if self._cache is not None:
            self._cache.put(hashed, record, generation)
        return record.principal()

    def forget(self, token_id: str) -> None:
        """This replica refuses the token at once (the others when PostgreSQL's notice reaches them)."""
        if self._cache is not None:
            self._cache.revoked(token_id)
