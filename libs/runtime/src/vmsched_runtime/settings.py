"""Every setting of every vmsched service, read from the environment (pydantic-settings).

One typed class is the single place each knob is named. A bad value stops the service at start
with one line naming the variable and the reason (see :func:`load_settings`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from enum import StrEnum
from functools import lru_cache
from typing import Annotated
from urllib.parse import parse_qsl

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    PostgresDsn,
    RedisDsn,
    SecretStr,
    StringConstraints,
    UrlConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import MultiHostUrl
from pydantic_settings import BaseSettings, SettingsConfigDict

from vmsched_contract.planner import Planner
from vmsched_contract.strategy import MAX_WAIT_S, Strategy, valid_strategies


class OrphanPolicy(StrEnum):
    """What the gateway does about a VM an agent runs that vmsched holds elsewhere, or not at all."""

    REPORT = "report"
    DELETE_MOVED = "delete_moved"
    DELETE = "delete"


class AgentAuth(StrEnum):
    """Whether the gateway takes an agent's word only from that host's own broker user (docs/security.md)."""

    REQUIRED = "required"  # heartbeats and reports must carry the AMQP user_id of the host's enrolled user
    OFF = "off"  # a trusted lab: any broker user may speak for any host (the legacy path)


# Where RabbitMQ's management plugin (HTTP API) listens unless VMSCHED_AMQP_ADMIN_URL says otherwise:
# its plain and TLS ports, after the AMQP URL's scheme.
MANAGEMENT_PORTS = {"amqp": ("http", 15672), "amqps": ("https", 15671)}


ENV_PREFIX = "VMSCHED_"

PositiveSeconds = Annotated[float, Field(gt=0)]
# One RabbitMQ node, or several of one cluster (vmsched_amqp.nodes), amqp or amqps.
AmqpUrl = Annotated[MultiHostUrl, UrlConstraints(allowed_schemes=["amqp", "amqps"], host_required=True)]
Weight = Annotated[float, Field(ge=0, le=1)]
# libpq's sslmode values (``?sslmode=require`` on VMSCHED_DATABASE_URL); asyncpg takes the same names.
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# A bootstrap token must be as hard to guess as the ones vmsched makes (secrets.token_urlsafe(32)).
MIN_BOOTSTRAP_TOKEN = 32


CellName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]


class CellEndpoint(BaseModel):
    """One row of the cell router's table (``VMSCHED_ROUTER_CELLS``): a cell's name, the base URL of
    its API, and the token the router reads the cell's summary with (scope ``hosts:read``; callers'
    own requests go with the caller's token, docs/security.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: CellName
    url: AnyHttpUrl
    token: SecretStr

    @property
    def base_url(self) -> str:
        return str(self.url).rstrip("/")


class Settings(BaseSettings):
    # VMSCHED_ on every name: under Kubernetes a Service named ``api`` injects ``API_PORT=tcp://...``
    # into every pod of its namespace, which an unprefixed setting would read as its own.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore", frozen=True, populate_by_name=True
    )

    # One node, or every node of a cluster: amqp://user:pass@node-a:5672,node-b:5672,node-c:5672/vhost
    amqp_url: AmqpUrl = MultiHostUrl("amqp://guest:guest@127.0.0.1:5672/")
    redis_url: RedisDsn = RedisDsn("redis://127.0.0.1:6379/0")
    database_url: PostgresDsn = PostgresDsn("postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched")
    # PostgreSQL connections each process keeps (plus half as many in bursts); unset: the
    # service's own default (API 10, scheduler 8, gateway 6). Mind max_connections across replicas.
    db_pool_size: Annotated[int, Field(ge=1, le=200)] | None = None

    # RabbitMQ's management HTTP API, used to enroll agents (``vmsched-gateway enroll-agent``). Unset:
    # http://<the first AMQP node's host>:15672/ (https on 15671 for amqps) with the AMQP URL's user
    # and password.
    amqp_admin_url: AnyHttpUrl | None = None
    # required: the gateway takes a host's heartbeats and VM reports only from that host's own broker
    # user (the AMQP user_id RabbitMQ verifies); off: from anyone (a trusted lab).
    agent_auth: AgentAuth = AgentAuth.REQUIRED

    # Redis connections each process opens at most; a command waits for one when all are busy.
    redis_max_connections: Annotated[int, Field(ge=1, le=10000)] = 100
    # Prefixes every Redis key, so that several installations (or test runs) can share one Redis.
    redis_key_prefix: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")] = "vmsched"

    scheduling_strategy: Strategy = Strategy.LEAST_LOADED
    weight_cpu: Weight = 0.4
    weight_memory: Weight = 0.4
    weight_disk: Weight = 0.2
    # Which eligible hosts a VM's strategy ranks when its request names no planner: flat (all) or
    # cluster_first (CloudStack's FirstFitPlanner). The API stores it with each VM it accepts.
    planner: Planner = Planner.FLAT
    # A VM whose creates failed on this many hosts of one cluster (the hosts' cluster label) leaves
    # that whole cluster out while those hosts' exclusions last (EXCLUDE_FOR); 0: never.
    exclude_cluster_after: Annotated[int, Field(ge=0, le=100)] = 2

    # What a VM request that omits cpu or memory_mb gets (Orchard's defaults, seed 002); the stored
    # VM shows the amounts it got.
    default_vm_cpu: Annotated[int, Field(ge=1, le=1024)] = 4
    default_vm_memory_mb: Annotated[int, Field(ge=1, le=64 * 1024 * 1024)] = 8192
    # How long a VM request that names no wait_s may wait for room when no host fits it (Orchard
    # keeps such VMs pending until a worker fits); 0: it is unschedulable at once (seed 001).
    default_wait_s: Annotated[int, Field(ge=0, le=MAX_WAIT_S)] = 0
    # A VM that fits nowhere may take the room of VMs of lower priority (Kubernetes' preemption);
    # off: priority only orders nothing, and such a VM waits or is unschedulable as any other.
    preemption: bool = True

    # A host silent this long is offline and its VMs "unknown" (presumed running: nothing is failed
    # or deleted); silent for AGENT_LOST_TIMEOUT, its VMs fail and their restart policy applies.
    agent_offline_timeout: PositiveSeconds = 15.0
    agent_lost_timeout: PositiveSeconds = 300.0
    agent_heartbeat_interval: PositiveSeconds = 5.0
    # Creates agents may refuse per VM (each on another host) before it fails; restarts not counted.
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 3
    restart_delay: Annotated[float, Field(ge=0)] = 15.0
    # How long a host that failed a VM is left out for it (unless no other host fits).
    exclude_for: PositiveSeconds = 600.0
    # VMs an agent runs that vmsched holds elsewhere ("moved") or not at all any more ("gone"):
    # report (metric, event, log), delete_moved (default: also tell the agent to delete those that
    # run elsewhere now) or delete (every such VM).
    orphan_vms: OrphanPolicy = OrphanPolicy.DELETE_MOVED
    # Fencing (docs/operations.md#fencing). A command (split as a shell would, run without one) that
    # powers a lost host off, run once a host is silent past AGENT_LOST_TIMEOUT with the host id and
    # its labels (JSON) as its last two arguments; exit 0 means fenced. With it set, a lost host's VMs
    # are restarted elsewhere only once it fenced the host (or an operator did).
    fence_command: Annotated[str, Field(min_length=1)] | None = None
    fence_timeout: PositiveSeconds = 60.0  # a fence command still running after this has failed
    # A fence command that failed runs again while the host stays silent: FENCE_RETRY_DELAY after the
    # first failure, twice as long after each next one, never more than FENCE_RETRY_MAX_DELAY apart.
    fence_retry_delay: PositiveSeconds = 30.0
    fence_retry_max_delay: PositiveSeconds = 600.0
    # With no fence command: whether a lost host's VMs are restarted anyway (true: the behaviour
    # before fencing existed) or kept unknown until an operator fences the host (host.fence_needed).
    restart_unfenced: bool = True
    # HA capacity (docs/operations.md#ha-capacity; vSphere HA's "host failures the cluster tolerates"):
    # a placement that would leave a zone unable to restart the VMs of its N largest hosts on its
    # other hosts is refused (reason ha_reserve). 0: no room is kept.
    ha_reserve_hosts: Annotated[int, Field(ge=0, le=1000)] = 0

    api_host: str = "127.0.0.1"
    api_port: Annotated[int, Field(ge=1, le=65535)] = 8000
    # An admin token of the project "default" that needs no row in PostgreSQL: the first token of a
    # new installation (it creates the others with POST /v1/tokens). Revoked by unsetting it.
    bootstrap_token: Annotated[SecretStr, Field(min_length=MIN_BOOTSTRAP_TOKEN)] | None = None
    # Request bodies larger than this are refused (413) before they are read.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 1 << 20
    # Requests per second each token may make to one API replica (a token bucket of RATE_BURST
    # requests, refilled at this rate; 429 with Retry-After when empty); 0: no limit.
    rate_limit: Annotated[float, Field(ge=0, le=1_000_000)] = 100.0
    rate_burst: Annotated[int, Field(ge=1, le=1_000_000)] = 200

    # How long a VM may stay unpublished (its vm.create not confirmed by the broker) before a sweeper
    # publishes it again; also the sweep period.
    republish_after: PositiveSeconds = 5.0
    # How long a published VM may stay pending (or deleting) before its message is sent again: the
    # message may have been dead-lettered by the delivery limit after broker restarts. A repeat is
    # harmless (every consumer is idempotent), so this only needs to exceed a normal queue wait.
    resend_stale_after: PositiveSeconds = 120.0
    # A migration in flight longer than this (from its request) is rolled back: the VM stays on its
    # source, the target's share is given back. Longer than RESEND_STALE_AFTER, so that a step's
    # command lost on the way is sent again before the migration is given up.
    migration_timeout: PositiveSeconds = 600.0
    # The cell router (vmsched-router, docs/scaling.md "Cells"): the cells it routes to, as JSON
    # ([{"name": "a", "url": "http://cell-a-api:8000", "token": "..."}, ...]), the database of its own
    # that maps each VM to its cell, where it listens, how often it reads each cell's summary, how long
    # it waits for a cell's decision on a new VM before answering (to try the next cell when the first
    # answers unschedulable; 0: answer at once, never retry) and how long a request to a cell may take.
    router_cells: list[CellEndpoint] = []  # pydantic copies a default per instance
    router_database_url: PostgresDsn = PostgresDsn("postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched_router")
    router_host: str = "127.0.0.1"
    router_port: Annotated[int, Field(ge=1, le=65535)] = 8100
    router_refresh_interval: PositiveSeconds = 3.0
    router_decision_wait: Annotated[float, Field(ge=0, le=60)] = 2.0
    router_cell_timeout: PositiveSeconds = 10.0

    # Scheduler: messages in flight per replica, and how often the Redis snapshot is fully re-read
    # (in the background; rounds read only what changed).
    scheduler_prefetch: Annotated[int, Field(ge=1, le=10_000)] = 64
    snapshot_full_refresh: PositiveSeconds = 30.0
    # A scheduler takes a host's new measured usage (least_utilized) at most this often: between two,
    # its reads of the host keep the usage it holds, so the decision journal records a host's usage
    # once per interval, not at every re-announcement (docs/performance.md). 0: at every read.
    usage_refresh_interval: Annotated[float, Field(ge=0)] = 30.0
    reconcile_interval: PositiveSeconds = 30.0
    # How often one scheduler replica places pending reservations and ends those past ends_at.
    reservation_interval: PositiveSeconds = 1.0
    # The decision journal (GET /v1/vms/{id}/placement/replay) keeps each decision's inputs this long
    # (7 days); one scheduler replica at a time prunes older entries every JOURNAL_PRUNE_INTERVAL.
    # Every scheduler replica must have the same retention (each checkpoints at least every half of it).
    journal_retention: PositiveSeconds = 7 * 24 * 3600.0
    journal_prune_interval: PositiveSeconds = 600.0

    log_level: str = "INFO"
    log_format: str = "auto"  # auto | json | console

    # Scheduler and gateway: where their Prometheus /metrics listens (0: no endpoint). The API
    # serves /metrics on its own port and ignores these.
    metrics_host: str = "127.0.0.1"
    # unset: the service's own default port (scheduler 9101, gateway 9102); 0: no endpoint.
    metrics_port: Annotated[int, Field(ge=0, le=65535)] | None = None

    # Standard OpenTelemetry variables, read here so that a bad value stops the service at start.
    # The exporter itself reads the rest (OTEL_EXPORTER_OTLP_HEADERS, ...); see vmsched_runtime.telemetry.
    otel_sdk_disabled: Annotated[bool, Field(validation_alias="OTEL_SDK_DISABLED")] = False
    # unset: vmsched-<service>
    otel_service_name: Annotated[str, Field(validation_alias="OTEL_SERVICE_NAME")] = ""
    # otlp, console, none (comma-separated); unset: otlp if an endpoint is set
    otel_traces_exporter: Annotated[str, Field(validation_alias="OTEL_TRACES_EXPORTER")] = ""
    otel_exporter_otlp_endpoint: Annotated[str, Field(validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")] = ""
    otel_exporter_otlp_traces_endpoint: Annotated[str, Field(validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")] = (
        ""
    )

    @model_validator(mode="after")
    def _lost_after_offline(self) -> Settings:
        if self.agent_lost_timeout <= self.agent_offline_timeout:
            raise ValueError(
                f"{ENV_PREFIX}AGENT_LOST_TIMEOUT ({self.agent_lost_timeout:g}) must be longer than "
                f"{ENV_PREFIX}AGENT_OFFLINE_TIMEOUT ({self.agent_offline_timeout:g})"
            )
        return self

    @model_validator(mode="after")
    def _fence_backoff_grows(self) -> Settings:
        if self.fence_retry_max_delay < self.fence_retry_delay:
            raise ValueError(
                f"{ENV_PREFIX}FENCE_RETRY_MAX_DELAY ({self.fence_retry_max_delay:g}) must not be shorter than "
                f"{ENV_PREFIX}FENCE_RETRY_DELAY ({self.fence_retry_delay:g})"
            )
        return self

    @field_validator("router_cells", mode="before")
    @classmethod
    def _cells_from_json(cls, value: object) -> object:
        # The environment gives JSON text; from_environment passes it on as text.
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("router_cells")
    @classmethod
    def _distinct_cells(cls, cells: list[CellEndpoint]) -> list[CellEndpoint]:
        names = [cell.name for cell in cells]
        if len(set(names)) != len(names):
            raise ValueError(f"a cell is named twice: {', '.join(sorted(names))}")
        return cells

    @field_validator("database_url", "router_database_url")
    @classmethod
    def _known_sslmode(cls, value: PostgresDsn) -> PostgresDsn:
        for key, mode in parse_qsl(value.query or ""):
            if key in ("sslmode", "ssl") and mode not in SSL_MODES:
                raise ValueError(f"unknown {key} {mode!r}; valid: {', '.join(SSL_MODES)}")
        return value

    @model_validator(mode="after")
    def _migrations_outlast_a_resend(self) -> Settings:
        if self.migration_timeout <= self.resend_stale_after:
            raise ValueError(
                f"{ENV_PREFIX}MIGRATION_TIMEOUT ({self.migration_timeout:g}) must be longer than "
                f"{ENV_PREFIX}RESEND_STALE_AFTER ({self.resend_stale_after:g}): a step's lost command is sent "
                "again before the migration is given up"
            )
        return self

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return upper

    @field_validator("log_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in {"auto", "json", "console"}:
            raise ValueError("must be one of auto, json, console")
        return value

    @field_validator("otel_traces_exporter")
    @classmethod
    def _known_exporters(cls, value: str) -> str:
        unknown = {name.strip() for name in value.split(",") if name.strip()} - {"otlp", "console", "none"}
        if unknown:
            raise ValueError(f"unknown exporter {', '.join(sorted(unknown))}; valid: otlp, console, none")
        return value

    @field_validator("scheduling_strategy", mode="before")
    @classmethod
    def _known_strategy(cls, value: object) -> object:
        if isinstance(value, str) and value not in {s.value for s in Strategy}:
            raise ValueError(f"unknown strategy {value!r}; valid strategies: {valid_strategies()}")
        return value

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> Settings:
        """The settings ``env`` names (``VMSCHED_*`` and ``OTEL_*`` variables; others are ignored),
        the defaults for the rest, without reading the process environment."""
        values: dict[str, str] = {}
        aliases = {
            str(field.validation_alias): name for name, field in cls.model_fields.items() if field.validation_alias
        }
        for key, value in env.items():
            upper = key.upper()
            if upper in aliases:
                values[aliases[upper]] = value
            elif upper.startswith(ENV_PREFIX) and upper.removeprefix(ENV_PREFIX).lower() in cls.model_fields:
                values[upper.removeprefix(ENV_PREFIX).lower()] = value
        legacy = seed_strategy(env)
        if legacy is not None:
            values["scheduling_strategy"] = legacy
        return cls.model_validate(values)

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL as written, ``sslmode`` and all (vmsched_pg.engine reads it)."""
        return str(self.database_url)

    @property
    def management_url(self) -> str:
        """The management API's base URL with credentials: ``amqp_admin_url`` if set, else derived
        from the first AMQP node (its host, port 15672, the AMQP URL's user and password)."""
        if self.amqp_admin_url is not None:
            return str(self.amqp_admin_url)
        first = self.amqp_url.hosts()[0]
        credentials = ""
        if first["username"] is not None:
            credentials = first["username"] + (f":{first['password']}" if first["password"] is not None else "") + "@"
        scheme, port = MANAGEMENT_PORTS[self.amqp_url.scheme]
        return f"{scheme}://{credentials}{first['host']}:{port}/"


def describe_error(error: ValidationError) -> str:
    """One line naming each bad variable and why, for a service that refuses to start."""
    parts = []
    for item in error.errors():
        field = "_".join(str(part) for part in item["loc"])
        name = (ENV_PREFIX + field).upper() if field in Settings.model_fields else field.upper() or "settings"
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {message}" if field else message)
    return "invalid configuration: " + "; ".join(parts)


# Seed 001 names the cluster's default strategy SCHEDULING_STRATEGY, without our prefix. It is read
# only when the prefixed name is unset, so that a deployment written for the seed keeps its choice.
SEED_STRATEGY_VARIABLE = "SCHEDULING_STRATEGY"
STRATEGY_VARIABLE = f"{ENV_PREFIX}{SEED_STRATEGY_VARIABLE}"


def seed_strategy(env: Mapping[str, str]) -> str | None:
    """The value of seed 001's ``SCHEDULING_STRATEGY`` when it is set and ``VMSCHED_SCHEDULING_STRATEGY``
    is not (environment names are matched case-insensitively, as the settings match theirs)."""
    upper = {key.upper(): value for key, value in env.items()}
    if STRATEGY_VARIABLE in upper:
        return None
    return upper.get(SEED_STRATEGY_VARIABLE)


def seed_strategy_warning(service: str) -> str:
    return (
        f"{service}: warning: {SEED_STRATEGY_VARIABLE} (seed 001's name) is read because {STRATEGY_VARIABLE} "
        f"is unset; rename it to {STRATEGY_VARIABLE}"
    )


def load_settings(service: str, env: Mapping[str, str] | None = None) -> Settings:
    """Read the settings or stop the process with one clear line on stderr (exit status 2).

    Seed 001's ``SCHEDULING_STRATEGY`` stands in for an unset ``VMSCHED_SCHEDULING_STRATEGY``, with
    one warning line on stderr; a bad value of it is named by its own name."""
    legacy = seed_strategy(os.environ if env is None else env)
    try:
        if legacy is None:
            return Settings()
        settings = Settings(scheduling_strategy=legacy)  # validated from text, as the environment gives it
    except ValidationError as error:
        line = describe_error(error)
        if legacy is not None:
            line = line.replace(STRATEGY_VARIABLE, SEED_STRATEGY_VARIABLE)
        print(f"{service}: {line}", file=sys.stderr)
        raise SystemExit(2) from None
    print(seed_strategy_warning(service), file=sys.stderr)
    return settings


@lru_cache(maxsize=1)
def default_settings() -> Settings:
    return Settings()
