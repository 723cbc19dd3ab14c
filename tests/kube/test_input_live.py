"""Live reading of DRA and Kueue objects: discovery picks the served version, `plan` and `check` see them."""

from __future__ import annotations

import json

import pytest

from gangscale.cli import main
from gangscale.ingest import ingest
from gangscale.kube.discovery import choose_gang_apis, discover
from gangscale.kube.live import read_cluster

from .conftest import FIXTURES, load_fixture
from .test_input_fixture_schemas import as_version


def serve(make_emulator, fixtures: list[str], **kw):
    emu = make_emulator(release="1.36", **kw)
    for ns in ("ml", "research"):
        emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for f in fixtures:
        emu.apply_all(load_fixture(f))
    emu.apply_all(load_fixture("nodes.yaml"))
    return emu


@pytest.mark.parametrize("versions, chosen", [(("v1", "v1beta1"), "v1"), (("v1beta1",), "v1beta1"),
                                             (("v1beta2", "v1beta1"), "v1beta2"), (("v1beta2",), "v1beta2")])
def test_discovery_picks_the_best_served_dra_version(make_emulator, client_for, versions, chosen):
    emu = make_emulator(release="1.36", dra_versions=versions, kueue=True)
    apis = choose_gang_apis(discover(client_for(emu)))
    assert {r.plural: r.version for r in apis.inputs} == {
        "resourceclaims": chosen, "resourceclaimtemplates": chosen, "deviceclasses": chosen,
        "resourceslices": chosen, "workloads": "v1beta1"}


def test_a_live_read_includes_claims_and_workloads(make_emulator, client_for):
    emu = serve(make_emulator, ["inputs/dra-claims.yaml", "inputs/kueue-workload.yaml"], dra_versions=("v1",), kueue=True)
    live = read_cluster(client_for(emu))
    kinds = {o["kind"] for o in live.objects}
    assert {"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice", "Workload"} <= kinds
    gangs = {g.name: g for g in ingest(live.objects).gangs}
    assert sum(p.requests.get("dra.gangscale.io/gpu.nvidia.com", 0) for p in gangs["dra-train"].pending) == 3
    assert gangs["job-train-3f2a1"].admission


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_a_server_serving_only_an_older_dra_version_is_read_with_the_same_devices(make_emulator, client_for, version):
    emu = make_emulator(release="1.36", dra_versions=(version,))
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    emu.apply_all([as_version(o, version) for o in load_fixture("inputs/dra-claims.yaml")])
    live = read_cluster(client_for(emu))
    assert {o["apiVersion"] for o in live.objects if o["kind"] == "ResourceClaim"} == {f"resource.k8s.io/{version}"}
    gangs = {g.name: g for g in ingest(live.objects).gangs}
    assert gangs["dra-train"].invalid is None
    assert sum(p.requests.get("dra.gangscale.io/gpu.nvidia.com", 0) for p in gangs["dra-train"].pending) == 3


def test_plan_from_the_live_cluster_reports_waiting_for_admission(make_emulator, kubeconfig_for, tmp_path):
    emu = serve(make_emulator, ["inputs/kueue-workload.yaml"], kueue=True)
    out = tmp_path / "plan.json"
    args = ["plan", "--kubeconfig", kubeconfig_for(emu), "--nodegroups", str(FIXTURES / "catalog.yaml"),
            "-o", "json", "--output-file", str(out), "--time-limit", "5"]
    assert main(args) == 0
    decisions = {g["name"]: g["decision"] for g in json.loads(out.read_text())["gangs"]}
    assert decisions["job-train-3f2a1"] == "waiting-for-admission"
    assert main([*args, "--plan-unadmitted"]) == 0
    plan = json.loads(out.read_text())
    assert {g["name"]: g["decision"] for g in plan["gangs"]}["job-train-3f2a1"] == "scale-up"


def test_check_names_the_dra_and_kueue_apis_it_reads(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36", dra_versions=("v1",), kueue=True)
    main(["check", "--kubeconfig", kubeconfig_for(emu)])
    out = capsys.readouterr().out
    assert "resourceclaims.v1.resource.k8s.io" in out and "workloads.v1beta1.kueue.x-k8s.io" in out
