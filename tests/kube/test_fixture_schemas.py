"""The fixtures are what real servers accept: official schemas per release, CRD schemas for the rest.

kubernetes-validate 1.37.0 ships strict schemas for scheduling.k8s.io
v1alpha1 (1.35), v1alpha2 (1.36), v1alpha3 and v1beta1 (1.37). It looks a
schema up by kind and group *prefix*, so a scheduler-plugins or Volcano
PodGroup (`scheduling.x-k8s.io`, `scheduling.volcano.sh`) would be checked
against the native `scheduling-<version>` schema: CRD objects are validated
here against schemas derived from their CRDs instead.
"""

from __future__ import annotations

import json

import jsonschema
import kubernetes_validate
import pytest

from gangscale.ingest import ingest

from .conftest import FIXTURES, RELEASE_FIXTURE, load_fixture

CRD_SCHEMAS = {
    "scheduling.x-k8s.io/v1alpha1": "coscheduling-podgroup-v1alpha1.json",
    "scheduling.volcano.sh/v1beta1": "volcano-podgroup-v1beta1.json",
}
CRD_FIXTURES = ["coscheduling-podgroup.yaml", "volcano-podgroup.yaml"]


def crd_validator(api_version: str) -> jsonschema.protocols.Validator:
    schema = json.loads((FIXTURES / "schemas" / CRD_SCHEMAS[api_version]).read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("release, fixture", sorted(RELEASE_FIXTURE.items()))
def test_native_fixtures_validate_strictly_for_their_release(release, fixture):
    for obj in load_fixture(fixture) + load_fixture("nodes.yaml"):
        kubernetes_validate.validate(obj, release, strict=True)


def test_the_pod_link_field_changed_between_releases():
    """1.35's spec.workloadRef is gone in 1.36; 1.36's spec.schedulingGroup does not exist in 1.35."""
    old_pod = next(o for o in load_fixture("v1alpha1-workload.yaml") if o["kind"] == "Pod")
    new_pod = next(o for o in load_fixture("v1alpha2-podgroup.yaml") if o["kind"] == "Pod")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(old_pod, "1.36", strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(new_pod, "1.35", strict=True)


def test_a_podgroup_with_a_typo_fails_the_official_schema():
    pg = next(o for o in load_fixture("v1beta1-podgroup.yaml") if o["kind"] == "PodGroup")
    pg["spec"]["schedulingPolicy"] = {"gang": {"minCont": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pg, "1.37", strict=True)


@pytest.mark.parametrize("fixture", CRD_FIXTURES)
def test_crd_fixtures_validate_against_their_crd_schema(fixture):
    for obj in load_fixture(fixture):
        if obj["kind"] == "Pod":
            kubernetes_validate.validate(obj, "1.36", strict=True)
        else:
            crd_validator(obj["apiVersion"]).validate(obj)


@pytest.mark.parametrize("api_version", sorted(CRD_SCHEMAS))
def test_crd_schemas_reject_a_bad_min_member(api_version):
    bad = {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": "x"}, "spec": {"minMember": "2"}}
    assert list(crd_validator(api_version).iter_errors(bad))


@pytest.mark.parametrize("fixture, api, min_count", [
    ("v1alpha1-workload.yaml", "scheduling.k8s.io/v1alpha1", 3),
    ("v1alpha2-podgroup.yaml", "scheduling.k8s.io/v1alpha2", 3),
    ("v1beta1-podgroup.yaml", "scheduling.k8s.io/v1beta1", 3),
    ("coscheduling-podgroup.yaml", "scheduling.x-k8s.io/v1alpha1", 2),
    ("volcano-podgroup.yaml", "scheduling.volcano.sh/v1beta1", 2),
])
def test_every_fixture_is_one_gang_for_ingest(fixture, api, min_count):
    cluster = ingest(load_fixture(fixture))
    assert [(g.api, g.policy, g.min_count, len(g.pending), g.exists) for g in cluster.gangs] == [
        (api, "gang", min_count, min_count, True)
    ]
    assert not cluster.warnings
