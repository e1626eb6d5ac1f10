"""The libvirt agent's own settings: ``VMSCHED_LIBVIRT_*`` in the environment, each also a flag of
``vmsched-agent libvirt`` (a flag wins). The broker, logging and heartbeat settings are the common
ones (``VMSCHED_AMQP_URL``, ``VMSCHED_LOG_LEVEL``, ``VMSCHED_AGENT_HEARTBEAT_INTERVAL``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from vmsched_agent.hosts import parse_labels
from vmsched_contract.messages import HostId, Labels

ENV_PREFIX = "VMSCHED_LIBVIRT_"

Seconds = Annotated[float, Field(ge=0, le=86_400)]
# A libvirt object's name as the agent puts it in XML and looks it up (pools, networks, volumes).
LibvirtName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f/]+$")]


class LibvirtAgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore", frozen=True)

    # The libvirt to manage: qemu:///system on a KVM host; test:///default is libvirt's in-memory one.
    uri: Annotated[str, Field(min_length=1)]
    # The host's id in vmsched (its queue is agent.<host id>; enroll-agent's credentials are for it).
    host_id: HostId
    # What `vmsched-gateway enroll-agent <host id>` printed (a file of JSON lines; '-': standard
    # input). Unset: the agent connects as VMSCHED_AMQP_URL's user.
    credentials: Path | None = None
    # The storage pool VMs' disks are made in; its size is the host's disk capacity.
    pool: LibvirtName = "default"
    # The libvirt network each VM's interface is on (the template's $network).
    network: LibvirtName = "default"
    # The operator's domain template; unset: the one shipped (vmsched_agent/libvirt/domain.xml).
    template: Path | None = None
    volume_format: Literal["qcow2", "raw"] = "qcow2"
    # A volume of the pool that every VM's disk starts as a copy-on-write layer of (qcow2 only): the
    # operating system image. Unset: VMs start with an empty disk.
    base_volume: LibvirtName | None = None
    # The pool is the same storage on every host (NFS, Ceph): a migration then copies no disk, and
    # no step of one deletes a volume another host may still use.
    shared_storage: bool = False
    # The URI other hosts' libvirt reaches this one's by, for live migration (qemu+tls://hv-0001/system):
    # sent in heartbeats. Unset: the host takes part in no migration (no migrate capability).
    migration_uri: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    labels: Annotated[Labels, NoDecode] = Field(default_factory=dict)
    # Stop: how long a guest has to shut down when asked (ACPI) before it is powered off; 0: at once.
    shutdown_timeout: Seconds = 60.0
    # Create and start: how long libvirt may take to say the domain runs.
    start_timeout: Seconds = 30.0
    # How often domain statistics are sampled for the heartbeats' measured usage.
    usage_interval: Annotated[float, Field(gt=0, le=3600)] = 5.0
    # How often the connection is checked, and the longest pause between attempts to reopen it.
    check_interval: Annotated[float, Field(gt=0, le=3600)] = 5.0
    reconnect_max_delay: Annotated[float, Field(gt=0, le=3600)] = 30.0

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_as_pairs(cls, value: Any) -> Any:
        # k=v,k2=v2, as the simulator's --labels (a dict passes through).
        return parse_labels(value) if isinstance(value, str) else value

    @property
    def copy_storage(self) -> bool:
        return not self.shared_storage


def load(flags: Mapping[str, object]) -> LibvirtAgentSettings:
    """The environment overlaid by the flags given (None: not given). Raises ValueError with one
    line naming each bad setting."""
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return LibvirtAgentSettings(**given)  # type: ignore[arg-type]  # names checked by pydantic
    except ValidationError as error:
        raise ValueError(describe(error, set(given))) from None


def describe(error: ValidationError, flags: set[str]) -> str:
    """One line: each bad setting by its flag (when given as one) or variable, and why."""
    parts = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        flag, variable = f"--{field.replace('_', '-')}", (ENV_PREFIX + field).upper()
        if item["type"] == "missing":
            parts.append(f"{flag} or {variable}: required")
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{flag if field in flags else variable}: {message}")
    return "invalid configuration: " + "; ".join(parts)
