"""DRA, Kueue and YuniKorn fixtures are what real servers accept, as test_fixture_schemas does for the gang APIs.

resource.k8s.io/v1 objects are validated strictly with kubernetes-validate's 1.34+ schemas; the Kueue
Workload against an excerpt of its CRD (its pod templates as Pods, strictly); YuniKorn's task groups are
annotations on Pods, so the pods are validated strictly and the annotation against a schema of its
TaskGroup struct.
"""

from __future__ import annotations

import json

import jsonschema
import kubernetes_validate
import pytest

from gangscale.ingest import ingest

from .conftest import FIXTURES, load_fixture


def schema(name: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(json.loads((FIXTURES / "schemas" / name).read_text()))


@pytest.mark.parametrize("release", ["1.36", "1.37"])
def test_the_dra_fixture_validates_strictly_against_the_official_schemas(release):
    for obj in load_fixture("inputs/dra-claims.yaml"):
        if obj["apiVersion"].startswith("scheduling.k8s.io") and release != "1.36":
            continue  # the PodGroup is v1alpha2 (1.36)
        kubernetes_validate.validate(obj, release, strict=True)


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
    ("inputs/kueue-workload.yaml", "kueue.x-k8s.io/v1beta1", 4, 4, 0),
    ("inputs/yunikorn-taskgroups.yaml", "yunikorn.apache.org", 4, 4, 0),
])
def test_every_input_fixture_is_one_gang_for_ingest(fixture, api, min_count, pending, devices):
    cluster = ingest(load_fixture(fixture))
    assert [(g.api, g.policy, g.min_count, len(g.pending), g.invalid) for g in cluster.gangs] == [
        (api, "gang", min_count, pending, None)
    ]
    assert sum(p.requests.get("dra.gangscale.io/gpu.nvidia.com", 0) for p in cluster.gangs[0].pending) == devices
    assert not cluster.warnings
