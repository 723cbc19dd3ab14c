"""Equal-cost plans prefer fewer nodes (the objective's last term), whichever solver stage made the plan."""

from __future__ import annotations

import json

from builders import plan_when_cp_sat_gets_no_time, pod, podgroup
from checker import check_plan

from gangscale.catalog import parse_catalog
from gangscale.cli import main

M5 = [{"name": "m5-4xl", "instanceType": "m5.4xlarge", "maxSize": 10},
      {"name": "m5-8xl", "instanceType": "m5.8xlarge", "maxSize": 10}]


def _plan_file(tmp_path, objects: list[dict], catalog: list[dict], *flags: str) -> dict:
    cluster, nodegroups, out = tmp_path / "cluster.json", tmp_path / "catalog.json", tmp_path / "plan.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    nodegroups.write_text(json.dumps({"nodeGroups": catalog}))
    assert main(["plan", "--cluster", str(cluster), "--nodegroups", str(nodegroups), "-o", "json",
                 "--output-file", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_one_m5_8xlarge_for_two_pods_not_two_m5_4xlarge_at_default_flags(tmp_path):
    """Each 12-CPU pod fills an m5.4xlarge ($0.768/h); one m5.8xlarge ($1.536/h) holds both for the same price."""
    plan = _plan_file(tmp_path, [pod("a", cpu="12", mem="8Gi"), pod("b", cpu="12", mem="8Gi")], M5)
    assert plan["scaleUp"] == {"m5-8xl": 1} and plan["costPerHour"] == 1.536


def test_fewer_nodes_even_when_the_greedy_plan_stands(monkeypatch):
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, [pod("a", cpu="12", mem="8Gi"), pod("b", cpu="12", mem="8Gi")],
                                         M5)
    assert plan.scale_up == {"m5-8xl": 1} and plan.solver.greedy_only


def test_merging_keeps_each_gang_in_its_zone_and_each_group_within_max_size(monkeypatch):
    """Two zones, one m5.8xlarge allowed in zone a: gang `za` (zone a) merges there; gang `zb` may not cross into
    zone a, and zone b has no m5.8xlarge group, so it keeps its two m5.4xlarge."""
    catalog = [{**M5[0], "name": "4xl-a", "zone": "us-east-1a"}, {**M5[1], "name": "8xl-a", "zone": "us-east-1a",
                                                                 "maxSize": 1},
               {**M5[0], "name": "4xl-b", "zone": "us-east-1b"}]
    zone = ["topology.kubernetes.io/zone"]
    objects = [podgroup("za", min_count=2, topology=zone), podgroup("zb", min_count=2, topology=zone),
               *(pod(f"za-{i}", cpu="12", mem="8Gi", group="za", selector={"topology.kubernetes.io/zone": "us-east-1a"})
                 for i in range(2)),
               *(pod(f"zb-{i}", cpu="12", mem="8Gi", group="zb", selector={"topology.kubernetes.io/zone": "us-east-1b"})
                 for i in range(2))]
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objects, catalog)
    assert plan.scale_up == {"8xl-a": 1, "4xl-b": 2}
    as_catalog = [{"name": g.name, "pricePerHour": g.price_per_hour, "labels": g.labels, "currentSize": 0,
                   "maxSize": g.max_size,
                   "allocatable": {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in g.allocatable.items()}}
                  for g in parse_catalog(catalog)[0]]
    assert check_plan(objects, as_catalog, plan.to_dict()) == []
