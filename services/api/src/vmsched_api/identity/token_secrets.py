"""Token secrets: made at random, kept only as a hash.

A secret is ``vmsched_`` and 32 random bytes (secrets.token_urlsafe): 256 bits nobody guesses or
brute-forces, so a plain SHA-256 of it is as safe to store as a slow password hash (bcrypt, argon2
exist to stretch *low*-entropy passwords) and costs a microsecond per request instead of tens of
milliseconds. The prefix lets secret scanners recognise a leaked token.
"""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "vmsched_"


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    """What PostgreSQL keeps of a secret (hex SHA-256)."""
    return hashlib.sha256(secret.encode()).hexdigest()
