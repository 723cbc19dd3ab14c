"""DRA ResourceClaims: device demand planned like an extended resource, never silently device-free."""

from __future__ import annotations

import copy

import pytest

from gangscale.ingest import ingest
from gangscale.ingest_dra import device_resource
from tests.builders import gang, group, node, plan_for, pod, podgroup

GPU = "gpu.nvidia.com"
DEV = device_resource(GPU)


def template(name: str, count: int = 1, ns: str = "default", **exactly) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "r", "exactly": {"deviceClassName": GPU, "allocationMode": "ExactCount", "count": count, **exactly}}]}}}}


def claim(name: str, count: int = 1, ns: str = "default", allocated: list[str] | None = None) -> dict:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
           "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": GPU, "count": count}}]}}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "r", "driver": GPU, "pool": p, "device": d} for p, d in (a.split("/") for a in allocated)]}}}
    return obj


def dra_pod(name: str, *, tmpl: str | None = None, shared: str | None = None, **kw) -> dict:
    refs = []
    if tmpl:
        refs.append({"name": "t", "resourceClaimTemplateName": tmpl})
    if shared:
        refs.append({"name": "s", "resourceClaimName": shared})
    return pod(name, resourceClaims=refs, **kw)


def gpu_group(name: str, devices: int, price: float, **kw) -> dict:
    g = group(name, cpu="16", mem="64Gi", price=price, **kw)
    g["devices"] = {GPU: devices}
    return g


def slice_(node_name: str, n: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpu"},
            "spec": {"driver": GPU, "nodeName": node_name, "pool": {"name": node_name, "generation": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(n)]}}


def test_the_device_demand_alone_decides_the_node_group_and_the_plan_is_optimal():
    # 4 pods x 2 GPUs = 8 devices: 2 x gpu4 ($20) beats 1 x gpu8 ($25); the cheap CPU group has no devices.
    objs = [podgroup("train", min_count=4), template("two-gpus", 2)]
    objs += [dra_pod(f"w{i}", tmpl="two-gpus", group="train", cpu="1") for i in range(4)]
    plan = plan_for(objs, [group("cpu", cpu="64", mem="256Gi", price=1.0), gpu_group("gpu4", 4, 10.0),
                           gpu_group("gpu8", 8, 25.0)])
    assert gang(plan, "train").decision == "scale-up"
    assert plan.scale_up == {"gpu4": 2}
    assert plan.cost_per_hour == pytest.approx(20.0)
    assert plan.solver.status == "OPTIMAL"


def test_a_claim_shared_by_two_pods_counts_once():
    objs = [podgroup("pair", min_count=2), claim("four", 4)]
    objs += [dra_pod(f"p{i}", shared="four", group="pair") for i in range(2)]
    plan = plan_for(objs, [gpu_group("gpu4", 4, 10.0)])
    assert plan.scale_up == {"gpu4": 1}


@pytest.mark.parametrize("exactly, field", [
    ({"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].memory > 40"}}]}, "exactly.selectors"),
    ({"allocationMode": "All"}, "exactly.allocationMode All"),
    ({"adminAccess": True}, "exactly.adminAccess"),
    ({"capacity": {"requests": {"memory": "10Gi"}}}, "exactly.capacity"),
])
def test_an_unsupported_claim_feature_makes_the_gang_invalid_and_the_rest_is_planned(exactly, field):
    objs = [template("odd", **exactly), dra_pod("odd-0", tmpl="odd"), pod("plain", cpu="2")]
    plan = plan_for(objs, [group("cpu", price=1.0)])
    bad = gang(plan, "odd-0")
    assert bad.decision == "invalid"
    assert "ResourceClaimTemplate default/odd" in bad.reason and field in bad.reason
    assert gang(plan, "plain").decision == "scale-up"


def test_a_prioritized_list_request_is_refused_by_name():
    t = template("alt")
    t["spec"]["spec"]["devices"]["requests"] = [{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": GPU}]}]
    cluster = ingest([t, dra_pod("a", tmpl="alt")])
    assert "firstAvailable" in cluster.gangs[0].invalid


def test_a_claim_that_was_not_listed_is_invalid_not_device_free():
    plan = plan_for([dra_pod("lost", shared="nowhere")], [group("cpu", price=1.0)])
    g = gang(plan, "lost")
    assert g.decision == "invalid"
    assert "ResourceClaim default/nowhere was not listed" in g.reason and "spec.resourceClaims[0]" in g.reason


def test_v1beta1_requests_with_inline_fields_are_read():
    t = template("old", 3)
    t["apiVersion"] = "resource.k8s.io/v1beta1"
    t["spec"]["spec"]["devices"]["requests"] = [{"name": "r", "deviceClassName": GPU, "count": 3}]
    cluster = ingest([t, dra_pod("a", tmpl="old")])
    assert cluster.gangs[0].pending[0].requests[DEV] == 3


def test_existing_nodes_offer_their_unallocated_slice_devices():
    # gpu-0 publishes 4 devices, one allocated to a running claim: 3 free.
    base = [node("gpu-0", cpu="16", mem="64Gi"), slice_("gpu-0", 4), claim("busy", 1, allocated=["gpu-0/gpu-0"])]
    fits = plan_for(base + [template("three", 3), dra_pod("a", tmpl="three")], [gpu_group("gpu4", 4, 10.0)])
    assert gang(fits, "a").decision == "fits-existing" and fits.scale_up == {}
    more = plan_for(base + [template("four", 4), dra_pod("a", tmpl="four")], [gpu_group("gpu4", 4, 10.0)])
    assert more.scale_up == {"gpu4": 1}


def test_a_bound_pods_allocated_claim_is_not_counted_again():
    objs = [node("gpu-0", cpu="16", mem="64Gi"), slice_("gpu-0", 2), claim("mine", 1, allocated=["gpu-0/gpu-1"]),
            dra_pod("running", shared="mine", node="gpu-0")]
    cluster = ingest(objs)
    assert cluster.nodes[0].allocatable[DEV] == 1
    assert DEV not in cluster.bound[0].requests


def mapping_class(ext: str = "nvidia.com/gpu") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU}'"}}], "extendedResourceName": ext}}


def test_an_extended_resource_served_by_dra_counts_once_with_claims():
    # 4 pods ask nvidia.com/gpu: 1 (KEP-5004 maps it to gpu.nvidia.com), 4 pods claim one device each:
    # 8 GPUs, so two 4-GPU nodes; counted in two dimensions they would share one node.
    objs = [mapping_class(), template("one"), podgroup("mix", min_count=8)]
    objs += [pod(f"x{i}", gpu=1, group="mix", tolerations=[]) for i in range(4)]
    objs += [dra_pod(f"d{i}", tmpl="one", group="mix") for i in range(4)]
    g = gpu_group("gpu4", 4, 10.0)
    plan = plan_for(objs, [g])
    assert plan.scale_up == {"gpu4": 2}


def test_an_extended_resource_request_fits_a_node_that_publishes_the_devices_in_slices():
    objs = [mapping_class(), node("gpu-0", cpu="16", mem="64Gi"), slice_("gpu-0", 4),
            podgroup("x", min_count=2)] + [pod(f"x{i}", gpu=2, group="x", tolerations=[]) for i in range(2)]
    plan = plan_for(objs, [gpu_group("gpu4", 4, 10.0)])
    assert gang(plan, "x").decision == "fits-existing"


def test_catalog_gpu_types_offer_dra_devices_only_when_asked_and_then_not_as_device_plugin_gpus():
    from gangscale.catalog import parse_catalog

    groups, warnings = parse_catalog([{"name": "p5", "instanceType": "p5.48xlarge", "maxSize": 1},
                                      {"name": "dra", "instanceType": "p5.48xlarge", "maxSize": 1,
                                       "devices": {GPU: "auto"}},
                                      {"name": "six", "instanceType": "p5.48xlarge", "maxSize": 1, "devices": {GPU: 6}}])
    assert not warnings
    plugin, dra, six = (g.allocatable for g in groups)
    assert plugin["nvidia.com/gpu"] == 8 and DEV not in plugin
    assert dra[DEV] == 8 and "nvidia.com/gpu" not in dra
    assert six[DEV] == 6 and "nvidia.com/gpu" not in six


def test_a_catalog_entry_offering_the_same_gpus_twice_is_skipped_with_the_fields_named():
    from gangscale.catalog import parse_catalog

    both = group("both", gpu=8)
    both["devices"] = {GPU: 8}
    unknown = {"name": "odd", "instanceType": "x9.huge", "pricePerHour": 1.0, "maxSize": 1,
               "allocatable": {"cpu": "4", "memory": "8Gi"}, "devices": {GPU: "auto"}}
    groups, warnings = parse_catalog([both, unknown, group("ok")])
    assert [g.name for g in groups] == ["ok"]
    assert "devices.gpu.nvidia.com and allocatable.nvidia.com/gpu" in warnings[0]
    assert "devices.gpu.nvidia.com: auto" in warnings[1]


def test_a_default_gpu_group_is_not_packed_with_a_device_plugin_pod_and_a_dra_pod_on_the_same_gpus():
    # One p5 has 8 physical GPUs. A pod asking nvidia.com/gpu: 8 and a DRA pod claiming 8 devices need two
    # nodes; when the table gave the group both 8 nvidia.com/gpu and 8 DRA devices, one node took both.
    objs = [podgroup("mix", min_count=2), template("eight", 8),
            pod("plugin", gpu=8, cpu="1", group="mix", tolerations=[]),
            dra_pod("dra", tmpl="eight", group="mix", cpu="1")]
    plan = plan_for(objs, [{"name": "p5", "instanceType": "p5.48xlarge", "maxSize": 4},
                           {"name": "p5-dra", "instanceType": "p5.48xlarge", "maxSize": 4, "devices": {GPU: "auto"}}])
    assert gang(plan, "mix").decision == "scale-up"
    assert plan.scale_up == {"p5": 1, "p5-dra": 1}


def test_partitionable_devices_are_not_counted_and_say_so():
    s = slice_("gpu-0", 2)
    s["spec"]["devices"][1]["consumesCounters"] = [{"counterSet": "c", "counters": {"memory": {"value": "10Gi"}}}]
    cluster = ingest([node("gpu-0"), copy.deepcopy(s)])
    assert cluster.nodes[0].allocatable[DEV] == 1
    assert any("consumesCounters" in w for w in cluster.warnings)


# ---------------------------------------------------------------- PodGroup spec.resourceClaims (1.36+)


def podgroup_with_claims(name: str, min_count: int, claims: list[dict], version: str = "v1alpha2",
                         made: dict[str, str] | None = None) -> dict:
    pg = podgroup(name, min_count=min_count, version=version)
    pg["spec"]["resourceClaims"] = claims
    if made:
        pg["status"] = {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in made.items()]}
    return pg


def group_pods(n: int, group_name: str, ref: dict) -> list[dict]:
    return [pod(f"{group_name}-{i}", group=group_name, cpu="1", resourceClaims=[dict(ref)]) for i in range(n)]


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1"])
def test_a_podgroup_claim_from_a_template_is_one_claim_for_the_whole_gang(version):
    # DRAWorkloadResourceClaims: the PodGroup's template entry makes ONE claim of 4 GPUs that its 4 pods share.
    # Counted per pod it was 16 GPUs: four 4-GPU nodes instead of one.
    ref = {"name": "gpus", "resourceClaimTemplateName": "four"}
    objs = [podgroup_with_claims("train", 4, [ref], version), template("four", 4), *group_pods(4, "train", ref)]
    cluster = ingest(objs)
    assert sum(p.requests.get(DEV, 0) for p in cluster.gangs[0].pending) == 4
    plan = plan_for(objs, [gpu_group("gpu4", 4, 10.0), gpu_group("gpu8", 8, 25.0)])
    assert gang(plan, "train").decision == "scale-up"
    assert plan.scale_up == {"gpu4": 1}
    assert plan.cost_per_hour == pytest.approx(10.0)


def test_a_pod_claim_that_differs_from_its_podgroups_entry_is_the_pods_own():
    # Same template, another claim name: not the PodGroup's claim, so each pod gets its own 4 GPUs.
    objs = [podgroup_with_claims("train", 2, [{"name": "gpus", "resourceClaimTemplateName": "four"}]),
            template("four", 4), *group_pods(2, "train", {"name": "mine", "resourceClaimTemplateName": "four"})]
    cluster = ingest(objs)
    assert sorted(p.requests.get(DEV, 0) for p in cluster.gangs[0].pending) == [4, 4]


def test_a_podgroup_claim_that_is_already_allocated_adds_no_devices():
    ref = {"name": "gpus", "resourceClaimTemplateName": "four"}
    objs = [podgroup_with_claims("train", 2, [ref], made={"gpus": "train-gpus-x7k2"}), template("four", 4),
            claim("train-gpus-x7k2", 4, allocated=["gpu-0/gpu-0"]), *group_pods(2, "train", ref)]
    cluster = ingest(objs)
    assert [p.requests.get(DEV, 0) for p in cluster.gangs[0].pending] == [0, 0]


def test_a_podgroup_with_a_malformed_claim_entry_is_invalid_naming_the_field_and_the_rest_is_planned():
    bad = podgroup_with_claims("train", 2, [{"name": "gpus"}])  # neither a claim nor a template
    objs = [bad, template("four", 4), *group_pods(2, "train", {"name": "gpus", "resourceClaimTemplateName": "four"}),
            pod("plain", cpu="2")]
    plan = plan_for(objs, [group("cpu", price=1.0), gpu_group("gpu4", 4, 10.0)])
    g = gang(plan, "train")
    assert g.decision == "invalid"
    assert "PodGroup default/train: spec.resourceClaims[0]" in g.reason and "resourceClaimTemplateName" in g.reason
    assert gang(plan, "plain").decision == "scale-up"


# ---------------------------------------------------------------- fields the planner does not know


def v1beta1_template(name: str, **fields) -> dict:
    t = template(name)
    t["apiVersion"] = "resource.k8s.io/v1beta1"
    t["spec"]["spec"]["devices"]["requests"] = [{"name": "r", "deviceClassName": GPU, "count": 1, **fields}]
    return t


@pytest.mark.parametrize("make, field", [
    (lambda: template("odd", derivedAttributes=[{"name": "x"}]), "spec.spec.devices.requests[0].exactly.derivedAttributes"),
    (lambda: template("odd", sharesWith="train"), "spec.spec.devices.requests[0].exactly.sharesWith"),
    (lambda: v1beta1_template("odd", sharesWith="train"), "spec.spec.devices.requests[0].sharesWith"),
])
def test_an_unknown_request_field_makes_the_gang_invalid_naming_it_and_the_rest_is_planned(make, field):
    # A field of a newer API may change which devices, or how many, a claim takes: never planned as if absent.
    plan = plan_for([make(), dra_pod("odd-0", tmpl="odd"), pod("plain", cpu="2")], [group("cpu", price=1.0)])
    bad = gang(plan, "odd-0")
    assert bad.decision == "invalid"
    assert "ResourceClaimTemplate default/odd" in bad.reason and f"{field}: a field the planner does not know" in bad.reason
    assert gang(plan, "plain").decision == "scale-up"


def test_unknown_fields_beside_the_request_and_the_claims_devices_are_refused_too():
    beside = template("beside")
    beside["spec"]["spec"]["devices"]["requests"][0]["priority"] = 3
    on_claim = claim("on-claim")
    on_claim["spec"]["devices"]["reservations"] = [{"node": "n"}]
    cluster = ingest([beside, on_claim, dra_pod("a", tmpl="beside"), dra_pod("b", shared="on-claim")])
    reasons = {g.name: g.invalid for g in cluster.gangs}
    assert "spec.spec.devices.requests[0].priority: a field the planner does not know" in reasons["a"]
    assert "ResourceClaim default/on-claim: spec.devices.reservations: a field" in reasons["b"]


def test_request_tolerations_and_driver_config_are_read_and_planned_by_count():
    t = template("tol", 2, tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}])
    t["spec"]["spec"]["devices"]["config"] = [{"requests": ["r"], "opaque": {"driver": GPU, "parameters": {}}}]
    cluster = ingest([t, dra_pod("a", tmpl="tol")])
    assert (cluster.gangs[0].invalid, cluster.gangs[0].pending[0].requests[DEV]) == (None, 2)


@pytest.mark.parametrize("constraint", ["matchAttribute", "distinctAttribute"])
def test_claim_constraints_are_planned_by_count_with_a_warning_naming_the_claim_and_the_constraint(constraint):
    t = template("pair", 2)
    t["spec"]["spec"]["devices"]["constraints"] = [{"requests": ["r"], constraint: "gpu.nvidia.com/productName"}]
    plan = plan_for([t, dra_pod("a", tmpl="pair")], [gpu_group("gpu4", 4, 10.0)])
    assert gang(plan, "a").decision == "scale-up" and plan.scale_up == {"gpu4": 1}
    assert any("ResourceClaimTemplate default/pair" in w and f"constraints ({constraint}) is not modelled" in w
               for w in plan.warnings), plan.warnings


def test_tainted_and_network_attached_slice_devices_are_not_counted_and_say_so():
    s = slice_("gpu-0", 4)
    s["spec"]["devices"][0]["taints"] = [{"key": "health", "value": "bad", "effect": "NoSchedule"}]
    per_device = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "fabric"},
                  "spec": {"driver": GPU, "pool": {"name": "fabric", "generation": 1}, "perDeviceNodeSelection": True,
                           "devices": [{"name": "g0", "nodeName": "gpu-0"}, {"name": "g1", "allNodes": True}]}}
    cluster = ingest([node("gpu-0"), s, per_device])
    assert cluster.nodes[0].allocatable[DEV] == 4  # 3 untainted + g0
    assert any("spec.devices[0].taints" in w and "gpu-0-gpu" in w for w in cluster.warnings)
    assert any("ResourceSlice fabric: spec.devices[1]" in w and "not counted" in w for w in cluster.warnings)


# ---------------------------------------------------------------- DeviceClass selectors on existing nodes


def device_class(name: str, expression: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def typed_slice(node_name: str, types: list[str]) -> dict:
    s = slice_(node_name, len(types))
    for d, t in zip(s["spec"]["devices"], types):
        d["attributes"] = {"type": {"string": t}, "gpu.nvidia.com/index": {"int": int(d["name"][4:])}}
    return s


def test_two_classes_of_one_driver_split_its_devices_by_their_attributes():
    # NVIDIA's driver publishes full GPUs and MIG slices; its classes select them by the `type` attribute.
    # Read by the driver test alone, both classes got all 4 devices: each device counted twice.
    objs = [node("gpu-0", cpu="16", mem="64Gi"), typed_slice("gpu-0", ["gpu", "gpu", "gpu", "mig"]),
            device_class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && "
                                           "device.attributes['gpu.nvidia.com'].type == 'gpu'"),
            device_class("mig.nvidia.com", "(device.driver == \"gpu.nvidia.com\") && "
                                           "(device.attributes[\"gpu.nvidia.com\"].type == \"mig\")"),
            device_class("first-gpu", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].index == 0")]
    cluster = ingest(objs)
    devices = {k: v for k, v in cluster.nodes[0].allocatable.items() if k.startswith("dra.gangscale.io/")}
    assert devices == {DEV: 3, device_resource("mig.nvidia.com"): 1, device_resource("first-gpu"): 1}
    assert not cluster.warnings
    plan = plan_for(objs + [template("four", 4), dra_pod("a", tmpl="four")], [gpu_group("gpu4", 4, 10.0)])
    assert plan.scale_up == {"gpu4": 1}  # 3 free full GPUs on gpu-0: a 4-GPU claim needs a new node


def test_a_class_selector_the_planner_cannot_evaluate_counts_no_devices_and_says_so():
    objs = [node("gpu-0", cpu="16", mem="64Gi"), typed_slice("gpu-0", ["gpu"] * 4),
            device_class("h100", "device.driver == 'gpu.nvidia.com' && "
                                 "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')")]
    cluster = ingest(objs)
    assert device_resource("h100") not in cluster.nodes[0].allocatable
    assert any("DeviceClass h100: spec.selectors[0].cel.expression is not modelled" in w for w in cluster.warnings)


def test_a_claim_shared_by_pending_pods_says_the_plan_does_not_keep_them_on_one_node():
    # The devices of a shared claim are on one node, so all its pods must run there; the planner counts the
    # devices once, on the first pod, and does not co-locate the others: say so rather than stay silent.
    objs = [podgroup("pair", min_count=2), claim("four", 4)] + [dra_pod(f"p{i}", shared="four", group="pair")
                                                              for i in range(2)]
    cluster = ingest(objs)
    assert cluster.warnings == [
        "ResourceClaim default/four is shared by 2 pending pods (default/p0, default/p1): its devices are counted "
        "once, on default/p0; the plan does not keep the other pods on that pod's node, where node-local devices "
        "need them"]
    alone = ingest([claim("one", 1), dra_pod("solo", shared="one")])
    assert alone.warnings == []
