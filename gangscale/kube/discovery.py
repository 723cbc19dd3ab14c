"""API discovery: what the server serves decides what the planner reads.

Only the groups that matter are fetched (the gang groups, plus `apps` for the
Cluster Autoscaler check), so discovery costs a handful of requests even on
clusters with hundreds of CRDs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .client import KubeClient
from .errors import KubeError
from .refs import (
    COSCHEDULING_GROUP,
    DRA_GROUP,
    GANG_GROUPS,
    INPUT_GROUPS,
    KUEUE_GROUP,
    NATIVE_GROUP,
    VOLCANO_GROUP,
    ResourceRef,
)

# Native versions the planner's ingest understands, best first.
NATIVE_PODGROUP_VERSIONS = ("v1beta1", "v1alpha2")
WORKLOAD_VERSION = "v1alpha1"  # 1.35: pods point at Workload pod groups
# DRA (GA in 1.34; 1.32/1.33 serve only beta) and Kueue: the versions ingest reads, best first.
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
DRA_PLURALS = ("resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices")
KUEUE_VERSIONS = ("v1beta1", "v1beta2")
MATURITY = {"v1alpha1": "alpha", "v1alpha2": "alpha", "v1alpha3": "alpha", "v1beta1": "beta"}


@dataclass(slots=True)
class ServerInfo:
    git_version: str
    major: int | None
    minor: int | None
    # group -> served versions, preferred first
    groups: dict[str, list[str]] = field(default_factory=dict)
    # "g/v" -> plural -> ref
    resources: dict[str, dict[str, ResourceRef]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def ref(self, group: str, version: str, plural: str) -> ResourceRef | None:
        return self.resources.get(f"{group}/{version}", {}).get(plural)

    def served(self, group: str, plural: str) -> list[ResourceRef]:
        """Every served version of one resource, in the server's preference order."""
        out = []
        for v in self.groups.get(group, []):
            r = self.ref(group, v, plural)
            if r is not None:
                out.append(r)
        return out


@dataclass(slots=True)
class GangApis:
    """What the planner reads, and what it saw but cannot read."""

    native: ResourceRef | None = None  # PodGroup v1beta1 (1.37) or v1alpha2 (1.36)
    workload: ResourceRef | None = None  # Workload v1alpha1 (1.35)
    coscheduling: ResourceRef | None = None
    volcano: ResourceRef | None = None
    # served gang resources the planner does not read
    unread: list[str] = field(default_factory=list)
    # DRA and Kueue resources read beside the gangs
    inputs: list[ResourceRef] = field(default_factory=list)

    @property
    def refs(self) -> list[ResourceRef]:
        return [
            r
            for r in (self.native, self.workload, self.coscheduling, self.volcano)
            if r is not None
        ]

    @property
    def native_ref(self) -> ResourceRef | None:
        return self.native or self.workload

    @property
    def pod_field(self) -> str | None:
        """The Pod field that links a pod to its native group on this server."""
        if self.native is not None:
            return "schedulingGroup"
        if self.workload is not None:
            return "workloadRef"
        return None


def _int(text: Any) -> int | None:
    m = re.match(r"\d+", str(text or ""))
    return int(m.group()) if m else None


def parse_version(doc: dict[str, Any]) -> tuple[str, int | None, int | None]:
    """gitVersion, major, minor from /version; EKS/GKE minors such as "36+" included."""
    git = str(doc.get("gitVersion") or "")
    major, minor = _int(doc.get("major")), _int(doc.get("minor"))
    m = re.match(r"v?(\d+)\.(\d+)", git)
    if m and (major is None or minor is None):
        major, minor = int(m.group(1)), int(m.group(2))
    return git, major, minor


def _resource_list(doc: dict[str, Any], group: str, version: str) -> dict[str, ResourceRef]:
    out: dict[str, ResourceRef] = {}
    for r in doc.get("resources") or []:
        if not isinstance(r, dict) or "/" in str(r.get("name", "")):  # skip subresources
            continue
        verbs = r.get("verbs") or []
        if "list" not in verbs:
            continue
        out[str(r["name"])] = ResourceRef(
            group,
            version,
            str(r["name"]),
            str(r.get("kind") or ""),
            bool(r.get("namespaced", True)),
        )
    return out


def discover(
    client: KubeClient, groups: tuple[str, ...] = (*GANG_GROUPS, *INPUT_GROUPS, "apps")
) -> ServerInfo:
    """Server version, served versions of `groups`, and their resources."""
    git, major, minor = parse_version(client.get("/version"))
    info = ServerInfo(git, major, minor)
    listing = client.get("/apis")
    for g in listing.get("groups") or []:
        if not isinstance(g, dict) or g.get("name") not in groups:
            continue
        versions = [str(v.get("version")) for v in g.get("versions") or [] if isinstance(v, dict)]
        preferred = (g.get("preferredVersion") or {}).get("version")
        if preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
        info.groups[str(g["name"])] = versions
        for v in versions:
            try:
                doc = client.get(f"/apis/{g['name']}/{v}")
            except KubeError as exc:  # an aggregated API that is down, a race with a CRD upgrade
                if exc.status == 0:
                    raise
                info.warnings.append(f"discovery of {g['name']}/{v} failed: {exc}")
                continue
            info.resources[f"{g['name']}/{v}"] = _resource_list(doc, str(g["name"]), v)
    return info


def choose_gang_apis(info: ServerInfo) -> GangApis:
    """One version per gang API: the same objects are served in every enabled version."""
    apis = GangApis()
    for v in NATIVE_PODGROUP_VERSIONS:
        if (r := info.ref(NATIVE_GROUP, v, "podgroups")) is not None:
            apis.native = r
            break
    apis.workload = info.ref(NATIVE_GROUP, WORKLOAD_VERSION, "workloads")
    apis.coscheduling = info.ref(COSCHEDULING_GROUP, "v1alpha1", "podgroups")
    apis.volcano = info.ref(VOLCANO_GROUP, "v1beta1", "podgroups")
    apis.inputs = choose_input_apis(info)
    for chosen, group in (
        (apis.native, NATIVE_GROUP),
        (apis.coscheduling, COSCHEDULING_GROUP),
        (apis.volcano, VOLCANO_GROUP),
    ):
        if chosen is None:
            apis.unread += [f"{r.plural}.{r.api_version}" for r in info.served(group, "podgroups")]
    return apis


def choose_input_apis(info: ServerInfo) -> list[ResourceRef]:
    """One served version each of the DRA resources and of Kueue's Workload, best first."""
    out = []
    for group, versions, plurals in (
        (DRA_GROUP, DRA_VERSIONS, DRA_PLURALS),
        (KUEUE_GROUP, KUEUE_VERSIONS, ("workloads",)),
    ):
        for plural in plurals:
            ref = next((r for v in versions if (r := info.ref(group, v, plural)) is not None), None)
            if ref is not None:
                out.append(ref)
    return out


def describe(apis: GangApis) -> str:
    names = [f"{r.kind} {r.api_version}" for r in apis.refs]
    return ", ".join(names) if names else "none"
