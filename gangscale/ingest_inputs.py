"""The inputs beyond gang APIs that `ingest` reads: DRA claims, Kueue Workloads, YuniKorn task groups, DaemonSets.

They are collected while `ingest` walks the objects (in any order) and applied once everything is read,
before pods join their gangs. Nothing here is silently dropped: an object that cannot be modelled makes
its gang invalid or adds a warning that names the object and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeGuard

from .daemonsets import DaemonSet
from .ingest_daemonsets import DAEMONSET_API, parse_daemonset
from .ingest_dra import DRA_APIS, DRA_KINDS, DraIndex
from .ingest_kueue import KUEUE_APIS, KueueIndex
from .ingest_yunikorn import group_yunikorn
from .model import Node
from .parse import NATIVE_PODGROUP_APIS
from .warnlog import WarningLog


class Inputs:
    """One ingest pass's DRA, Kueue, YuniKorn and DaemonSet state."""

    def __init__(self, plan_unadmitted: bool = False) -> None:
        self.plan_unadmitted = plan_unadmitted
        self.dra = DraIndex()
        self.kueue = KueueIndex()
        self.daemonsets: dict[str, DaemonSet] = {}  # namespace/name -> the first one listed

    @staticmethod
    def takes(kind: Any, api: str) -> TypeGuard[str]:
        return (
            (kind in DRA_KINDS and api in DRA_APIS)
            or (kind == "Workload" and api in KUEUE_APIS)
            or (kind == "DaemonSet" and api == DAEMONSET_API)
        )

    def add(self, obj: Mapping[str, Any], kind: str, warnings: WarningLog) -> None:
        if kind == "DaemonSet":
            ds = parse_daemonset(obj)
            self.daemonsets.setdefault(ds.key, ds)
        elif kind == "Workload":
            self.kueue.add(obj)
        else:
            self.dra.add(obj, kind, warnings)

    def note_pod(self, index: int, obj: Mapping[str, Any]) -> bool:
        """True when it kept anything of the pod (`DraIndex.note_pod`)."""
        return self.dra.note_pod(index, obj)

    def note_group(self, obj: Mapping[str, Any], kind: Any, api: str) -> None:
        """A native PodGroup's DRA claims (read again here so `parse` stays free of DRA)."""
        if kind == "PodGroup" and api in NATIVE_PODGROUP_APIS:
            self.dra.note_group(obj)

    def finish(self, pods: list, defs: dict, nodes: list[Node], warnings: WarningLog) -> None:
        """Gangs for Workloads and task groups, then device demand and node devices (templates included)."""
        for key, problem in self.dra.group_problems().items():
            if key in defs and not defs[key].invalid:
                defs[key].invalid = problem
        self.kueue.finish(pods, defs, self.plan_unadmitted, self.dra.note_pod)
        group_yunikorn(pods, defs, self.dra.note_pod)
        self.dra.resolve(pods, warnings)
        devices = self.dra.node_devices()
        for i, node in enumerate(
            nodes
        ):  # copies: a parsed Node may be shared by reads (`ParseCache(objects=True)`)
            if devices.get(node.name):
                allocatable = dict(node.allocatable)
                for res, n in devices[node.name].items():
                    allocatable[res] = allocatable.get(res, 0) + n
                nodes[i] = replace(node, allocatable=allocatable)
        self.dra.fold_aliases(pods, nodes)

    def admissions(self, pods: list) -> dict[tuple[str, str, str], str]:
        """Why a gang waits for Kueue admission, per gang key."""
        return self.kueue.admissions(pods)
