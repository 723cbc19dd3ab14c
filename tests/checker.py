"""An independent plan checker: re-derives every rule from the raw objects.

It shares no code with the planner beyond quantity parsing, so a bug in
ingest, fit or the solver shows up as a violation here. It understands the
subset of Kubernetes the property tests generate: container requests/limits,
nodeSelector, required node affinity (In/NotIn/Exists/DoesNotExist/Gt/Lt),
NoSchedule/NoExecute taints, native PodGroups with gang/basic policy and
topology keys, Ready/unschedulable nodes, bound pods, and the pod-to-pod rules
of kube-scheduler's InterPodAffinity (required anti-affinity on the hostname),
NodePorts (hostPort) and PodTopologySpread (DoNotSchedule; skew = matching pods
on the node minus the minimum over eligible nodes, final state) filters; DRA
claims (ExactCount devices per DeviceClass against catalog `dra.gangscale.io/*`
and ResourceSlice devices; a shared claim once; KEP-5004 extended-resource
mapping), Kueue Workloads and YuniKorn task groups (membership, quorum, the
members that do not exist yet, and no capacity for an unadmitted Workload),
and apps/v1 DaemonSets (their template pods' requests off every new or
upcoming node they would run on; their own pods are never planned).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from fractions import Fraction

from gangscale.resources import parse_quantity

GROUP_LABEL = "gangscale.io/node-group"


def _amount(name: str, q) -> Fraction:
    v = parse_quantity(q)
    return v * 1000 if name == "cpu" else v


def requests_of(pod: dict) -> dict[str, Fraction]:
    out: dict[str, Fraction] = defaultdict(Fraction)
    for c in pod["spec"].get("containers", []):
        res = c.get("resources", {})
        merged = {**res.get("limits", {}), **res.get("requests", {})}
        for k, v in merged.items():
            out[k] += _amount(k, v)
    out["pods"] += 1
    return out


def _selector_ok(pod: dict, labels: dict) -> bool:
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    terms = (spec.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms"))
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchExpressions", [])
        ok = bool(exprs)
        for e in exprs:
            v = labels.get(e["key"])
            vals = e.get("values", [])
            op = e["operator"]
            if op == "In":
                ok &= v is not None and v in vals
            elif op == "NotIn":
                ok &= v is None or v not in vals
            elif op == "Exists":
                ok &= v is not None
            elif op == "DoesNotExist":
                ok &= v is None
            elif op == "Gt":
                ok &= v is not None and v.lstrip("-").isdigit() and int(v) > int(vals[0])
            elif op == "Lt":
                ok &= v is not None and v.lstrip("-").isdigit() and int(v) < int(vals[0])
        if ok:
            return True
    return False


def _taints_ok(pod: dict, taints: list[dict]) -> bool:
    tols = pod["spec"].get("tolerations", [])
    for t in taints:
        if t["effect"] not in ("NoSchedule", "NoExecute"):
            continue
        tolerated = False
        for tol in tols:
            if tol.get("effect") and tol["effect"] != t["effect"]:
                continue
            if tol.get("operator") == "Exists":
                tolerated |= not tol.get("key") or tol["key"] == t["key"]
            else:
                tolerated |= tol.get("key") == t["key"] and (tol.get("value") or "") == (t.get("value") or "")
        if not tolerated:
            return False
    return True


HOSTNAME = "kubernetes.io/hostname"


def _label_sel_ok(sel: dict | None, labels: dict, own: dict, match_keys=(), mismatch_keys=()) -> bool:
    if sel is None:
        return False  # a null selector matches no pod
    if any(labels.get(k) != v for k, v in sel.get("matchLabels", {}).items()):
        return False
    exprs = list(sel.get("matchExpressions", []))
    exprs += [{"key": k, "operator": "In", "values": [own[k]]} for k in match_keys or () if k in own]
    exprs += [{"key": k, "operator": "NotIn", "values": [own[k]]} for k in mismatch_keys or () if k in own]
    for e in exprs:
        v, op = labels.get(e["key"]), e["operator"]
        if op == "In" and (v is None or v not in e["values"]):
            return False
        if op == "NotIn" and v is not None and v in e["values"]:
            return False
        if (op == "Exists") != (v is not None) and op in ("Exists", "DoesNotExist"):
            return False
    return True


def _anti_terms(pod: dict) -> list[dict]:
    aff = pod["spec"].get("affinity", {}).get("podAntiAffinity", {})
    return list(aff.get("requiredDuringSchedulingIgnoredDuringExecution", []))


def _term_hits(owner: dict, term: dict, other: dict) -> bool:
    """Does `owner`'s anti-affinity term match pod `other`?"""
    own_ns = owner["metadata"].get("namespace", "default")
    ns = other["metadata"].get("namespace", "default")
    if "namespaceSelector" in term:
        ok_ns = True  # the planner refuses label-based namespaceSelectors; {} is every namespace
    else:
        ok_ns = ns in (term.get("namespaces") or [own_ns])
    own_labels = owner["metadata"].get("labels", {})
    return ok_ns and _label_sel_ok(term.get("labelSelector"), other["metadata"].get("labels", {}), own_labels,
                                   term.get("matchLabelKeys"), term.get("mismatchLabelKeys"))


def _host_ports(pod: dict) -> list[tuple[str, int]]:
    spec = pod["spec"]
    cs = list(spec.get("containers", [])) + [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    out = []
    for c in cs:
        for p in c.get("ports", []):
            hp = p.get("hostPort") or (p.get("containerPort") if spec.get("hostNetwork") else None)
            if hp:
                out.append((p.get("protocol", "TCP"), hp))
    return out


def _unsupported_rule(pod: dict) -> str | None:
    """A pod-to-pod rule the planner must refuse (so such a pod must never be planned)."""
    spec = pod["spec"]
    aff = spec.get("affinity", {})
    if aff.get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        return "required podAffinity"
    for t in _anti_terms(pod):
        if t.get("topologyKey") != HOSTNAME:
            return f"anti-affinity on {t.get('topologyKey')}"
        if t.get("namespaceSelector", {}).get("matchLabels") or t.get("namespaceSelector", {}).get("matchExpressions"):
            return "namespaceSelector by label"
    return None


def _pod_rule_errors(pods: dict, nodes: dict, placements: list) -> list[str]:
    """Re-derive anti-affinity, hostPort and spread from the raw pods on every node of the final state."""
    errors: list[str] = []
    # every node of the final state with all pods on it: planned ones and bound ones
    where_pods: dict[str, list[dict]] = {}
    where_labels: dict[str, dict] = {}
    where_taints: dict[str, list] = {}
    planned_at: dict[str, str] = {}
    for i, (where, labels, taints, _cap, plist) in enumerate(placements):
        loc = f"{where}#{i}"
        where_labels[loc] = labels
        where_taints[loc] = taints
        where_pods[loc] = [pods[k] for k in plist if k in pods]
        for k in plist:
            planned_at[k] = loc
        if where.startswith("node "):
            name = where[5:]
            where_pods[loc] += [p for p in pods.values() if p["spec"].get("nodeName") == name
                                and p["status"].get("phase") not in ("Succeeded", "Failed")]
    placed_nodes = {w[5:] for w, *_ in placements if w.startswith("node ")}
    for name, nd in nodes.items():  # existing nodes the plan does not touch still count for spread minimums
        if name not in placed_nodes:
            loc = f"node {name}#x"
            where_labels[loc] = nd["metadata"].get("labels", {})
            where_taints[loc] = nd.get("spec", {}).get("taints", [])
            where_pods[loc] = [p for p in pods.values() if p["spec"].get("nodeName") == name
                               and p["status"].get("phase") not in ("Succeeded", "Failed")]

    def key(p: dict) -> str:
        return f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"

    for k, loc in planned_at.items():
        p = pods[k]
        if _unsupported_rule(p):
            errors.append(f"pod {k} planned although its {_unsupported_rule(p)} cannot be honoured")
        others = [q for q in where_pods[loc] if key(q) != k]
        for q in others:
            if any(_term_hits(p, t, q) for t in _anti_terms(p) if t.get("topologyKey") == HOSTNAME) or any(
                    _term_hits(q, t, p) for t in _anti_terms(q) if t.get("topologyKey") == HOSTNAME):
                errors.append(f"{loc}: pods {k} and {key(q)} share a node against required pod anti-affinity")
            shared = set(_host_ports(p)) & set(_host_ports(q))
            if shared:
                errors.append(f"{loc}: pods {k} and {key(q)} both use hostPort {sorted(shared)}")
        errors += _spread_errors(p, k, loc, where_pods, where_labels, where_taints)
    return errors


def _spread_errors(p: dict, k: str, loc: str, where_pods: dict, where_labels: dict, where_taints: dict) -> list[str]:
    """PodTopologySpread (DoNotSchedule) on the final state, any topologyKey (podtopologyspread/filtering.go): a node
    is a domain when it has every spread key of the pod and passes nodeAffinityPolicy (Honor by default) and
    nodeTaintsPolicy (Ignore by default); matching pods of the pod's namespace on those nodes are counted per domain;
    the pod's domain may hold at most the minimum (0 while fewer than minDomains domains exist) plus maxSkew."""
    errors = []
    hard = [c for c in p["spec"].get("topologySpreadConstraints", [])
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    keys = {c.get("topologyKey") for c in hard} - {HOSTNAME}
    ns = p["metadata"].get("namespace", "default")
    own = p["metadata"].get("labels", {})

    def domain(at: str, key: str):
        return at if key == HOSTNAME else where_labels[at].get(key)

    for c in hard:
        key = c["topologyKey"]

        def ok(at: str, c: dict = c) -> bool:
            if any(kk not in where_labels[at] for kk in keys):
                return False
            if c.get("nodeAffinityPolicy", "Honor") == "Honor" and not _selector_ok(p, where_labels[at]):
                return False
            return c.get("nodeTaintsPolicy", "Ignore") == "Ignore" or _taints_ok(p, where_taints.get(at, []))

        counts: Counter = Counter()
        for at, there in where_pods.items():
            if ok(at):
                counts[domain(at, key)] += sum(
                    1 for q in there if q["metadata"].get("namespace", "default") == ns
                    and _label_sel_ok(c.get("labelSelector"), q["metadata"].get("labels", {}), own, c.get("matchLabelKeys")))
        mine = domain(loc, key)
        if mine is None:
            errors.append(f"{loc}: pod {k} is on a node without its spread key {key}")
            continue
        low = min(counts.values(), default=0)
        if c.get("minDomains") and len(counts) < c["minDomains"]:
            low = 0
        if counts[mine] - low > c["maxSkew"]:
            errors.append(f"{loc}: pod {k} spread skew {counts[mine] - low} on {key} > maxSkew {c['maxSkew']}")
    return errors


# kubernetes pkg/controller/daemon/util/daemonset_util.go AddOrUpdateDaemonPodTolerations
_DAEMON_TOLERATIONS = [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": e} for k, e in (
    ("not-ready", "NoExecute"), ("unreachable", "NoExecute"), ("disk-pressure", "NoSchedule"),
    ("memory-pressure", "NoSchedule"), ("pid-pressure", "NoSchedule"), ("unschedulable", "NoSchedule"))]


def _daemon_load(objects: list[dict], labels: dict, taints: list[dict],
                 cap: dict[str, Fraction]) -> dict[str, Fraction]:
    """What apps/v1 DaemonSets take on a new node with these labels, taints and allocatable: the template pods the
    DaemonSet controller runs there (no spec.nodeName, selector and affinity match, taints tolerated with the
    controller's defaults), admitted by priority then namespace/name while they fit."""
    runs = []
    for o in objects:
        if o.get("kind") != "DaemonSet" or o.get("apiVersion") != "apps/v1":
            continue
        spec = o["spec"]["template"]["spec"]
        extra = [{"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}] \
            if spec.get("hostNetwork") else []
        tpod = {"spec": {**spec, "tolerations": [*spec.get("tolerations", []), *_DAEMON_TOLERATIONS, *extra]}}
        if not spec.get("nodeName") and _selector_ok(tpod, labels) and _taints_ok(tpod, taints):
            runs.append((-(spec.get("priority") or 0), o["metadata"].get("namespace", "default"), o["metadata"]["name"],
                         requests_of(tpod)))
    load: dict[str, Fraction] = defaultdict(Fraction)
    for *_, req in sorted(runs, key=lambda r: r[:3]):
        if all(load[k] + v <= cap.get(k, 0) for k, v in req.items() if v):
            for k, v in req.items():
                load[k] += v
    return load


def _net(cap: dict[str, Fraction], load: dict[str, Fraction]) -> dict[str, Fraction]:
    return {k: v - load.get(k, 0) for k, v in cap.items()}


def check_plan(objects: list[dict], catalog: list[dict], plan: dict, plan_unadmitted: bool = False) -> list[str]:
    """Every violated rule, as a sentence (empty: the plan is valid)."""
    errors: list[str] = []
    inputs = Inputs(objects, plan_unadmitted)
    pods = {f"{o['metadata'].get('namespace', 'default')}/{o['metadata']['name']}": o
            for o in objects + inputs.extra_pods if o["kind"] == "Pod"}
    nodes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Node"}
    groups = {g["name"]: g for g in catalog}
    # (namespace, gang name) -> (minCount or None for basic, topology keys)
    pgs: dict[tuple[str, str], tuple[int | None, list[str]]] = {}
    for o in objects:
        ns = o.get("metadata", {}).get("namespace", "default")
        spec = o.get("spec", {})
        if o["kind"] == "PodGroup" and o["apiVersion"].startswith("scheduling.k8s.io/"):
            gang = spec["schedulingPolicy"].get("gang")
            keys = [t["key"] for t in spec.get("schedulingConstraints", {}).get("topology", [])]
            pgs[(ns, o["metadata"]["name"])] = (gang["minCount"] if gang else None, keys)
        elif o["kind"] == "PodGroup":
            pgs[(ns, o["metadata"]["name"])] = (spec["minMember"], [])
        elif o["kind"] == "Workload" and o["apiVersion"].startswith("scheduling.k8s.io/"):
            for g in spec["podGroups"]:
                gang = g["policy"].get("gang")
                pgs[(ns, f"{o['metadata']['name']}/{g['name']}")] = (gang["minCount"] if gang else None, [])
    pgs.update({gk: (q, []) for gk, q in inputs.quorum.items()})

    def demand(key: str) -> dict[str, Fraction]:
        """What a pod uses: requests (mapped extended resources as devices) plus the devices it claims."""
        p = pods[key]
        if p["spec"].get("nodeName"):
            return inputs.renamed(requests_of(p), drop=bool(p.get("status", {}).get("extendedResourceClaimStatus")))
        out = inputs.renamed(requests_of(p))
        for k, v in inputs.demand.get(key, {}).items():
            out[k] += v
        return out

    def gang_of(key: str) -> tuple[str, str]:
        if key in inputs.gang_of:
            return inputs.gang_of[key]
        p = pods[key]
        meta, spec = p["metadata"], p["spec"]
        ns = meta.get("namespace", "default")
        if spec.get("schedulingGroup"):
            return ns, spec["schedulingGroup"]["podGroupName"]
        if spec.get("workloadRef"):
            ref = spec["workloadRef"]
            return ns, "/".join(x for x in (ref["name"], ref["podGroup"], ref.get("podGroupReplicaKey")) if x)
        if meta.get("labels", {}).get("scheduling.x-k8s.io/pod-group"):
            return ns, meta["labels"]["scheduling.x-k8s.io/pod-group"]
        for a in ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"):
            if meta.get("annotations", {}).get(a):
                return ns, meta["annotations"][a]
        return ns, meta["name"]

    def group_def(gk: tuple[str, str]) -> tuple[int | None, list[str]] | None:
        if gk in pgs:
            return pgs[gk]
        base = (gk[0], "/".join(gk[1].split("/")[:2]))  # Workload gang with a replica key
        return pgs.get(base)

    # every planned pod exists, is pending and appears once
    seen: Counter[str] = Counter()
    placements: list[tuple[str, dict, list[dict], dict[str, Fraction], list[str]]] = []  # where, labels, taints, cap, pods
    for n in plan["newNodes"]:
        g = groups.get(n["nodeGroup"])
        if g is None:
            errors.append(f"new node in unknown group {n['nodeGroup']}")
            continue
        cap = {k: _amount(k, v) for k, v in g["allocatable"].items()}
        cap = _net(cap, _daemon_load(objects, g.get("labels", {}), g.get("taints", []), cap))
        placements.append((f"new {g['name']}", g.get("labels", {}), g.get("taints", []), cap, n["pods"]))
        if abs(n.get("pricePerHour", g["pricePerHour"]) - g["pricePerHour"]) > 1e-9:
            errors.append(f"new node of {g['name']} priced {n.get('pricePerHour')} instead of {g['pricePerHour']}")
    for name, plist in plan["existingNodes"].items():
        nd = nodes.get(name)
        gname, _, suffix = name.partition("/upcoming-")
        if nd is None and suffix and gname in groups:  # capacity on its way: the group's template
            g = groups[gname]
            # a registered node that is not Ready yet is still on its way (docs/controller.md)
            registered = sum(1 for n in nodes.values() if n["metadata"].get("labels", {}).get(GROUP_LABEL) == gname
                             and any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in (n.get("status") or {}).get("conditions", [])))
            if int(suffix) > g.get("currentSize", 0) - registered:
                errors.append(f"{name}: more upcoming nodes than currentSize - registered Ready nodes")
            cap = {k: _amount(k, v) for k, v in g["allocatable"].items()}
            cap = _net(cap, _daemon_load(objects, g.get("labels", {}), g.get("taints", []), cap))
            placements.append((f"upcoming {name}", g.get("labels", {}), g.get("taints", []), cap, plist))
            continue
        if nd is None:
            errors.append(f"existing node {name} is not in the cluster")
            continue
        if nd["spec"].get("unschedulable") or not any(
                c["type"] == "Ready" and c["status"] == "True" for c in nd["status"].get("conditions", [])):
            errors.append(f"pods planned onto node {name}, which is not Ready or is unschedulable")
        cap = inputs.renamed({k: _amount(k, v) for k, v in nd["status"]["allocatable"].items()})
        for k, n in inputs.node_devices.get(name, {}).items():
            cap[k] += n
        for pk, p in pods.items():
            if p["spec"].get("nodeName") == name and p["status"].get("phase") not in ("Succeeded", "Failed"):
                for k, v in demand(pk).items():
                    cap[k] = cap.get(k, Fraction(0)) - v
        placements.append((f"node {name}", nd["metadata"].get("labels", {}), nd["spec"].get("taints", []), cap, plist))

    domains: dict[tuple[str, str], set] = defaultdict(set)
    placed_per_gang: Counter[tuple[str, str]] = Counter()
    for where, labels, taints, cap, plist in placements:
        load: dict[str, Fraction] = defaultdict(Fraction)
        for key in plist:
            seen[key] += 1
            p = pods.get(key)
            if p is None:
                errors.append(f"{where}: unknown pod {key}")
                continue
            if p["spec"].get("nodeName") or p["status"].get("phase") != "Pending":
                errors.append(f"{where}: pod {key} is not pending")
            if any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or []):
                errors.append(f"{where}: pod {key} is a DaemonSet's: its controller places it, not the plan")
            if not _selector_ok(p, labels):
                errors.append(f"{where}: pod {key} selector/affinity does not match")
            if not _taints_ok(p, taints):
                errors.append(f"{where}: pod {key} does not tolerate the taints")
            if key in inputs.unplannable:
                errors.append(f"{where}: pod {key} placed although {inputs.unplannable[key]}")
            for k, v in demand(key).items():
                load[k] += v
            gk = gang_of(key)
            placed_per_gang[gk] += 1
            d = group_def(gk)
            for key_ in d[1] if d else []:
                domains[(gk[0], gk[1] + "#" + key_)].add(labels.get(key_))
        for k, v in load.items():
            if v > cap.get(k, 0):
                errors.append(f"{where}: {k} overcommitted ({v} > {cap.get(k, 0)})")
    errors += _pod_rule_errors(pods, nodes, placements)
    for key, n in seen.items():
        if n > 1:
            errors.append(f"pod {key} placed {n} times")
    for k, vals in domains.items():
        if len(vals) != 1 or None in vals:
            errors.append(f"gang {k}: spread over topology domains {vals}")

    # no partial gang; gang counts agree with the node listing
    bound: Counter[tuple[str, str]] = Counter()
    for key, p in pods.items():
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed"):
            bound[gang_of(key)] += 1
    for g in plan["gangs"]:
        gk = (g["namespace"], g["name"])
        if g["placed"] != placed_per_gang.get(gk, 0):
            errors.append(f"gang {gk}: reports {g['placed']} placed, nodes carry {placed_per_gang.get(gk, 0)}")
        d = group_def(gk)
        if d and d[0] is not None:
            need = d[0]
            if 0 < placed_per_gang[gk] and placed_per_gang[gk] + bound[gk] < need:
                errors.append(f"gang {gk}: partial: {placed_per_gang[gk]} placed + {bound[gk]} bound < minCount {need}")
        if g["placed"] and g["decision"] not in ("scale-up", "fits-existing"):
            errors.append(f"gang {gk}: placed pods but decision {g['decision']}")
        if not g["placed"] and g["decision"] in ("scale-up", "fits-existing"):
            errors.append(f"gang {gk}: nothing placed but decision {g['decision']}")

    # scaleUp matches the listed nodes and the limits; cost recomputes
    per_group = Counter(n["nodeGroup"] for n in plan["newNodes"])
    if dict(per_group) != plan["scaleUp"]:
        errors.append(f"scaleUp {plan['scaleUp']} != nodes listed {dict(per_group)}")
    for name, cnt in per_group.items():
        g = groups.get(name)
        if g and cnt > g["maxSize"] - g.get("currentSize", 0):
            errors.append(f"group {name}: +{cnt} exceeds maxSize {g['maxSize']} - currentSize {g.get('currentSize', 0)}")
    cost = sum(groups[n["nodeGroup"]]["pricePerHour"] for n in plan["newNodes"] if n["nodeGroup"] in groups)
    if abs(cost - plan["costPerHour"]) > 1e-6 * max(1.0, cost):
        errors.append(f"costPerHour {plan['costPerHour']} != recomputed {cost}")
    if plan["lowerBoundPerHour"] > plan["costPerHour"] + 1e-6:
        errors.append(f"lower bound {plan['lowerBoundPerHour']} above cost {plan['costPerHour']}")
    if any(not n["pods"] for n in plan["newNodes"]):
        errors.append("a new node carries no pod")
    return errors


# ---------------------------------------------------------------- DRA claims, Kueue Workloads, YuniKorn task groups
#
# Re-derived from the upstream objects, not from gangscale's ingest: kubernetes/kubernetes
# staging/src/k8s.io/api/resource/v1/types.go (and scheduling/v1alpha2 PodGroupResourceClaim), kubernetes-sigs/kueue apis/kueue/v1beta1/workload_types.go,
# apache/yunikorn-k8shim pkg/cache/placeholder.go. Pod names of members that do not exist yet (an
# unadmitted Workload's templates, a task group's missing members) are the plan's interface.

DEVICE_PREFIX = "dra.gangscale.io/"
IMPLICIT_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
YK_TASK_GROUP, YK_TASK_GROUPS = "yunikorn.apache.org/task-group-name", "yunikorn.apache.org/task-groups"
YK_APP_KEYS = ("applicationId", "yunikorn.apache.org/app-id", "spark-app-selector")


def _pkey(o: dict) -> str:
    return f"{o['metadata'].get('namespace', 'default')}/{o['metadata']['name']}"


def _api(o: dict) -> str:
    """The apiVersion; ingest reads a pod whatever its apiVersion says, so the checker must too."""
    return o["apiVersion"] if isinstance(o.get("apiVersion"), str) else ""


def _class_selector(expressions: list[str]):
    """A DeviceClass's selectors as a predicate on (driver, device attributes): `&&` of equality tests on
    `device.driver` and `device.attributes['<domain>'].<name>`; anything else selects nothing."""
    tests = []
    for text in expressions:
        for part in text.split("&&"):
            part = part.strip().lstrip("(").rstrip(")").strip()
            lhs, sep, rhs = part.partition("==")
            lhs, rhs = lhs.strip(), rhs.strip()
            if not sep:
                return lambda _driver, _attrs: False
            value = rhs[1:-1] if rhs[:1] in "'\"" else {"true": True, "false": False}.get(rhs, rhs)
            if isinstance(value, str) and rhs[:1] not in "'\"":
                if not rhs.lstrip("-").isdigit():
                    return lambda _driver, _attrs: False
                value = int(rhs)
            m = re.fullmatch(r"""device\.attributes\[["']([^"']+)["']\]\.(\w+)""", lhs)
            if lhs == "device.driver":
                tests.append((None, None, value))
            elif m:
                tests.append((m.group(1), m.group(2), value))
            else:
                return lambda _driver, _attrs: False

    def select(driver: str, attrs: dict) -> bool:
        for domain, name, value in tests:
            if domain is None:
                ok = driver == value
            else:
                raw = attrs.get(f"{domain}/{name}") or (attrs.get(name) if domain == driver else None) or {}
                ok = len(raw) == 1 and list(raw.values())[0] == value and type(list(raw.values())[0]) is type(value)
            if not ok:
                return False
        return True
    return select


def _true_condition(status: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


class Inputs:
    """Members, quorums, device demand and node devices from DRA, Kueue and YuniKorn objects."""

    def __init__(self, objects: list[dict], plan_unadmitted: bool) -> None:
        self.extra_pods: list[dict] = []  # members that do not exist yet, as pods
        self.gang_of: dict[str, tuple[str, str]] = {}  # pod key -> (namespace, gang name)
        self.quorum: dict[tuple[str, str], int] = {}
        self.unplannable: dict[str, str] = {}  # pod key -> why it must not be placed
        self.aliases: dict[str, str] = {}  # extended resource -> device resource (KEP-5004)
        self.node_devices: dict[str, Counter] = defaultdict(Counter)
        self.demand: dict[str, Counter] = defaultdict(Counter)  # pod key -> devices it claims
        self._kueue(objects, plan_unadmitted)
        self._yunikorn(objects + self.extra_pods)
        self._dra(objects + self.extra_pods)

    # Kueue: one gang per Workload; its pods by pod-group label or owning Job; templates while not admitted
    def _kueue(self, objects: list[dict], plan_unadmitted: bool) -> None:
        jobs: dict[tuple[str, str], str] = {}
        for o in objects:
            if o["kind"] != "Workload" or not _api(o).startswith("kueue.x-k8s.io/"):
                continue
            ns, name, spec, status = o["metadata"].get("namespace", "default"), o["metadata"]["name"], o["spec"], o.get("status", {})
            if _true_condition(status, "Finished") or spec.get("active") is False:
                continue
            sets = spec["podSets"]
            self.quorum[(ns, name)] = max(1, sum(s.get("count", 1) if s.get("minCount") is None else s["minCount"]
                                                 for s in sets))
            owners = o["metadata"].get("ownerReferences") or []
            jobs.update({(ns, r["name"]): name for r in owners if r.get("kind") == "Job"})
            admitted = bool(status.get("admission")) or _true_condition(status, "Admitted")
            if admitted or any(r.get("kind") == "Pod" for r in owners):
                continue
            for s in sets:
                for j in range(s.get("count", 1)):
                    meta = {**s["template"].get("metadata", {}), "name": f"{name}-{s['name']}-{j}", "namespace": ns}
                    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": s["template"]["spec"],
                           "status": {"phase": "Pending"}}
                    self.extra_pods.append(pod)
                    self.gang_of[_pkey(pod)] = (ns, name)
                    if not plan_unadmitted:
                        self.unplannable[_pkey(pod)] = f"Workload {ns}/{name} is not admitted by Kueue"
        workloads = {(ns, n) for ns, n in self.quorum}
        for o in objects:
            if o["kind"] != "Pod":
                continue
            ns, labels = o["metadata"].get("namespace", "default"), o["metadata"].get("labels", {})
            wl = labels.get("kueue.x-k8s.io/pod-group-name")
            wl = wl if (ns, wl) in workloads else next(
                (jobs[(ns, labels[k])] for k in ("batch.kubernetes.io/job-name", "job-name") if (ns, labels.get(k)) in jobs), None)
            if wl:
                self.gang_of[_pkey(o)] = (ns, wl)
            gates = [g.get("name") for g in o["spec"].get("schedulingGates") or []]
            if KUEUE_ADMISSION_GATE in gates and not plan_unadmitted:
                self.unplannable[_pkey(o)] = f"gated by {KUEUE_ADMISSION_GATE}"

    # YuniKorn: one gang per application; minMember per task group, missing members planned as placeholders
    def _yunikorn(self, objects: list[dict]) -> None:
        apps: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for o in objects:
            meta = o["metadata"] if o["kind"] == "Pod" else {}
            ann, labels = meta.get("annotations", {}), meta.get("labels", {})
            if YK_TASK_GROUP not in ann or _pkey(o) in self.gang_of:
                continue
            app = next((labels.get(k) or ann.get(k) for k in YK_APP_KEYS if labels.get(k) or ann.get(k)), None)
            if app:
                apps[(meta.get("namespace", "default"), app)].append(o)
        for (ns, app), members in apps.items():
            for m in members:
                self.gang_of[_pkey(m)] = (ns, app)
            text = next((m["metadata"]["annotations"][YK_TASK_GROUPS] for m in members
                         if YK_TASK_GROUPS in m["metadata"]["annotations"]), None)
            if text is None:
                continue
            groups = json.loads(text)
            self.quorum[(ns, app)] = sum(int(g["minMember"]) for g in groups)
            for g in groups:
                mine = [m for m in members if m["metadata"]["annotations"][YK_TASK_GROUP] == g["name"]]
                self._task_group(ns, app, g, mine)

    def _task_group(self, ns: str, app: str, g: dict, mine: list[dict]) -> None:
        def placeholder(m: dict) -> bool:
            meta = m["metadata"]
            flag = meta.get("annotations", {}).get("yunikorn.apache.org/placeholder") or meta.get("labels", {}).get("placeholder")
            return str(flag or "").lower() == "true"
        live_ph = sum(1 for m in mine if placeholder(m) and m["status"].get("phase") not in ("Succeeded", "Failed"))
        waiting_real = [m for m in mine if not m["spec"].get("nodeName") and m["status"].get("phase") == "Pending"
                        and not placeholder(m)][:live_ph]
        for m in waiting_real:  # takes a placeholder's slot (bound, or pending and planned): never new capacity
            self.unplannable[_pkey(m)] = "it replaces a YuniKorn placeholder"
        live = sum(1 for m in mine if m["status"].get("phase") not in ("Succeeded", "Failed")) - len(waiting_real)
        for j in range(max(0, int(g["minMember"]) - live)):
            spec = {"containers": [{"name": "placeholder", "resources": {"requests": dict(g["minResource"])}}]}
            spec.update({f: g[f] for f in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints")
                         if g.get(f) is not None})
            pod = {"kind": "Pod", "apiVersion": "v1", "spec": spec, "status": {"phase": "Pending"},
                   "metadata": {"name": f"tg-{app}-{g['name']}-planned-{j}", "namespace": ns,
                                "annotations": {YK_TASK_GROUP: g["name"]}}}
            self.extra_pods.append(pod)
            self.gang_of[_pkey(pod)] = (ns, app)

    # DRA: per-class device counts of claims; devices of existing nodes from ResourceSlices
    def _dra(self, objects: list[dict]) -> None:
        dra = [o for o in objects if _api(o).startswith("resource.k8s.io/")]
        drivers: dict[str, str] = {}
        selects: dict = {}  # class -> (driver, attributes) -> whether its CEL selectors take the device
        allocated: set[tuple[str, str, str]] = set()
        for o in dra:
            if o["kind"] == "DeviceClass":
                name = o["metadata"]["name"]
                selects[name] = _class_selector([sel.get("cel", {}).get("expression", "")
                                                 for sel in o["spec"].get("selectors") or []])
                for sel in o["spec"].get("selectors") or []:
                    m = re.search(r"""device\.driver\s*==\s*["']([^"']+)["']""", sel.get("cel", {}).get("expression", ""))
                    if m:
                        drivers[name] = m.group(1)
                if o["spec"].get("extendedResourceName"):
                    self.aliases[o["spec"]["extendedResourceName"]] = DEVICE_PREFIX + name
                self.aliases[IMPLICIT_CLASS_PREFIX + name] = DEVICE_PREFIX + name
            for r in (o.get("status", {}).get("allocation", {}).get("devices", {}).get("results") or []):
                allocated.add((r["driver"], r["pool"], r["device"]))
        claims = {(o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o for o in dra
                  if o["kind"] == "ResourceClaim"}
        templates = {(o["metadata"].get("namespace", "default"), o["metadata"]["name"]): o for o in dra
                     if o["kind"] == "ResourceClaimTemplate"}
        # PodGroup spec.resourceClaims (DRAWorkloadResourceClaims): a pod repeating a template entry of its
        # PodGroup shares the group's one claim (named in the PodGroup's status once generated)
        group_claims = {(o["metadata"].get("namespace", "default"), o["metadata"]["name"]): {
            (r.get("name"), r.get("resourceClaimTemplateName")): next(
                (s.get("resourceClaimName") for s in o.get("status", {}).get("resourceClaimStatuses") or []
                 if s.get("name") == r.get("name")), None)
            for r in o["spec"].get("resourceClaims") or [] if r.get("resourceClaimTemplateName")}
            for o in objects if o["kind"] == "PodGroup" and _api(o).startswith("scheduling.k8s.io/")}
        counted: set = set()
        for p in objects:
            if p["kind"] != "Pod" or p["spec"].get("nodeName"):
                continue
            ns = p["metadata"].get("namespace", "default")
            made = {s.get("name"): s.get("resourceClaimName") for s in p.get("status", {}).get("resourceClaimStatuses") or []}
            pg = (ns, (p["spec"].get("schedulingGroup") or {}).get("podGroupName"))
            for ref in p["spec"].get("resourceClaims") or []:
                entry = (ref.get("name"), ref.get("resourceClaimTemplateName"))
                if entry[1] and entry in group_claims.get(pg, {}):
                    if (pg, entry) in counted:
                        continue
                    counted.add((pg, entry))
                    made = {**made, entry[0]: group_claims[pg][entry] or made.get(entry[0])}
                if ref.get("resourceClaimName"):
                    key = (ns, ref["resourceClaimName"])
                    if key in counted:
                        continue
                    counted.add(key)
                    spec, status = (claims[key]["spec"], claims[key].get("status", {})) if key in claims else (None, {})
                else:
                    gen = claims.get((ns, made.get(ref.get("name"))))
                    if gen is not None and gen.get("status", {}).get("allocation"):
                        continue
                    key = (ns, ref.get("resourceClaimTemplateName"))
                    spec, status = (templates[key]["spec"]["spec"], {}) if key in templates else (None, {})
                if status.get("allocation"):
                    continue
                why = self._claim_demand(spec, self.demand[_pkey(p)])
                if why:
                    self.unplannable[_pkey(p)] = f"claim {key[1]}: {why}"
        newest: dict[tuple[str, str], int] = {}
        slices = [o["spec"] for o in dra if o["kind"] == "ResourceSlice"]
        for s in slices:
            pool = (s["driver"], s["pool"]["name"])
            newest[pool] = max(newest.get(pool, 0), s["pool"].get("generation", 0))
        for s in slices:
            if s["pool"].get("generation", 0) != newest[(s["driver"], s["pool"]["name"])]:
                continue
            classes = sorted(c for c, d in drivers.items() if d == s["driver"]) or [s["driver"]]
            for d in s.get("devices") or []:
                node = d.get("nodeName") or s.get("nodeName")
                attrs = d.get("basic", d).get("attributes") or {}
                if node and not d.get("consumesCounters") and not d.get("basic", d).get("taints") \
                        and (s["driver"], s["pool"]["name"], d["name"]) not in allocated:
                    for c in classes:
                        if selects.get(c, lambda _driver, _attrs: True)(s["driver"], attrs):
                            self.node_devices[node][DEVICE_PREFIX + c] += 1

    @staticmethod
    def _claim_demand(spec: dict | None, into: Counter) -> str | None:
        """Add a claim's ExactCount devices to `into`, or say why the planner cannot count them."""
        if spec is None:
            return "not listed"
        for req in spec.get("devices", {}).get("requests") or []:
            if req.get("firstAvailable"):
                return "firstAvailable"
            body = req.get("exactly", req)  # v1beta1 carries the fields inline
            for unsupported in ("selectors", "capacity"):
                if body.get(unsupported):
                    return unsupported
            if body.get("adminAccess") is True or (body.get("allocationMode") or "ExactCount") != "ExactCount":
                return "adminAccess or allocationMode"
            into[DEVICE_PREFIX + body["deviceClassName"]] += body.get("count") or 1
        return None

    def renamed(self, amounts: dict[str, Fraction], drop: bool = False) -> dict[str, Fraction]:
        """KEP-5004: an extended resource a DeviceClass maps is that class's devices (dropped: already allocated)."""
        out: dict[str, Fraction] = defaultdict(Fraction)
        for k, v in amounts.items():
            if k in self.aliases:
                if not drop:
                    out[self.aliases[k]] += v
            else:
                out[k] += v
        return out
