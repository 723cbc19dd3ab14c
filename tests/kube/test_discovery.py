"""Discovery decides what is read: one version per gang API, whatever the release serves."""

from __future__ import annotations

import pytest

from gangscale.kube.discovery import choose_gang_apis, discover, parse_version


@pytest.mark.parametrize("release, native, workload, field", [
    ("1.35", None, "workloads.v1alpha1.scheduling.k8s.io", "workloadRef"),
    ("1.36", "podgroups.v1alpha2.scheduling.k8s.io", None, "schedulingGroup"),
    ("1.37", "podgroups.v1beta1.scheduling.k8s.io", None, "schedulingGroup"),
])
def test_each_release_reads_its_native_gang_api(make_emulator, client_for, release, native, workload, field):
    emu = make_emulator(release=release)
    info = discover(client_for(emu))
    apis = choose_gang_apis(info)
    assert info.minor == int(release.split(".")[1])
    assert (apis.native.label if apis.native else None) == native
    assert (apis.workload.label if apis.workload else None) == workload
    assert apis.pod_field == field and apis.unread == []
    # only the groups that matter are fetched: /version, /apis, and their versions
    assert {r.path for r in emu.requests} <= {"/version", "/apis", "/apis/apps/v1", "/apis/scheduling.k8s.io/v1",
                                              f"/apis/scheduling.k8s.io/{(apis.native or apis.workload).version}"}


def test_137_prefers_beta_when_alpha_is_served_too(make_emulator, client_for):
    emu = make_emulator(release="1.37", native_versions=("v1beta1", "v1alpha3"))
    apis = choose_gang_apis(discover(client_for(emu)))
    assert apis.native is not None and apis.native.version == "v1beta1"


def test_a_served_version_the_planner_cannot_read_is_named(make_emulator, client_for):
    apis = choose_gang_apis(discover(client_for(make_emulator(release="1.37", native_versions=("v1alpha3",)))))
    assert apis.refs == [] and apis.unread == ["podgroups.scheduling.k8s.io/v1alpha3"]


def test_a_server_without_any_gang_api(make_emulator, client_for):
    info = discover(client_for(make_emulator(release="1.36", native_versions=())))
    apis = choose_gang_apis(info)
    assert apis.refs == [] and apis.pod_field is None
    assert info.groups["scheduling.k8s.io"] == ["v1"]


def test_crd_gang_apis_are_read_when_their_crds_exist(make_emulator, client_for):
    apis = choose_gang_apis(discover(client_for(make_emulator(release="1.35", coscheduling=True, volcano=True))))
    assert [r.label for r in apis.refs] == [
        "workloads.v1alpha1.scheduling.k8s.io",
        "podgroups.v1alpha1.scheduling.x-k8s.io",
        "podgroups.v1beta1.scheduling.volcano.sh",
    ]


@pytest.mark.parametrize("doc, expected", [
    ({"major": "1", "minor": "36", "gitVersion": "v1.36.0"}, ("v1.36.0", 1, 36)),
    ({"major": "1", "minor": "35+", "gitVersion": "v1.35.2-eks-4096722"}, ("v1.35.2-eks-4096722", 1, 35)),
    ({"gitVersion": "v1.37.1-gke.100"}, ("v1.37.1-gke.100", 1, 37)),
    ({}, ("", None, None)),
])
def test_server_versions_as_managed_clusters_print_them(doc, expected):
    assert parse_version(doc) == expected
