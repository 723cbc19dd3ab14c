"""Which REST resource to read, and where it lives on the API server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """One resource in one served version: enough to build every URL for it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def label(self) -> str:
        """`podgroups.v1alpha2.scheduling.k8s.io`, kubectl's fully qualified spelling."""
        return ".".join(p for p in (self.plural, self.version, self.group) if p)

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        return base

    def typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Fill apiVersion/kind, which items of a list response leave out (in place)."""
        obj["apiVersion"] = self.api_version
        obj["kind"] = self.kind
        return obj


NODES = ResourceRef("", "v1", "nodes", "Node", namespaced=False)
PODS = ResourceRef("", "v1", "pods", "Pod")
CONFIGMAPS = ResourceRef("", "v1", "configmaps", "ConfigMap")
DEPLOYMENTS = ResourceRef("apps", "v1", "deployments", "Deployment")
DAEMONSETS = ResourceRef(
    "apps", "v1", "daemonsets", "DaemonSet"
)  # what new nodes run first (gangscale.daemonsets)
NAMESPACES = ResourceRef("", "v1", "namespaces", "Namespace", namespaced=False)

NATIVE_GROUP = "scheduling.k8s.io"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
VOLCANO_GROUP = "scheduling.volcano.sh"
GANG_GROUPS = (NATIVE_GROUP, COSCHEDULING_GROUP, VOLCANO_GROUP)
# ResourceClaims, templates, DeviceClasses, ResourceSlices (ingest_dra)
DRA_GROUP = "resource.k8s.io"
KUEUE_GROUP = "kueue.x-k8s.io"  # Kueue Workloads (ingest_kueue)
INPUT_GROUPS = (DRA_GROUP, KUEUE_GROUP)


def object_key(obj: Any) -> tuple[str, str] | None:
    """(namespace, name) of an object, or None when it has no name."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return None
    ns = meta.get("namespace")
    return (ns if isinstance(ns, str) else "", meta["name"])


def resource_version(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) else ""
