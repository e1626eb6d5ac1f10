"""Who may call the API: scopes and principals (scopes.py), token secrets (token_secrets.py), their store
and cache (store.py, cache.py), the FastAPI dependencies every /v1 route goes through (auth.py), the
per-token rate limit (rate_limit.py) and the audit trail (audit.py)."""
