"""The well-known host labels of a cloud's hierarchy (CloudStack's zone, pod and cluster): a zone
holds pods, a pod clusters, a cluster hosts. They are ordinary labels (the agent's or the
operator's, ``PATCH /v1/hosts/{id}``); these rules read them by these names: the capacity answer
counts per zone, ``user_concentrated`` prefers the pod where the VM's project runs the most VMs,
the ``cluster_first`` planner ranks clusters, and exclusions may cover a cluster."""

from __future__ import annotations

ZONE_LABEL = "zone"
POD_LABEL = "pod"
CLUSTER_LABEL = "cluster"
