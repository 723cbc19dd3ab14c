"""The backlog generator: seeded, deterministic, and readable by `gangscale plan`."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from benchmarks.generate import FAMILIES, BacklogSpec, build_objects, write_backlog
from gangscale.cli import main as gangscale_main


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_spec_writes_same_bytes(tmp_path):
    spec = BacklogSpec("det", "busy", 150, 12, nodes=20, seed=7)
    a = write_backlog(spec, tmp_path / "a")
    b = write_backlog(spec, tmp_path / "b")
    assert _digest(a.cluster) == _digest(b.cluster)
    assert _digest(a.catalog) == _digest(b.catalog)
    c = write_backlog(BacklogSpec("det", "busy", 150, 12, nodes=20, seed=8), tmp_path / "c")
    assert _digest(a.cluster) != _digest(c.cluster)


@pytest.mark.parametrize("family", FAMILIES)
def test_families_are_plannable(tmp_path, family):
    spec = BacklogSpec(f"f-{family}", family, 60, 9, nodes=10 if family == "busy" else 0, seed=3)
    b = write_backlog(spec, tmp_path)
    assert b.pending_pods >= 60 and b.node_groups == 9
    out = tmp_path / "plan.json"
    code = gangscale_main(["plan", "--cluster", str(b.cluster), "--nodegroups", str(b.catalog), "-o", "json",
                           "--output-file", str(out), "--time-limit", "1"])
    assert code == 0
    plan = orjson.loads(out.read_bytes())
    assert not plan["warnings"]  # every object and catalog entry was understood
    assert sum(g["pending"] for g in plan["gangs"]) == b.pending_pods


def test_sizes_and_gang_targets():
    objs, catalog, stats = build_objects(BacklogSpec("t", "mixed", 2000, 30, nodes=100, gangs=100, seed=1))
    assert 2000 <= stats["pending_pods"] < 2600
    assert abs(stats["gangs"] - 100) <= 2
    assert stats["existing_nodes"] == 100 and len(catalog) == 30
    zones = {c["zone"] for c in catalog}
    assert zones == {"us-east-1a", "us-east-1b", "us-east-1c"}
    gpu = [c for c in catalog if c["instanceType"].startswith(("p4", "p5", "g"))]
    assert gpu and all(c.get("taints") for c in gpu)  # GPU node groups are tainted
    kinds = {o["kind"] for o in objs}
    assert kinds == {"Node", "Pod", "PodGroup"}
    apis = {o["apiVersion"] for o in objs if o["kind"] == "PodGroup"}
    assert {"scheduling.k8s.io/v1alpha2", "scheduling.x-k8s.io/v1alpha1"} <= apis


def test_the_elastic_family_has_issue_11s_shape():
    spec = BacklogSpec("el", "elastic", 2000, 50, nodes=200, gangs=100, supply=0.7, seed=1)
    objects, catalog, stats = build_objects(spec)
    assert stats["gangs"] == 100 and stats["node_groups"] == 50 and stats["existing_nodes"] == 200
    pending = [o for o in objects if o["kind"] == "Pod" and "nodeName" not in o["spec"]]
    gang_sizes: dict[str, int] = {}
    shapes = set()
    for p in pending:
        req = p["spec"]["containers"][0]["resources"]["requests"]
        shapes.add((req["cpu"], req["memory"], req.get("nvidia.com/gpu"), str(p["spec"].get("nodeSelector"))))
        if p["metadata"]["name"].startswith("elastic-"):
            gang_sizes[p["metadata"]["name"].rsplit("-worker-", 1)[0]] = gang_sizes.get(
                p["metadata"]["name"].rsplit("-worker-", 1)[0], 0) + 1
    assert {s[2] for s in shapes if s[2]} == {"1", "4", "8"}
    assert all("gpu.product" in s[3] for s in shapes if s[2])
    assert len({s for s in shapes if s[0] != "250m"}) >= 8
    mins = {}
    for o in objects:
        if o["kind"] == "PodGroup" and o["metadata"]["name"].startswith("elastic-"):
            spec_ = o["spec"]
            mins[o["metadata"]["name"]] = spec_.get("minMember") or spec_["schedulingPolicy"]["gang"]["minCount"]
    assert set(mins) == set(gang_sizes) and max(gang_sizes.values()) <= 16
    elastic = sum(1 for g, n in gang_sizes.items() if mins[g] < n)
    assert elastic >= 0.6 * len(gang_sizes)  # 80% drawn elastic; single-pod gangs cannot be


def test_the_daemonsets_option_adds_the_eks_gpu_set_and_changes_nothing_else(tmp_path):
    """The same backlog with the EKS GPU cluster's DaemonSets: the same pending pods, gangs and nodes; the
    DaemonSets, and their pods bound on existing nodes where they fit. The plan's new nodes lose their requests:
    the four system ones on every group, the device plugin and DCGM exporter on GPU groups too."""
    plain = BacklogSpec("ds", "busy", 200, 15, nodes=30, seed=2)
    objs, catalog, stats = build_objects(plain)
    with_ds, catalog_ds, stats_ds = build_objects(BacklogSpec(**{**plain.to_dict(), "daemonsets": True}))
    assert catalog_ds == catalog and stats_ds["pending_pods"] == stats["pending_pods"]
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    added = [o for o in with_ds if key(o) not in {key(x) for x in objs}]
    daemonsets = [o for o in added if o["kind"] == "DaemonSet"]
    assert {d["metadata"]["name"] for d in daemonsets} == {
        "kube-proxy", "aws-node", "ebs-csi-node", "fluent-bit", "nvidia-device-plugin", "dcgm-exporter"}
    bound = [o for o in added if o["kind"] == "Pod"]
    assert bound and all(p["spec"]["nodeName"] and p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
                         for p in bound)
    b = write_backlog(BacklogSpec(**{**plain.to_dict(), "daemonsets": True}), tmp_path)
    out = tmp_path / "plan.json"
    assert gangscale_main(["plan", "--cluster", str(b.cluster), "--nodegroups", str(b.catalog), "-o", "json",
                           "--output-file", str(out), "--time-limit", "1"]) == 0
    plan = orjson.loads(out.read_bytes())
    assert not plan["warnings"] and sum(g["pending"] for g in plan["gangs"]) == b.pending_pods
    overhead = plan["daemonSetOverhead"]
    gpu = {c["name"] for c in catalog if c.get("taints")}
    assert set(overhead) == {c["name"] for c in catalog}
    for name, o in overhead.items():  # 280m and 120Mi + 200Mi on every node; 150m and 576Mi more on GPU nodes
        assert (o["cpu"], o["memory"], o["pods"]) == (("430m", "896Mi", "6") if name in gpu else ("280m", "320Mi", "4"))
