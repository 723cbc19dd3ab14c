"""DRA, Kueue and YuniKorn fixtures are what real servers accept, as test_fixture_schemas does for the gang APIs.

resource.k8s.io/v1 objects are validated strictly with kubernetes-validate's 1.34+ schemas; the Kueue
Workload against an excerpt of its CRD (its pod templates as Pods, strictly); YuniKorn's task groups are
annotations on Pods, so the pods are validated strictly and the annotation against a schema of its
TaskGroup struct.
"""

from __future__ import annotations

import copy
import json

import jsonschema
import kubernetes_validate
import pytest

from gangscale.ingest import ingest

from .conftest import FIXTURES, load_fixture


def schema(name: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(json.loads((FIXTURES / "schemas" / name).read_text()))


@pytest.mark.parametrize("fixture", ["inputs/dra-claims.yaml", "inputs/dra-podgroup-claims.yaml"])
@pytest.mark.parametrize("release", ["1.36", "1.37"])
def test_the_dra_fixture_validates_strictly_against_the_official_schemas(release, fixture):
    for obj in load_fixture(fixture):
        if obj["apiVersion"].startswith("scheduling.k8s.io") and release != "1.36":
            obj["apiVersion"] = "scheduling.k8s.io/v1beta1"  # the PodGroup is v1alpha2 (1.36), v1beta1 in 1.37
        kubernetes_validate.validate(obj, release, strict=True)


def as_version(obj: dict, version: str) -> dict:
    """A resource.k8s.io/v1 object as the older API stores it: v1beta2 has v1's shape; v1beta1 carries a
    request's fields inline (no `exactly`) and a slice device's fields under `basic`."""
    obj = copy.deepcopy(obj)
    if not obj["apiVersion"].startswith("resource.k8s.io/"):
        return obj
    obj["apiVersion"] = f"resource.k8s.io/{version}"
    if version != "v1beta1":
        return obj
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    for req in spec.get("devices", {}).get("requests", []) if obj["kind"] != "ResourceSlice" else []:
        req.update(req.pop("exactly"))
    if obj["kind"] == "ResourceSlice":
        spec["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                           for d in spec["devices"]]
    return obj


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_the_dra_fixture_in_an_older_served_version_validates_and_plans_the_same_devices(version):
    # A server that serves only v1beta2 (1.33) or v1beta1 (1.32) returns these shapes; both are read.
    objs = [as_version(o, version) for o in load_fixture("inputs/dra-claims.yaml")]
    for obj in objs:
        if obj["apiVersion"].startswith("resource.k8s.io/"):
            kubernetes_validate.validate(obj, "1.34", strict=True)
    cluster = ingest(objs + load_fixture("nodes.yaml") + [{
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-0"},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}])
    (g,) = cluster.gangs
    assert (g.invalid, sum(p.requests.get("dra.gangscale.io/gpu.nvidia.com", 0) for p in g.pending)) == (None, 3)
    gpu_node = next(n for n in cluster.nodes if n.name == "gpu-node-0")
    assert gpu_node.allocatable["dra.gangscale.io/gpu.nvidia.com"] == 3  # 4 published, 1 allocated


def test_a_dra_request_with_a_typo_fails_the_official_schema():
    tmpl = next(o for o in load_fixture("inputs/dra-claims.yaml") if o["kind"] == "ResourceClaimTemplate")
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMod"] = "All"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(tmpl, "1.36", strict=True)


def test_the_kueue_fixture_validates_against_the_crd_and_its_templates_as_pods():
    for obj in load_fixture("inputs/kueue-workload.yaml"):
        schema("kueue-workload-v1beta1.json").validate(obj)
        for ps in obj["spec"]["podSets"]:
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **ps["template"].get("metadata", {})},
                   "spec": ps["template"]["spec"]}
            kubernetes_validate.validate(pod, "1.36", strict=True)


def test_the_kueue_crd_schema_rejects_a_bad_count():
    wl = load_fixture("inputs/kueue-workload.yaml")[0]
    wl["spec"]["podSets"][0]["count"] = "3"
    assert list(schema("kueue-workload-v1beta1.json").iter_errors(wl))


def test_the_yunikorn_fixture_pods_and_task_groups_validate():
    for obj in load_fixture("inputs/yunikorn-taskgroups.yaml"):
        kubernetes_validate.validate(obj, "1.36", strict=True)
        text = obj["metadata"]["annotations"].get("yunikorn.apache.org/task-groups")
        if text:
            schema("yunikorn-task-groups.json").validate(json.loads(text))
    assert list(schema("yunikorn-task-groups.json").iter_errors([{"name": "a", "minMember": 0, "minResource": {}}]))


@pytest.mark.parametrize("fixture, api, min_count, pending, devices", [
    ("inputs/dra-claims.yaml", "scheduling.k8s.io/v1alpha2", 2, 2, 3),  # a GPU each, and the shared claim's once
    ("inputs/dra-podgroup-claims.yaml", "scheduling.k8s.io/v1alpha2", 4, 4, 4),  # the PodGroup's one claim
    ("inputs/kueue-workload.yaml", "kueue.x-k8s.io/v1beta1", 4, 4, 0),
    ("inputs/yunikorn-taskgroups.yaml", "yunikorn.apache.org", 4, 4, 0),
])
def test_every_input_fixture_is_one_gang_for_ingest(fixture, api, min_count, pending, devices):
    cluster = ingest(load_fixture(fixture))
    assert [(g.api, g.policy, g.min_count, len(g.pending), g.invalid) for g in cluster.gangs] == [
        (api, "gang", min_count, pending, None)
    ]
    assert sum(p.requests.get("dra.gangscale.io/gpu.nvidia.com", 0) for p in cluster.gangs[0].pending) == devices
    # the only warning: a claim shared by pending pods (its devices are on one node; the plan does not co-locate)
    assert all(" is shared by " in w and "pending pods" in w for w in cluster.warnings)
    assert len(cluster.warnings) == (1 if devices else 0)
