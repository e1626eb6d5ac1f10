"""What the ha overlay's operators create for our custom resources, and what an operator of the
cluster creates by hand: the names the manifests refer to without defining them.

Each rule is the operator's documented naming (sources in docs/deploy.md, "The operators"), keyed
by the custom resource's kind, so a renamed resource moves its Secrets and Services with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devtools.kustomize_render import KubeObject


@dataclass(frozen=True)
class Created:
    secrets: dict[str, set[str]]  # name -> keys
    services: set[str]
    # Labels on the pods that serve clients (for NetworkPolicy selectors) and the client port.
    pod_labels: dict[str, str]
    client_port: int


def _rabbitmq(name: str) -> Created:
    # cluster-operator internal/resource/default_user_secret.go, service.go, internal/metadata/label.go
    return Created(
        secrets={f"{name}-default-user": {"username", "password", "host", "port", "connection_string"}},
        services={name, f"{name}-nodes"},
        pod_labels={"app.kubernetes.io/name": name},
        client_port=5672,
    )


def _cloudnative_pg(name: str) -> Created:
    # cloudnative-pg api/v1/cluster_types.go (ApplicationUserSecretSuffix), pkg/specs/secrets.go
    return Created(
        secrets={
            f"{name}-app": {
                "username",
                "user",
                "password",
                "dbname",
                "host",
                "port",
                "pgpass",
                "uri",
                "jdbc-uri",
                "fqdn-uri",
                "fqdn-jdbc-uri",
            }
        },
        services={f"{name}-rw", f"{name}-ro", f"{name}-r"},
        pod_labels={"cnpg.io/cluster": name},
        client_port=5432,
    )


def _redis_replication(name: str) -> Created:
    # redis-operator api/redisreplication/v1beta2/redisreplication_types_helper.go, internal/k8sutils
    return Created(
        secrets={},
        services={
            name,
            f"{name}-headless",
            f"{name}-additional",
            f"{name}-master",
            f"{name}-replica",
            f"{name}-metrics",
            f"{name}-s",
            f"{name}-s-hl",
        },
        pod_labels={"app": name},
        client_port=6379,
    )


RULES: dict[tuple[str, str], Callable[[str], Created]] = {
    ("rabbitmq.com/v1beta1", "RabbitmqCluster"): _rabbitmq,
    ("postgresql.cnpg.io/v1", "Cluster"): _cloudnative_pg,
    ("redis.redis.opstreelabs.in/v1beta2", "RedisReplication"): _redis_replication,
}

# Created with kubectl before the first apply of the ha overlay (docs/deploy.md shows the command),
# because no password may be committed and the Redis operator generates none.
CREATED_BY_HAND = {"redis-auth": {"password"}}


def created_by_operators(objects: list[KubeObject]) -> list[Created]:
    return [
        RULES[(obj["apiVersion"], obj["kind"])](obj["metadata"]["name"])
        for obj in objects
        if (obj["apiVersion"], obj["kind"]) in RULES
    ]


def uses_operators(objects: list[KubeObject]) -> bool:
    return bool(created_by_operators(objects))
