"""The emulator behaves like an API server where the live layer depends on it (through the real client)."""

from __future__ import annotations

import pytest

from gangscale.kube.errors import KubeError
from gangscale.kube.refs import PODS

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "pause"}]}}


def test_create_update_patch_delete_with_conflicts(emulator, client):
    created = client.post(PODS.path("default"), POD)
    assert created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
    with pytest.raises(KubeError) as exists:
        client.post(PODS.path("default"), POD)
    assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"

    relabelled = {**created, "metadata": {**created["metadata"], "labels": {"a": "1"}}}
    updated = client.put(PODS.path("default", "p"), relabelled)
    with pytest.raises(KubeError) as stale:  # the old resourceVersion lost the race
        client.put(PODS.path("default", "p"), created)
    assert stale.value.status == 409 and stale.value.reason == "Conflict"

    patched = client.patch(PODS.path("default", "p"), {"metadata": {"labels": {"b": "2"}}})
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert int(patched["metadata"]["resourceVersion"]) > int(updated["metadata"]["resourceVersion"])
    client.delete(PODS.path("default", "p"))
    with pytest.raises(KubeError) as gone:
        client.get(PODS.path("default", "p"))
    assert gone.value.status == 404


@pytest.mark.parametrize("release, kept, dropped", [
    ("1.35", "workloadRef", "schedulingGroup"),
    ("1.36", "schedulingGroup", "workloadRef"),
])
def test_dry_run_create_keeps_only_the_fields_the_release_knows(make_emulator, client_for, release, kept, dropped):
    emu = make_emulator(release=release)
    body = {**POD, "spec": {**POD["spec"], "workloadRef": {"name": "w", "podGroup": "g"},
                            "schedulingGroup": {"podGroupName": "g"}}}
    out = client_for(emu).post(PODS.path("default"), body, {"dryRun": "All"})
    assert kept in out["spec"] and dropped not in out["spec"]
    assert emu.get("v1", "Pod", "default", "p") is None and out["metadata"]["resourceVersion"] == ""


def test_dry_run_drops_the_link_when_the_gate_is_off(make_emulator, client_for):
    emu = make_emulator(release="1.37", generic_workload=False)
    body = {**POD, "spec": {**POD["spec"], "schedulingGroup": {"podGroupName": "g"}}}
    assert "schedulingGroup" not in client_for(emu).post(PODS.path("default"), body, {"dryRun": "All"})["spec"]


def test_creating_in_a_missing_namespace_is_404(emulator, client):
    with pytest.raises(KubeError) as err:
        client.post(PODS.path("nowhere"), {**POD, "metadata": {"name": "p", "namespace": "nowhere"}})
    assert err.value.status == 404 and "nowhere" in str(err.value)


def test_a_refused_patch_leaves_no_unread_body_on_the_connection(emulator, client):
    """A 404 before the body is read must not turn the body into the next request's first line."""
    with pytest.raises(KubeError) as missing:
        client.patch(PODS.path("default", "nope"), {"metadata": {"labels": {"a": "1"}}})
    assert missing.value.status == 404
    assert client.post(PODS.path("default"), POD)["metadata"]["name"] == "p"  # same pooled connection


def test_status_writes_change_only_status_and_apply_needs_a_field_manager(emulator, client):
    client.post(PODS.path("default"), POD)
    path = PODS.path("default", "p") + "/status"
    client.patch(path, {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Running"}})
    got = client.get(PODS.path("default", "p"))
    assert got["status"] == {"phase": "Running"} and "labels" not in got["metadata"]
    with pytest.raises(KubeError) as no_manager:
        client.apply(path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, field_manager="")
    assert no_manager.value.status == 400


def test_pods_are_selected_by_the_node_they_are_bound_to_and_an_unknown_field_is_refused(emulator, client):
    from tests.builders import pod

    emulator.apply(pod("a", node="n1"))
    emulator.apply(pod("b", node="n2"))
    emulator.apply(pod("c"))
    listed = client.get(PODS.path(), {"fieldSelector": "spec.nodeName=n1"})["items"]
    assert [p["metadata"]["name"] for p in listed] == ["a"]
    assert len(client.get(PODS.path(), {"fieldSelector": "spec.nodeName="})["items"]) == 1  # unbound
    with pytest.raises(KubeError) as err:
        client.get(PODS.path(), {"fieldSelector": "spec.priority=1"})
    assert err.value.status == 400
def _configmap(name: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data}


def test_a_configmap_over_one_mebibyte_of_data_is_422_invalid_as_validate_configmap_says(emulator, client):
    from gangscale.kube.refs import CONFIGMAPS

    limit = 1024 * 1024
    client.post(CONFIGMAPS.path("default"), _configmap("at-limit", {"a": "x" * (limit - 1), "b": "y"}))
    with pytest.raises(KubeError) as big:  # the values count, summed over the keys
        client.post(CONFIGMAPS.path("default"), _configmap("over", {"a": "x" * limit, "b": "y"}))
    assert big.value.status == 422 and big.value.reason == "Invalid"
    assert 'ConfigMap "over" is invalid: []: Too long: may not be more than 1048576 bytes' in str(big.value)
    cm = client.get(CONFIGMAPS.path("default", "at-limit"))
    cm["data"]["c"] = "z"  # an update is validated too, and a refused one changes nothing
    with pytest.raises(KubeError) as grown:
        client.put(CONFIGMAPS.path("default", "at-limit"), cm)
    assert grown.value.status == 422
    assert "c" not in client.get(CONFIGMAPS.path("default", "at-limit"))["data"]
    with pytest.raises(KubeError) as patched:
        client.patch(CONFIGMAPS.path("default", "at-limit"), {"data": {"c": "z"}})
    assert patched.value.status == 422


def test_a_secret_over_one_mebibyte_decoded_is_422_and_any_object_over_etcds_limit_is_refused(emulator, client):
    import base64

    from gangscale.kube.refs import ResourceRef

    secrets = ResourceRef("", "v1", "secrets", "Secret")
    ok = base64.b64encode(b"x" * (1024 * 1024)).decode()  # 1.33 MiB of base64, exactly 1 MiB decoded
    client.post(secrets.path("default"), {"apiVersion": "v1", "kind": "Secret",
                                          "metadata": {"name": "s", "namespace": "default"}, "data": {"k": ok}})
    with pytest.raises(KubeError) as big:
        client.post(secrets.path("default"), {"apiVersion": "v1", "kind": "Secret",
                                              "metadata": {"name": "t", "namespace": "default"},
                                              "data": {"k": ok}, "stringData": {"more": "1"}})
    assert big.value.status == 422 and 'Secret "t" is invalid: data: Too long' in str(big.value)
    fat = {**POD, "metadata": {**POD["metadata"], "name": "fat", "annotations": {"a": "x" * (1600 * 1024)}}}
    with pytest.raises(KubeError) as etcd:
        client.post(PODS.path("default"), fat)
    assert etcd.value.status == 500 and "etcdserver: request is too large" in str(etcd.value)


def test_a_request_body_over_three_mebibytes_is_413_and_the_connection_still_serves(emulator, client):
    huge = {**POD, "metadata": {**POD["metadata"], "name": "huge", "annotations": {"a": "x" * (3 * 1024 * 1024)}}}
    with pytest.raises(KubeError) as too_large:
        client.post(PODS.path("default"), huge)
    assert too_large.value.status == 413 and "limit is 3145728" in str(too_large.value)
    assert client.post(PODS.path("default"), POD)["metadata"]["name"] == "p"


def test_a_delete_with_a_stale_resource_version_precondition_is_409(emulator, client):
    from gangscale.kube.refs import CONFIGMAPS

    first = client.post(CONFIGMAPS.path("default"), _configmap("cm", {"a": "1"}))
    client.put(CONFIGMAPS.path("default", "cm"), {**first, "data": {"a": "2"}})
    with pytest.raises(KubeError) as stale:
        client.delete(CONFIGMAPS.path("default", "cm"),
                      body={"preconditions": {"resourceVersion": first["metadata"]["resourceVersion"]}})
    assert stale.value.status == 409 and client.get(CONFIGMAPS.path("default", "cm"))["data"] == {"a": "2"}
