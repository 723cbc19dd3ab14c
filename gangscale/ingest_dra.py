"""Dynamic Resource Allocation (resource.k8s.io) -> per-DeviceClass device counts, planned like extended resources.

A pod's ResourceClaims (direct, or generated from a ResourceClaimTemplate) become a request of
`dra.gangscale.io/<deviceClassName>` units, one per device; node groups offer the same resource from the
catalog's `devices`, existing nodes from their ResourceSlices (devices no claim has allocated). The solver
treats it as any extended resource.

A PodGroup's `spec.resourceClaims` (DRAWorkloadResourceClaims, 1.36+) is one claim for the whole group: pods
repeating its entry share it, so it counts once per PodGroup.

Invariant: a pod with a claim the planner cannot model is never planned device-free. A missing claim or
template, CEL selectors, `allocationMode: All`, admin access, prioritized alternatives (`firstAvailable`),
consumable capacity or a field the planner does not know make its gang `invalid`, with the claim and the
field named; claim constraints (`matchAttribute`, `distinctAttribute`) are planned by count with a warning
naming the claim. On the supply side a device is never counted twice or on a guess: a DeviceClass selector
is evaluated (driver and attribute equality) or the class counts no existing devices, with a warning, and
tainted, partitionable or network-attached devices are not counted, with a warning.

Upstream types: kubernetes/kubernetes staging/src/k8s.io/api/resource/v1/types.go (ResourceClaimSpec,
DeviceClaim, DeviceRequest{exactly,firstAvailable}, ExactDeviceRequest{deviceClassName,selectors,
allocationMode,count,adminAccess,capacity}, DeviceClassSpec{selectors,extendedResourceName},
ResourceSliceSpec{driver,pool,nodeName,allNodes,nodeSelector,devices}, AllocationResult) and
resource/v1beta1/types.go, whose DeviceRequest carries the ExactDeviceRequest fields inline.
Extended-resource mapping: KEP-5004 (DRAExtendedResource, 1.34+): a DeviceClass with
`spec.extendedResourceName: nvidia.com/gpu` lets a pod that requests `nvidia.com/gpu` be served by DRA;
every class also answers to the implicit name `deviceclass.resource.kubernetes.io/<class>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .model import Node, Pod
from .parse import (
    FAMILY_NATIVE,
    ObjectError,
    _int_field,
    _list,
    _map,
    _mapping_or_empty,
    _short,
)
from .warnlog import WarningLog

DRA_GROUP = "resource.k8s.io"
DRA_APIS = (f"{DRA_GROUP}/v1", f"{DRA_GROUP}/v1beta2", f"{DRA_GROUP}/v1beta1")
DRA_KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")
DRA_PREFIX = "dra.gangscale.io/"
# KEP-5004's implicit extended resource per class
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
_DRIVER_CEL = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
# The DeviceClass selectors the planner evaluates against slice devices: `&&` of `device.driver == 'd'` and
# `device.attributes['domain'].name == <string|int|bool>` (how NVIDIA's driver tells gpu from mig devices).
_DRIVER_TEST = re.compile(r"""^device\.driver\s*==\s*(["'])([^"']+)\1$""")
_ATTR_TEST = re.compile(
    r"""^device\.attributes\[(["'])([^"']+)\1\]\.(\w+)\s*==\s*"""
    r"""(?:(["'])([^"']*)\4|(true|false)|(-?\d+))$"""
)
# The fields of a claim the planner reads or refuses by name (resource/v1 types.go). Any other field comes from
# an API the planner does not know, so it cannot tell how it changes the devices: the claim is not modelled.
_CLAIM_FIELDS = frozenset({"requests", "constraints", "config"})
_REQUEST_FIELDS = frozenset({"name", "exactly", "firstAvailable"})
_EXACT_FIELDS = frozenset(
    {
        "deviceClassName",
        "selectors",
        "allocationMode",
        "count",
        "adminAccess",
        "tolerations",
        "capacity",
    }
)
_V1BETA1_FIELDS = _EXACT_FIELDS | {
    "name",
    "firstAvailable",
}  # resource.k8s.io/v1beta1: one flat request


def device_resource(device_class: str) -> str:
    """The resource name the planner uses for devices of one DeviceClass."""
    return DRA_PREFIX + device_class


@dataclass(slots=True)
class _Claim:
    demand: dict[str, int] | None  # None: cannot be modelled (see `problem`)
    problem: str = ""
    allocated: bool = False
    warning: str = ""


@dataclass(slots=True)
class DraIndex:
    """Claims, templates, classes and slices, collected in any order, used once every object is read."""

    claims: dict[tuple[str, str], _Claim] = field(default_factory=dict)
    templates: dict[tuple[str, str], _Claim] = field(default_factory=dict)
    # DeviceClass -> driver its selector names
    class_driver: dict[str, str] = field(default_factory=dict)
    # (domain, name, value)
    class_tests: dict[str, tuple[tuple[str, str, Any], ...]] = field(default_factory=dict)
    # classes whose selectors the planner cannot evaluate
    unmodelled: set[str] = field(default_factory=set)
    # extended resource name -> device resource
    aliases: dict[str, str] = field(default_factory=dict)
    # node, driver, pool, generation, devices as (node, device name, attributes)
    slices: list[tuple[str, str, str, int, list[tuple[str, str, Mapping[str, Any]]]]] = field(
        default_factory=list
    )
    allocated: set[tuple[str, str, str]] = field(default_factory=set)  # (driver, pool, device)
    # pods-list index, ns, claims, statuses
    pods: list[tuple[int, str, list[Any], list[Any]]] = field(default_factory=list)
    # pods-list indexes whose extended resources DRA allocated
    dra_served: set[int] = field(default_factory=set)
    # PodGroup spec.resourceClaims per (ns, PodGroup): {(name, claim, template): generated claim}, and a problem
    group_claims: dict[tuple[str, str], tuple[dict[tuple[str, str, str], str], str]] = field(
        default_factory=dict
    )

    def add(self, obj: Mapping[str, Any], kind: str, warnings: WarningLog) -> None:
        meta = _map(obj.get("metadata"), "metadata")
        name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
        if not name:
            raise ObjectError("metadata.name is missing")
        spec = _map(obj.get("spec"), "spec")
        if kind == "ResourceClaim":
            self.claims[(ns, name)] = _read_claim(
                spec, "spec", _map(obj.get("status"), "status"), self.allocated
            )
        elif kind == "ResourceClaimTemplate":
            self.templates[(ns, name)] = _read_claim(
                _map(spec.get("spec"), "spec.spec"), "spec.spec", {}, set()
            )
        elif kind == "DeviceClass":
            self._add_class(name, spec, warnings)
        else:
            self._add_slice(name, spec, warnings)

    def _add_class(self, name: str, spec: Mapping[str, Any], warnings: WarningLog) -> None:
        tests: list[tuple[str, str, Any]] = []
        for i, sel in enumerate(_list(spec.get("selectors"), "spec.selectors")):
            cel = _map(_map(sel, f"spec.selectors[{i}]").get("cel"), f"spec.selectors[{i}].cel")
            m = _DRIVER_CEL.search(str(cel.get("expression") or ""))
            if m:
                self.class_driver[name] = m.group(1)
            parsed = _class_tests(str(cel.get("expression") or ""))
            if parsed is None:
                self.unmodelled.add(name)
                warnings.add(
                    f"DeviceClass {name}: spec.selectors[{i}].cel.expression is not modelled (only `&&` of "
                    "device.driver and device.attributes[...].name equality tests are): its devices on "
                    "existing nodes are not counted",
                    "dra class selectors",
                )
            else:
                tests.extend(parsed)
        self.class_tests[name] = tuple(tests)
        ext = spec.get("extendedResourceName")
        if isinstance(ext, str) and ext:
            self.aliases[ext] = device_resource(name)
        self.aliases[IMPLICIT_PREFIX + name] = device_resource(name)

    def _add_slice(self, name: str, spec: Mapping[str, Any], warnings: WarningLog) -> None:
        driver = str(spec.get("driver") or "")
        pool = _map(spec.get("pool"), "spec.pool")
        if not driver or not pool.get("name"):
            raise ObjectError("spec.driver and spec.pool.name are required")
        gen = _int_field(
            pool.get("generation", 0), "spec.pool.generation", minimum=0, maximum=2**63 - 1
        )
        node = spec.get("nodeName")
        devices: list[tuple[str, str, Mapping[str, Any]]] = []  # (node, device, attributes)
        for i, d in enumerate(_list(spec.get("devices"), "spec.devices")):
            d = _map(d, f"spec.devices[{i}]")
            if d.get("consumesCounters") or (d.get("basic") or {}).get("consumesCounters"):
                warnings.add(
                    f"ResourceSlice {name}: spec.devices[{i}].consumesCounters: partitionable devices are "
                    "not counted (the planner cannot model shared counters)",
                    "dra partitionable",
                )
                continue
            if d.get("taints") or (d.get("basic") or {}).get("taints"):
                warnings.add(
                    f"ResourceSlice {name}: spec.devices[{i}].taints: a tainted device is not counted (only "
                    "claims that tolerate the taint may use it)",
                    "dra device taints",
                )
                continue
            dev_node = d.get("nodeName") or node
            if not dev_node:
                if d.get("allNodes") or d.get("nodeSelector"):
                    warnings.add(
                        f"ResourceSlice {name}: spec.devices[{i}] is reachable through allNodes or nodeSelector "
                        "(network-attached) and is not counted on any node",
                        "dra network devices",
                    )
                continue
            attrs = (
                d.get("attributes")
                if "basic" not in d
                else (d.get("basic") or {}).get("attributes")
            )
            devices.append(
                (str(dev_node), str(d.get("name")), attrs if isinstance(attrs, Mapping) else {})
            )
        if not node and not spec.get("perDeviceNodeSelection"):
            warnings.add(
                f"ResourceSlice {name}: devices reachable through spec.nodeSelector or spec.allNodes "
                "(network-attached) are not counted on any node",
                "dra network devices",
            )
        self.slices.append((str(node or ""), driver, str(pool["name"]), gen, devices))

    def note_pod(self, index: int, obj: Mapping[str, Any]) -> bool:
        """Remember a pod's claim references; demands are resolved once every claim has been read. True when it kept
        anything of the pod (one it kept nothing of need not be shown to it again)."""
        spec, status = obj.get("spec"), obj.get("status")
        served = (type(status) is dict or isinstance(status, Mapping)) and status.get(
            "extendedResourceClaimStatus"
        )
        if served:
            self.dra_served.add(index)  # KEP-5004: its claim's allocation already took the devices
        claims = (
            spec.get("resourceClaims") if type(spec) is dict or isinstance(spec, Mapping) else None
        )
        if claims:
            meta = _mapping_or_empty(obj.get("metadata"))
            statuses = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
            self.pods.append(
                (
                    index,
                    str(meta.get("namespace") or "default"),
                    claims if isinstance(claims, list) else [claims],
                    statuses or [],
                )
            )
        return bool(served or claims)

    def note_group(self, obj: Mapping[str, Any]) -> None:
        """A native PodGroup's `spec.resourceClaims` (DRAWorkloadResourceClaims, 1.36+): one claim for the group.

        A pod uses it by listing the same entry (name and source) in its own `spec.resourceClaims`; a template
        entry makes one ResourceClaim per PodGroup (named in `status.resourceClaimStatuses`), not one per pod."""
        meta, spec, status = (_mapping_or_empty(obj.get(k)) for k in ("metadata", "spec", "status"))
        refs = spec.get("resourceClaims")
        if not refs or not isinstance(meta.get("name"), str):
            return
        made = (
            {
                s.get("name"): s.get("resourceClaimName")
                for s in status.get("resourceClaimStatuses") or []
                if isinstance(s, Mapping)
            }
            if isinstance(status.get("resourceClaimStatuses"), list)
            else {}
        )
        entries: dict[tuple[str, str, str], str] = {}
        problem = ""
        try:
            for i, ref in enumerate(_list(refs, "spec.resourceClaims")):
                ref = _map(ref, f"spec.resourceClaims[{i}]")
                claim, tmpl = ref.get("resourceClaimName"), ref.get("resourceClaimTemplateName")
                if (
                    not isinstance(ref.get("name"), str)
                    or not ref["name"]
                    or bool(claim) == bool(tmpl)
                ):
                    raise ObjectError(
                        f"spec.resourceClaims[{i}] needs a name and exactly one of resourceClaimName "
                        "or resourceClaimTemplateName"
                    )
                entries[(ref["name"], str(claim or ""), str(tmpl or ""))] = str(
                    made.get(ref["name"]) or ""
                )
        except ObjectError as exc:
            problem = f"PodGroup {meta.get('namespace') or 'default'}/{meta['name']}: {exc}"
        self.group_claims[(str(meta.get("namespace") or "default"), meta["name"])] = (
            entries,
            problem,
        )

    def group_problems(self) -> dict[tuple[str, str, str], str]:
        """Gang key -> why its PodGroup's claims cannot be read (the gang is invalid: its devices are unknown)."""
        return {
            (ns, FAMILY_NATIVE, name): problem
            for (ns, name), (_e, problem) in self.group_claims.items()
            if problem
        }

    # ------------------------------------------------------------------ results

    def node_devices(self) -> dict[str, dict[str, int]]:
        """Per node, free devices per class: the newest pool generation's devices no claim has allocated."""
        newest: dict[tuple[str, str], int] = {}
        for _node, driver, pool, gen, _devs in self.slices:
            newest[(driver, pool)] = max(newest.get((driver, pool), 0), gen)
        out: dict[str, dict[str, int]] = {}
        for _node, driver, pool, gen, devs in self.slices:
            if gen != newest[(driver, pool)]:
                continue
            classes = self.classes_of(driver)
            for node, device, attrs in devs:
                if (driver, pool, device) in self.allocated:
                    continue
                for cls in classes:
                    if _matches(self.class_tests.get(cls, ()), driver, attrs):
                        node_out = out.setdefault(node, {})
                        node_out[device_resource(cls)] = node_out.get(device_resource(cls), 0) + 1
        return out

    def classes_of(self, driver: str) -> list[str]:
        """DeviceClasses whose selector names `driver` (and can be evaluated); none listed: the class named like
        the driver."""
        named = sorted(c for c, d in self.class_driver.items() if d == driver)
        return [c for c in named if c not in self.unmodelled] if named else [driver]

    def resolve(self, pods: list, warnings: WarningLog) -> None:
        """Add each pending pod's device demand to its requests; a claim shared by pods counts once."""
        counted: dict[tuple, tuple[_Claim | None, str, list[str]]] = {}
        for index, ns, claims, statuses in self.pods:
            pod, key, problem = pods[index]
            if pod is None or problem or pod.node_name:
                continue  # a bound pod's devices are allocated: its slices no longer offer them
            group = (
                self.group_claims.get((key[0], key[2])) if key and key[1] == FAMILY_NATIVE else None
            )
            try:
                demand = self._pod_demand(
                    ns,
                    claims,
                    statuses,
                    counted,
                    warnings,
                    pod,
                    (key[2], group[0]) if group else None,
                )
            except ObjectError as exc:
                pods[index] = (pod, key, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a shape no check foresaw: this pod's gang, not the pass
                pods[index] = (
                    pod,
                    key,
                    f"spec.resourceClaims cannot be read ({type(exc).__name__})",
                )
                continue
            if demand:
                pods[index] = (replace(pod, requests=_plus(pod.requests, demand)), key, problem)
        self._warn_shared(counted, warnings)

    def _pod_demand(
        self,
        ns: str,
        claims: list[Any],
        statuses: list[Any],
        counted: dict,
        warnings: WarningLog,
        pod: Pod,
        group: tuple[str, dict[tuple[str, str, str], str]] | None = None,
    ) -> dict[str, int]:
        generated = {
            s.get("name"): s.get("resourceClaimName") for s in statuses if isinstance(s, Mapping)
        }
        total: dict[str, int] = {}
        for i, ref in enumerate(claims):
            where = f"spec.resourceClaims[{i}]"
            found = self._claim_of(_map(ref, where), where, ns, generated, counted, group, pod.key)
            if found is None:
                continue  # counted already, or its devices are allocated
            claim, label = found
            if claim is None:
                raise ObjectError(
                    f"{where}: {label} was not listed, so the pod's device demand is unknown"
                )
            if claim.demand is None:
                raise ObjectError(f"{where}: {label}: {claim.problem}")
            if claim.allocated:
                continue  # devices already reserved on a node
            if claim.warning:
                warnings.add(f"pod {pod.key}: {label}: {claim.warning}", "dra constraints")
            for res, n in claim.demand.items():
                total[res] = total.get(res, 0) + n
        return total

    def _claim_of(
        self,
        ref: Mapping[str, Any],
        where: str,
        ns: str,
        generated: Mapping[Any, Any],
        counted: dict,
        group: tuple[str, dict[tuple[str, str, str], str]] | None,
        who: str,
    ) -> tuple[_Claim | None, str] | None:
        """The claim one pod reference stands for and its label; None when it adds no devices for this pod.

        A named claim is shared: counted for the first pod only (`counted`: claim -> its label and pods). A
        template makes one claim per pod, unless the reference repeats an entry of the pod's PodGroup
        `spec.resourceClaims`: then one per PodGroup."""
        if ref.get("resourceClaimName"):
            key: tuple = (ns, str(ref["resourceClaimName"]))
            claim, label = self.claims.get(key), f"ResourceClaim {ns}/{key[1]}"
        elif ref.get("resourceClaimTemplateName"):
            tmpl = str(ref["resourceClaimTemplateName"])
            made, label = generated.get(ref.get("name")), f"ResourceClaimTemplate {ns}/{tmpl}"
            entry = (str(ref.get("name") or ""), "", tmpl)
            key = ()
            if group is not None and entry in group[1]:
                key = (ns, group[0], entry)
                made, label = (
                    group[1][entry] or made,
                    f"{label} (PodGroup {ns}/{group[0]} claim {entry[0]})",
                )
            if made and (ns, made) in self.claims and self.claims[(ns, made)].allocated:
                return None
            claim = self.templates.get((ns, tmpl))
        else:
            raise ObjectError(f"{where}: needs resourceClaimName or resourceClaimTemplateName")
        if key and key in counted:
            counted[key][2].append(who)
            return None  # shared: the devices are allocated once, for the first pod
        if key:
            counted[key] = (claim, label, [who])
        return claim, label

    def _warn_shared(self, counted: dict, warnings: WarningLog) -> None:
        """A shared claim's devices sit on one node: say that the planner does not keep its pods together."""
        for claim, label, who in counted.values():
            if len(who) > 1 and claim is not None and claim.demand and not claim.allocated:
                warnings.add(
                    f"{label} is shared by {len(who)} pending pods ({', '.join(who[:3])}"
                    f"{', ...' if len(who) > 3 else ''}): its devices are counted once, on {who[0]}; the "
                    "plan does not keep the other pods on that pod's node, where node-local devices need "
                    "them",
                    "dra shared claims",
                )

    def fold_aliases(self, pods: list, nodes: list[Node]) -> None:
        """KEP-5004: requests and node capacity of a mapped extended resource count as the class's devices."""
        if not self.aliases:
            return
        for i, (pod, key, problem) in enumerate(pods):
            if pod is None or not any(k in self.aliases for k in pod.requests):
                continue
            if pod.node_name and i in self.dra_served:
                # counted by its allocated claim: the slices no longer offer them
                requests = {k: v for k, v in pod.requests.items() if k not in self.aliases}
            else:
                requests = dict(pod.requests)
                _rename(requests, self.aliases)
            pods[i] = (replace(pod, requests=requests), key, problem)
        for i, node in enumerate(nodes):  # a copy: a parsed Node may be shared by reads
            if any(k in self.aliases for k in node.allocatable):
                allocatable = dict(node.allocatable)
                _rename(allocatable, self.aliases)
                nodes[i] = replace(node, allocatable=allocatable)


def _class_tests(expression: str) -> list[tuple[str, str, Any]] | None:
    """A class selector's attribute tests, or None when it is more than `&&` of the tests the planner knows."""
    tests: list[tuple[str, str, Any]] = []
    for clause in expression.split("&&"):
        clause = clause.strip()
        while clause.startswith("(") and clause.endswith(")"):
            clause = clause[1:-1].strip()
        if _DRIVER_TEST.match(clause):
            continue  # the driver: `classes_of`
        m = _ATTR_TEST.match(clause)
        if m is None:
            return None
        value: Any = (
            m.group(5) if m.group(4) else (m.group(6) == "true") if m.group(6) else int(m.group(7))
        )
        tests.append((m.group(2), m.group(3), value))
    return tests


def _matches(
    tests: tuple[tuple[str, str, Any], ...], driver: str, attrs: Mapping[str, Any]
) -> bool:
    """Whether a slice device's attributes pass every test (an unqualified attribute is in the driver's domain)."""
    for domain, name, value in tests:
        raw = attrs.get(f"{domain}/{name}", attrs.get(name) if domain == driver else None)
        got = next(iter(raw.values()), None) if isinstance(raw, Mapping) and len(raw) == 1 else None
        if got != value or type(got) is not type(value):
            return False
    return True


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """`a` with `b` added, key by key (a new dict)."""
    out = dict(a)
    for k, n in b.items():
        out[k] = out.get(k, 0) + n
    return out


def _rename(amounts: dict[str, int], aliases: Mapping[str, str]) -> None:
    for name in [k for k in amounts if k in aliases]:
        n = amounts.pop(name)
        amounts[aliases[name]] = amounts.get(aliases[name], 0) + n


def _read_claim(
    spec: Mapping[str, Any],
    where: str,
    status: Mapping[str, Any],
    allocated: set[tuple[str, str, str]],
) -> _Claim:
    """A claim's device demand per class, or why it cannot be planned."""
    allocation = _map(status.get("allocation"), "status.allocation")
    for r in _list(
        _map(allocation.get("devices"), "status.allocation.devices").get("results"),
        "status.allocation.devices.results",
    ):
        if isinstance(r, Mapping):
            allocated.add((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))))
    try:
        devices = _map(spec.get("devices"), f"{where}.devices")
        _no_unknown(devices, _CLAIM_FIELDS, f"{where}.devices")
        demand: dict[str, int] = {}
        for i, req in enumerate(_list(devices.get("requests"), f"{where}.devices.requests")):
            cls, n = _request(req, f"{where}.devices.requests[{i}]")
            demand[device_resource(cls)] = demand.get(device_resource(cls), 0) + n
        warning = ""
        kinds = sorted(
            {
                str(k)
                for c in _list(devices.get("constraints"), f"{where}.devices.constraints")
                if isinstance(c, Mapping)
                for k in c
                if k != "requests"
            }
        )
        if kinds:
            warning = (
                f"{where}.devices.constraints ({', '.join(kinds)}) is not modelled: "
                "devices are planned by count only"
            )
        return _Claim(demand, allocated=bool(allocation), warning=warning)
    except ObjectError as exc:
        return _Claim(None, str(exc), allocated=bool(allocation))


def _request(raw: Any, where: str) -> tuple[str, int]:
    """(deviceClassName, count) of one request: v1/v1beta2 `exactly`, or v1beta1's inline fields."""
    req = _map(raw, where)
    if req.get("firstAvailable"):
        raise ObjectError(f"{where}.firstAvailable (prioritized alternatives) is not supported")
    if "exactly" in req:
        _no_unknown(req, _REQUEST_FIELDS, where)
        body, where = _map(req.get("exactly"), f"{where}.exactly"), f"{where}.exactly"
        known = _EXACT_FIELDS
    else:
        body, known = req, _V1BETA1_FIELDS  # resource.k8s.io/v1beta1
    cls = body.get("deviceClassName")
    if not isinstance(cls, str) or not cls:
        raise ObjectError(f"{where}.deviceClassName is missing")
    if body.get("selectors"):
        raise ObjectError(
            f"{where}.selectors: CEL device selectors are not supported (the planner cannot "
            "evaluate them against devices)"
        )
    if body.get("adminAccess") is True:
        raise ObjectError(
            f"{where}.adminAccess is not supported (admin access does not consume devices)"
        )
    if body.get("capacity"):
        raise ObjectError(
            f"{where}.capacity: consumable-capacity requests (shared, partitioned devices) are "
            "not supported"
        )
    _no_unknown(body, known, where)
    mode = body.get("allocationMode") or "ExactCount"
    if mode == "All":
        raise ObjectError(
            f"{where}.allocationMode All is not supported (it takes every matching device of a node)"
        )
    if mode != "ExactCount":
        raise ObjectError(f"{where}.allocationMode: unknown mode {_short(mode)}")
    count = body.get("count", 1)
    return cls, _int_field(
        1 if count is None else count, f"{where}.count", minimum=1, maximum=2**20
    )


def _no_unknown(obj: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    """Refuse a set field the planner does not know: it may change which devices or how many are allocated."""
    for key in sorted(
        str(k) for k, v in obj.items() if k not in known and v not in (None, [], {}, False)
    ):
        raise ObjectError(
            f"{where}.{key}: a field the planner does not know (a newer API?), so the claim's "
            "device demand cannot be counted"
        )
