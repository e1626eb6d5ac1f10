"""`make run`: the whole of vmsched on this machine, with a few simulated hypervisors. Ctrl-C stops it."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path

from devtools.stack import ROOT, Service, Stack, bearer, wait_for
from vmsched_agent.hosts import host_id

RUN_DIR = ROOT / ".run"
DEV_TOKEN = RUN_DIR / "dev-token"


def development_token() -> str:
    """The admin token of `make run`'s API (its VMSCHED_BOOTSTRAP_TOKEN): the environment's if set,
    else made once and kept in .run/dev-token (readable by you alone), so that a shell that
    exported it keeps working across restarts."""
    if os.environ.get("VMSCHED_BOOTSTRAP_TOKEN"):
        return os.environ["VMSCHED_BOOTSTRAP_TOKEN"]
    if DEV_TOKEN.exists():
        return DEV_TOKEN.read_text().strip()
    RUN_DIR.mkdir(exist_ok=True)
    token = secrets.token_urlsafe(32)
    DEV_TOKEN.touch(mode=0o600)
    DEV_TOKEN.write_text(token + "\n")
    return token


def _other_metrics(stack: Stack) -> str:
    """The scheduler's and gateway's /metrics (each on a port of its own), one line each."""
    return "".join(
        f"\n  {'':14}{service.metrics_url} ({name})"
        for name, service in stack.services.items()
        if service.metrics_url is not None
    )


def make_run_stack(api_port: int, token: str) -> Stack:
    """``make run``'s services: the API on ``api_port``, the scheduler's and gateway's /metrics on
    their documented ports (9101, 9102) when free, the admin token ``token``."""
    return Stack(
        env={"VMSCHED_LOG_FORMAT": os.environ.get("VMSCHED_LOG_FORMAT", "json"), "VMSCHED_BOOTSTRAP_TOKEN": token},
        log_dir=RUN_DIR,
        api_port=api_port,
        default_ports=True,
    )


def start_fleet(stack: Stack, agents: int, credentials_path: Path, timeout: float = 60.0) -> Service:
    """``make run``'s simulated fleet: ``agents`` hosts hv-0001... of mixed sizes (label
    size=small|medium|large|gpu) in three zones (zone=z1|z2|z3), each its own broker user as a real
    agent (docs/security.md); returned once every host is online."""
    credentials = stack.enroll_agents([host_id("hv", index, agents) for index in range(agents)], credentials_path)
    sim = stack.start_agents(
        "agents",
        *("--count", str(agents), "--prefix", "hv", "--profile", "mixed", "--zones", "3"),
        *("--credentials", str(credentials)),
    )
    wait_for(lambda: _hosts_online(stack) >= agents, timeout, f"{agents} simulated agents to report")
    sim.check_alive()
    return sim


def main() -> int:
    agents = int(os.environ.get("SIM_AGENTS", "3"))
    schedulers = int(os.environ.get("SCHEDULERS", "1"))
    port = int(os.environ.get("VMSCHED_API_PORT", "8000"))
    stack = make_run_stack(port, development_token())
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        print(f"starting vmsched (logs in {Path('.run')}/) ...", flush=True)
        stack.start(schedulers=schedulers)
        if agents:
            start_fleet(stack, agents, RUN_DIR / "agent-credentials.jsonl")
        print(
            f"""
vmsched is running:
  API           {stack.api_url}/v1/vms
  OpenAPI docs  {stack.api_url}/docs
  AsyncAPI docs {stack.api_url}/asyncapi
  dashboard     {stack.api_url}/ui (it asks for the token below)
  metrics       {stack.api_url}/metrics{_other_metrics(stack)}
  {schedulers} scheduler(s), 1 gateway, {agents} simulated agent(s) in zones z1..z3, each its own broker user
  (credentials in .run/agent-credentials.jsonl); logs in .run/*.log

Every /v1 request needs a token: this one is an admin's (VMSCHED_BOOTSTRAP_TOKEN, kept in .run/dev-token).
In the shell you try it from:

export VMSCHED_TOKEN={stack.token}

Try:
  curl -s -X POST {stack.api_url}/v1/vms -H "Authorization: Bearer $VMSCHED_TOKEN" \\
       -H 'content-type: application/json' \\
       -d '{{"name": "web-1", "cpu": 2, "memory_mb": 4096, "disk_gb": 20, "labels": {{"zone": "z1"}}}}'
  curl -s -H "Authorization: Bearer $VMSCHED_TOKEN" {stack.api_url}/v1/hosts

The commands (vmsched-agent, vmsched-api, ...) are in .venv/bin; in another shell:
  source .venv/bin/activate

Ctrl-C stops everything.""",
            flush=True,
        )
        while not stopping:
            for service in stack.services.values():
                service.check_alive()
            time.sleep(0.5)
    except (RuntimeError, TimeoutError) as error:
        print(f"vmsched failed to start: {error}", file=sys.stderr)
        return 1
    finally:
        print("stopping ...", flush=True)
        stack.stop()
    return 0


def _hosts_online(stack: Stack) -> int:
    import json
    import urllib.request

    request = urllib.request.Request(f"{stack.api_url}/v1/hosts", headers=bearer(stack.token))
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return sum(1 for host in json.load(response) if host["status"] == "online")
    except OSError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
