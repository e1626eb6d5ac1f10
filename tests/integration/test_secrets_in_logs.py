"""Passwords and tokens never appear in what vmsched prints: the logs of a whole stack run at DEBUG
with a password in every server URL and a bootstrap token, its /readyz answer, and the one line a
service prints when it cannot start."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pytest
import redis

from devtools.stack import BIN, Stack, free_port
from tests.servers import Servers


def with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Secrets:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:12]
        self.user = f"vmsched-secrets-{tag}"
        self.amqp = f"amqp-pw-{tag}"
        self.redis = f"redis-pw-{tag}"
        self.database = f"pg-pw-{tag}"
        self.bootstrap = f"bootstrap-token-{tag}-{uuid.uuid4().hex}"

    def all(self) -> list[str]:
        return [self.amqp, self.redis, self.database, self.bootstrap]


@pytest.fixture(scope="module")
def secret_env(servers: Servers) -> Iterator[tuple[Secrets, dict[str, str]]]:
    """This run's servers reached as a user of their own, with a password each (PostgreSQL trusts
    local connections: its password is sent to no one, but sits in the setting all the same)."""
    secrets = Secrets()
    vhost = urlsplit(servers.amqp_url).path.lstrip("/") or "/"
    servers.broker.add_user(secrets.user, secrets.amqp)
    servers.broker.grant(vhost, secrets.user)
    admin_redis = redis.Redis.from_url(servers.redis_url)
    admin_redis.acl_setuser(
        secrets.user, enabled=True, passwords=[f"+{secrets.redis}"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    env = servers.env(
        VMSCHED_AMQP_URL=with_credentials(servers.amqp_url, secrets.user, secrets.amqp),
        VMSCHED_REDIS_URL=with_credentials(servers.redis_url, secrets.user, secrets.redis),
        VMSCHED_DATABASE_URL=with_credentials(servers.database_url, "postgres", secrets.database),
        VMSCHED_BOOTSTRAP_TOKEN=secrets.bootstrap,
        VMSCHED_LOG_LEVEL="DEBUG",
        VMSCHED_LOG_FORMAT="json",
    )
    try:
        yield secrets, env
    finally:
        admin_redis.acl_deluser(secrets.user)
        admin_redis.close()
        servers.broker.delete_user(secrets.user)


def leaks(text: str, secrets: list[str]) -> list[str]:
    return [secret for secret in secrets if secret in text or quote(secret, safe="") in text]


def test_a_whole_stack_at_debug_logs_no_password_and_no_token(
    secret_env: tuple[Secrets, dict[str, str]], tmp_path: Path
) -> None:
    secrets, env = secret_env
    stack = Stack(env=dict(env), log_dir=tmp_path, api_port=free_port())
    made: list[str] = []
    with stack.running(schedulers=1), stack.client(timeout=30) as admin:
        ready = httpx.get(f"{stack.api_url}/readyz", timeout=30)
        assert ready.status_code == 200, ready.text
        assert leaks(ready.text, secrets.all()) == []
        token = admin.post("/v1/tokens", json={"name": "shown-once", "project": "default", "scopes": ["vms:write"]})
        made.append(token.json()["token"])
        with httpx.Client(base_url=stack.api_url, timeout=30) as anyone:
            refused = anyone.get("/v1/vms", headers={"Authorization": f"Bearer {secrets.bootstrap}x"})
            assert refused.status_code == 401
            assert leaks(refused.text, secrets.all()) == []
            created = anyone.post(
                "/v1/vms",
                json={"name": "quiet", "cpu": 1, "memory_mb": 64, "disk_gb": 1},
                headers={"Authorization": f"Bearer {made[0]}"},
            )
            assert created.status_code == 202
    logs = {path.name: path.read_text(errors="replace") for path in tmp_path.glob("*.log")}
    assert set(logs) >= {"api.log", "gateway.log", "scheduler-1.log"}
    assert all(logs.values())  # they did log, at DEBUG
    for name, text in logs.items():
        assert leaks(text, [*secrets.all(), *made]) == [], name


def test_a_service_that_cannot_start_names_the_server_not_the_password(
    secret_env: tuple[Secrets, dict[str, str]],
) -> None:
    secrets, env = secret_env
    closed = free_port()
    unreachable = {
        **env,
        "VMSCHED_DATABASE_URL": f"postgresql+asyncpg://postgres:{secrets.database}@127.0.0.1:{closed}/vmsched",
        "PATH": "/usr/bin:/bin",
    }
    bad_token = {**env, "VMSCHED_BOOTSTRAP_TOKEN": "too-short-secret", "PATH": "/usr/bin:/bin"}
    # All four at once: each is a process that spends a second or two starting before it fails.
    scripts = ("vmsched-api", "vmsched-scheduler", "vmsched-gateway")
    starts = [(str(BIN / script), unreachable) for script in scripts] + [(str(BIN / "vmsched-api"), bad_token)]
    running = [subprocess.Popen([argv], env=e, stdout=PIPE, stderr=PIPE, text=True) for argv, e in starts]
    done = [(*process.communicate(timeout=120), process.returncode) for process in running]
    for script, (stdout, stderr, code) in zip(scripts, done, strict=False):
        assert code == 1, stderr
        assert f"127.0.0.1:{closed}" in stderr
        assert leaks(stdout + stderr, secrets.all()) == [], script
    _, stderr, code = done[-1]
    assert code == 2
    assert "VMSCHED_BOOTSTRAP_TOKEN" in stderr
    assert "too-short-secret" not in stderr
