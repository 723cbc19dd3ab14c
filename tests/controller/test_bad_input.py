"""`gangscale run` refuses a bad --simulated-state or a hostile config file in one line, exit 2 (issue 16 items 6, 7).

The real process, as the controller runs: run sets up logging for the whole interpreter. The kubeconfig
points at a closed loopback port; nothing is contacted before the refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CATALOG = str(ROOT / "tests/fixtures/kube/catalog.yaml")


def kubeconfig(tmp: Path) -> str:
    path = tmp / "kc"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return str(path)


def run(tmp: Path, *args: str) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "gangscale", "run", "--kubeconfig", kubeconfig(tmp), *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc.returncode, [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("content", ["[1, 2]", '"state"', '{"groups": [1]}', '{"seq": 1e400}'])
def test_a_simulated_state_file_that_is_not_a_state_map_stops_run_with_one_line_and_exit_2(content, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(content)
    code, lines = run(tmp_path, "--provider", "simulated", "--nodegroups", CATALOG, "--simulated-state", str(state))
    assert code == 2 and len(lines) == 1 and "not a simulated-cloud state file" in lines[0], lines


def test_an_alias_bomb_in_the_controller_config_is_refused_in_one_line(tmp_path):
    anchors = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    anchors += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("\n".join(anchors) + "\nmode: dry-run\n")
    assert cfg.stat().st_size < 800
    code, lines = run(tmp_path, "--config", str(cfg), "--provider", "simulated", "--nodegroups", CATALOG)
    assert code == 2 and len(lines) == 1 and "YAML aliases would add more than" in lines[0], lines


def test_a_controller_config_nested_past_the_loader_depth_is_refused_in_one_line(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("namespaceCaps: " + "[" * 1000 + "]" * 1000 + "\n")
    code, lines = run(tmp_path, "--config", str(cfg), "--provider", "simulated", "--nodegroups", CATALOG)
    assert code == 2 and len(lines) == 1 and "nest" in lines[0], lines


def test_a_simulated_cloud_seeded_with_millions_of_instances_stops_run_with_one_line_and_exit_2(tmp_path):
    catalog = tmp_path / "catalog.yaml"  # a valid catalog (sizes up to 2**31-1): one record per instance would not fit
    catalog.write_text("nodeGroups:\n- {name: g, instanceType: m5.large, currentSize: 2147483647, maxSize: 2147483647}\n")
    code, lines = run(tmp_path, "--provider", "simulated", "--nodegroups", str(catalog))
    assert code == 2 and len(lines) == 1, lines
    assert "node group g: currentSize 2,147,483,647 is more instances than the simulated cloud seeds" in lines[0]
