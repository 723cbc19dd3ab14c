"""`gangscale plan` end to end as a user runs it: the bundled example, formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gangscale.catalog import load_catalog
from gangscale.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ["--cluster", str(ROOT / "config/examples/backlog.yaml"), "--nodegroups", str(ROOT / "config/examples/catalog.yaml")]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gangscale", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def example_plan() -> dict:
    """The solver's plan (`--mode off`): the one the independent checker checks pod by pod."""
    proc = run_cli("plan", *EXAMPLE, "-o", "json", "--mode", "off")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bundled_example_plans_every_flavour_and_explains_the_edge_cases(example_plan):
    from checker import check_plan
    from gangscale.loader import read_objects

    decisions = {f"{g['namespace']}/{g['name']}": g["decision"] for g in example_plan["gangs"]}
    assert decisions["ml-research/llm-pretrain"] == "scale-up"
    assert decisions["ml-research/rl-sweep"] == "waiting-for-podgroup"
    assert decisions["ml-research/ddp-resnet"] == "below-quorum"
    assert decisions["ml-research/broken-sweep"] == "invalid"
    assert decisions["ml-research/too-big"] == "infeasible"
    # the solver's plan fits the cron pod on an existing node
    assert decisions["batch/report-cron-28917"] == "fits-existing"
    assert example_plan["scheduler"]["mode"] == "off" and example_plan["mode"] == "off"
    assert {"scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1beta1",
            "scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1", "none"} <= {g["api"] for g in example_plan["gangs"]}
    llm = next(g for g in example_plan["gangs"] if g["name"] == "llm-pretrain")
    assert llm["topologyDomain"] == {"topology.kubernetes.io/zone": "us-east-1a"}
    assert example_plan["scaleUp"]["gpu-h100-a"] == 8
    catalog = yaml.safe_load((ROOT / "config/examples/catalog.yaml").read_text())["nodeGroups"]
    # the checker needs explicit allocatable/prices: take them from the loaded catalog
    groups, _ = load_catalog(ROOT / "config/examples/catalog.yaml")
    for entry, g in zip(catalog, groups):
        entry["allocatable"] = {k: str(v) if k != "cpu" else f"{v}m" for k, v in g.allocatable.items()}
        entry["pricePerHour"] = g.price_per_hour
        entry["labels"] = g.labels
    errors = check_plan(read_objects(ROOT / "config/examples/backlog.yaml"), catalog, example_plan)
    assert not errors, errors
    assert 0 < example_plan["lowerBoundPerHour"] <= example_plan["costPerHour"]
    assert example_plan["solver"]["gap"] < 0.01


def test_plan_reports_by_default_what_the_controllers_default_gate_mode_does(example_plan):
    """The controller gates every gang pod by default (gateMode opt-out), so `plan` plans as gate mode: the basic cron
    pod, which nobody gates, is left to the scheduler (placed first on an existing node), the gangs as the solver's
    plan has them."""
    from gangscale.controller.config import ControllerConfig
    from gangscale.plan_modes import DEFAULT_MODE

    assert DEFAULT_MODE.value == "gate" and ControllerConfig().gate_mode == "opt-out"
    proc = run_cli("plan", *EXAMPLE, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    gate = json.loads(proc.stdout)
    assert gate["mode"] == "gate" and gate["scheduler"]["mode"] == "off"
    cron = next(g for g in gate["gangs"] if g["name"] == "report-cron-28917")
    assert cron["decision"] == "fits-existing" and cron["placed"] == 0
    assert "no scheduling gate" in cron["reason"]
    others = [g for g in gate["gangs"] if g["name"] != "report-cron-28917"]
    assert others == [g for g in example_plan["gangs"] if g["name"] != "report-cron-28917"]
    assert gate["scaleUp"] == example_plan["scaleUp"]


@pytest.mark.parametrize("flags, mode, scheduler", [
    (["--mode", "observe"], "observe", "observe"),
    (["--scheduler-model", "observe"], "observe", "observe"),  # the older flag alone keeps its meaning
    (["--scheduler-model", "off"], "off", "off"),
    (["--mode", "gate", "--scheduler-model", "off"], "gate", "off"),
])
def test_mode_chooses_the_controller_mode_the_plan_is_for(flags, mode, scheduler, capsys):
    assert main(["plan", *EXAMPLE, "-o", "json", "--time-limit", "5", *flags]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["mode"] == mode and plan["scheduler"]["mode"] == scheduler


@pytest.mark.parametrize("flags", [["--mode", "off", "--scheduler-model", "observe"],
                                   ["--mode", "observe", "--scheduler-model", "off"]])
def test_a_mode_the_scheduler_model_flag_contradicts_is_refused_in_one_line(flags, capsys):
    assert main(["plan", *EXAMPLE, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "contradicts --mode" in err


@pytest.mark.parametrize("fmt, needle", [("table", "NODE GROUP"), ("markdown", "| gang | api |"), ("yaml", "scaleUp:")])
def test_human_formats(fmt, needle, capsys):
    assert main(["plan", *EXAMPLE, "-o", fmt, "--time-limit", "5"]) == 0
    out = capsys.readouterr().out
    assert needle in out and "llm-pretrain" in out


def test_json_from_stdin_and_output_file(tmp_path):
    from gangscale.loader import read_objects

    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                   "items": read_objects(ROOT / "config/examples/backlog.yaml")}))
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "gangscale", "plan", "--cluster", "-", "--nodegroups",
                           str(ROOT / "config/examples/catalog.yaml"), "--output-file", str(out)],
                          input=cluster.read_text(), capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["scaleUp"]["gpu-h100-a"] == 8


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("key: [unclosed", "invalid YAML at line"),
    ("{\"items\": [1, 2", "invalid JSON"),
    ("\xff\xfe", "not UTF-8"),
    ("just a string", "no Kubernetes objects"),
])
def test_unreadable_cluster_file_exits_2_with_one_line(tmp_path, content, message):
    path = tmp_path / "cluster.yaml"
    if content is not None:
        path.write_bytes(content.encode("latin-1"))
    proc = run_cli("plan", "--cluster", str(path), "--nodegroups", str(ROOT / "config/examples/catalog.yaml"))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_catalog_entries_are_skipped_with_a_warning(tmp_path):
    cat = tmp_path / "catalog.yaml"
    cat.write_text(yaml.safe_dump({"nodeGroups": [
        {"name": "ok", "instanceType": "m5.2xlarge", "maxSize": 5},
        {"name": "bad-size", "instanceType": "m5.2xlarge", "maxSize": 1, "minSize": 3},
        {"name": "bad-qty", "instanceType": "x", "pricePerHour": 1, "maxSize": 3, "allocatable": {"cpu": "lots"}},
        {"name": "unknown-type", "instanceType": "zz.huge", "maxSize": 3},
        {"name": "ok", "instanceType": "m5.large", "maxSize": 2},
    ]}))
    groups, warnings = load_catalog(cat)
    assert [g.name for g in groups] == ["ok"]
    assert len(warnings) == 4
    assert any("maxSize (1) is below minSize (3)" in w for w in warnings)
    assert any("allocatable" in w and "cpu" in w for w in warnings)
    assert any("duplicate" in w for w in warnings)
    proc = run_cli("plan", "--cluster", str(ROOT / "config/examples/backlog.yaml"), "--nodegroups", str(cat), "-o", "json")
    assert proc.returncode == 0
    assert len(json.loads(proc.stdout)["warnings"]) == 4


def test_catalog_fills_allocatable_and_price_from_the_instance_table():
    groups, warnings = load_catalog(ROOT / "config/examples/catalog.yaml")
    assert not warnings
    p5 = next(g for g in groups if g.instance_type == "p5.48xlarge")
    assert p5.allocatable["nvidia.com/gpu"] == 8 and p5.price_per_hour == pytest.approx(55.04)
    assert p5.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert p5.allocatable["cpu"] == 192000 - 60 - 10 - 10 - 188 * 2.5  # EKS kube-reserved
