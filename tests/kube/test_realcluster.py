"""The same checks against a real cluster. Never run in CI: scripts/e2e-real-cluster.sh runs them.

It sets GANGSCALE_E2E_KUBECONFIG (a cluster with GenericWorkload on and the
e2e gang applied) and GANGSCALE_E2E_NAMESPACE; without them every test skips.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gangscale.cli import main
from gangscale.kube.client import connect
from gangscale.kube.informer import ClusterCache
from gangscale.kube.live import read_cluster

KUBECONFIG = os.environ.get("GANGSCALE_E2E_KUBECONFIG", "")
NAMESPACE = os.environ.get("GANGSCALE_E2E_NAMESPACE", "gangscale-e2e")
CATALOG = str(Path(__file__).resolve().parents[2] / "config" / "e2e" / "catalog.yaml")

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.skipif(not KUBECONFIG, reason="needs a real cluster: run scripts/e2e-real-cluster.sh"),
]


def test_check_finds_the_native_api_and_the_pod_field(capsys):
    code = main(["check", "--kubeconfig", KUBECONFIG, "-n", NAMESPACE, "-o", "json"])
    report = {r["name"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert code in (0, 1)
    assert report["gang-apis"]["verdict"] == "ok" and report["pod-field"]["verdict"] == "ok"
    assert report["server"]["verdict"] == "ok"


def test_plan_scales_the_e2e_gang(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--kubeconfig", KUBECONFIG, "-n", NAMESPACE, "--nodegroups", CATALOG,
                 "-o", "json", "--output-file", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["scaleUp"] == {"e2e-huge": 2}


def test_the_informer_syncs_and_sees_the_gang():
    with connect(KUBECONFIG) as client:
        live = read_cluster(client, NAMESPACE)
        with ClusterCache(client, live.apis.refs, namespace=NAMESPACE) as cache:
            assert cache.wait_synced(30)
            names = {o["metadata"]["name"] for o in cache.snapshot() if o["kind"] in ("PodGroup", "Workload")}
    assert "train" in names
