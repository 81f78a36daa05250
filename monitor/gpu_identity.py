"""One identity for a GPU node, shared by the billed join, the live estimates and finding fingerprints.

Billing and Cloud Monitoring name the same machine differently, and the two must agree on one key or
a GPU node's spend is never matched to its utilization:

- a GCE VM is ``(project, instance id)``: billing's ``resource.global_name`` tail
  (``.../instances/<id>``) equals the ``gce_instance`` resource label ``instance_id``. Billing rows
  without an id fall back to ``(project, zone, instance name)`` (``resource.name`` = the sample's
  ``metadata.system_labels.name``).
- a GKE node is ``(project, cluster, node name)``: billing carries the node VM's instance id too, but
  GKE utilization never does: ``k8s_node`` has ``cluster_name`` / ``node_name``, ``k8s_container``
  the node in ``metadata.system_labels.node_name``, dcgm-exporter on ``prometheus_target`` the node
  in its ``Hostname`` (or ``hostname``) label. Billing gives the cluster in the
  ``goog-k8s-cluster-name`` label and the node VM's name in ``resource.name``, which is the
  Kubernetes node name. (Resource labels: Cloud Monitoring's k8s_node / k8s_container resource
  types, https://cloud.google.com/monitoring/api/resources#tag_k8s_node; the billing labels are
  those `queries/hourly.sql` reads; see /work/shared/reference/gcp.md section 4.)

A billed row has one primary identity plus aliases (a GKE node's instance id, for a node that also
runs the Ops Agent); a sample has its primary identity plus aliases (a GCE sample with both id and
name also answers to ``(project, zone, name)`` for billing rows that lack the id). Two sides match
when they share any key; the fingerprint of a finding is the *billed-primary* identity of its rows,
which an estimated row (built from samples before billing lands) computes the same way from the
same fields, so the estimated finding and its billed successor keep one fingerprint.

GKE node names have the shape ``gke-<cluster>-<pool>-<8 hex>-<4 chars>`` (e.g.
``gke-standard-cluster-1-default-pool-b5e24cb4-j23k`` in the public kubectl output of
Raghavendarlokineni/kubernetes-cluster README.md), with cluster and pool truncated when long, so
`node_pool_from_name` only reads the pool when the untruncated cluster prefix is there.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from monitor.model import Scope

__all__ = [
    "HostFields",
    "NodeId",
    "NodeKind",
    "RowFields",
    "billed_identities",
    "billed_identity",
    "node_pool_from_name",
    "row_identity",
    "sample_identities",
]


class NodeKind(StrEnum):
    GCE = "gce"  # (project, instance id)
    GCE_NAME = "gce_name"  # (project, zone, instance name): billing rows without an id
    GKE = "gke"  # (project, cluster, node name)


@dataclass(frozen=True, slots=True)
class NodeId:
    """A GPU node's identity; `parts` are (id,), (zone, name) or (cluster, node) by `kind`.

    >>> n = NodeId(NodeKind.GKE, "ml", ("h100-train", "gke-h100-train-a3-pool-1a2b3c4d-x9k2"))
    >>> n.key
    'gke|ml|h100-train|gke-h100-train-a3-pool-1a2b3c4d-x9k2'
    >>> (n.scope().cluster, n.scope().instance)
    ('h100-train', 'gke-h100-train-a3-pool-1a2b3c4d-x9k2')
    """

    kind: NodeKind
    project: str | None
    parts: tuple[str | None, ...]
    #: A flat string (joins and dict keys); `|` cannot occur in project ids, zones or names. Made
    #: once per identity: joins ask it of every node-hour.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "key", "|".join([self.kind.value, self.project or "", *(p or "" for p in self.parts)])
        )

    def scope(self) -> Scope:
        """The label-free scope a finding's fingerprint is computed from.

        GCE identities keep the scopes earlier releases fingerprinted, so open findings carry over.
        """
        if self.kind is NodeKind.GCE:
            return Scope(project=self.project, instance_id=self.parts[0])
        if self.kind is NodeKind.GCE_NAME:
            return Scope(project=self.project, zone=self.parts[0], instance=self.parts[1])
        return Scope(project=self.project, cluster=self.parts[0], instance=self.parts[1])


@functools.lru_cache(maxsize=65536)  # a node's identities are the same every hour it is billed
def billed_identities(
    project: str | None,
    zone: str | None,
    instance: str | None,
    instance_id: str | None,
    cluster: str | None,
) -> tuple[NodeId, ...]:
    """Every identity a billed GPU row answers to, primary first (empty without name or id).

    >>> [n.kind.value for n in billed_identities("p", "us-central1-a", "gke-c-pool-1a2b3c4d-ab12", "42", "c")]
    ['gke', 'gce']
    >>> [n.key for n in billed_identities("p", "us-central1-a", "vm-1", None, None)]
    ['gce_name|p|us-central1-a|vm-1']
    """
    out: list[NodeId] = []
    if cluster and instance:
        out.append(NodeId(NodeKind.GKE, project, (cluster, instance)))
    if instance_id:
        out.append(NodeId(NodeKind.GCE, project, (instance_id,)))
    elif instance and not cluster:
        out.append(NodeId(NodeKind.GCE_NAME, project, (zone, instance)))
    return tuple(out)


@functools.lru_cache(maxsize=65536)  # asked of every GPU hour by the detectors, of a few hundred nodes
def billed_identity(
    project: str | None,
    zone: str | None,
    instance: str | None,
    instance_id: str | None,
    cluster: str | None,
) -> NodeId:
    """The primary identity of a billed (or estimated) row; a nameless, id-less row is keyed by zone."""
    ids = billed_identities(project, zone, instance, instance_id, cluster)
    return ids[0] if ids else NodeId(NodeKind.GCE_NAME, project, (zone, instance))


@functools.lru_cache(maxsize=65536)  # a host's identities are the same every hour it reports
def sample_identities(
    project: str | None,
    zone: str | None,
    instance_id: str | None,
    instance_name: str | None,
    cluster: str | None,
    node_name: str | None,
) -> tuple[NodeId, ...]:
    """Every identity a utilization sample's host answers to, primary first.

    A GCE sample (instance id) is primarily its id and also its (zone, name); a GKE sample (cluster
    and node, no id) is primarily (cluster, node) and also (zone, node), as the join matched before.

    >>> [n.kind.value for n in sample_identities("p", "us-central1-a", "42", "vm-1", None, None)]
    ['gce', 'gce_name']
    >>> [n.kind.value for n in sample_identities("p", "us-central1", None, None, "c", "gke-c-pool-1a2b3c4d-ab12")]
    ['gke', 'gce_name']
    """
    out: list[NodeId] = []
    gke = NodeId(NodeKind.GKE, project, (cluster, node_name)) if cluster and node_name else None
    if instance_id:
        out.append(NodeId(NodeKind.GCE, project, (instance_id,)))
    elif gke:
        out.append(gke)
    for name in dict.fromkeys(n for n in (instance_name, node_name) if n):
        out.append(NodeId(NodeKind.GCE_NAME, project, (zone, name)))
    if instance_id and gke:
        out.append(gke)
    return tuple(out)


class RowFields(Protocol):
    """The fields of a billed or estimated GPU row (`GpuHour`, `GpuCostHour`) identity reads."""

    project: str | None
    zone: str | None
    instance: str | None
    instance_id: str | None
    cluster: str | None


class HostFields(Protocol):
    """The identifying fields of a `GpuSample`."""

    project: str
    zone: str | None
    instance_id: str | None
    instance_name: str | None
    cluster: str | None
    node_name: str | None


def row_identity(row: RowFields) -> NodeId:
    """The identity (and fingerprint scope) of a GPU row, billed or estimated alike."""
    return billed_identity(row.project, row.zone, row.instance, row.instance_id, row.cluster)


_SUFFIX = re.compile(r"^(?P<pool>.+)-[0-9a-f]{8}-[0-9a-z]{4}$")


@functools.lru_cache(maxsize=65536)  # asked once per GPU node-hour, of a few hundred nodes
def node_pool_from_name(cluster: str | None, node: str | None) -> str | None:
    """The node pool in a GKE node name, when the name carries the cluster untruncated; else None.

    >>> node_pool_from_name("standard-cluster-1", "gke-standard-cluster-1-default-pool-b5e24cb4-j23k")
    'default-pool'
    >>> node_pool_from_name("c", "vm-1") is None
    True
    """
    if not cluster or not node:
        return None
    prefix = f"gke-{cluster}-"
    if not node.startswith(prefix):
        return None
    m = _SUFFIX.match(node[len(prefix) :])
    return m.group("pool") if m else None
