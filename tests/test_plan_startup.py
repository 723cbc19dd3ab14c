"""The default `gangscale plan` process (issue 11: ≤ 2 s whole at 10k pods): it loads only what planning needs
and plans without the cyclic garbage collector. Checked as modules loaded and collector state, never as time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ["--cluster", str(ROOT / "config/examples/backlog.yaml"), "--nodegroups", str(ROOT / "config/examples/catalog.yaml")]

_PROBE = """
import json, sys
from gangscale.cli import main
code = main(sys.argv[1:])
heavy = ("gangscale.realize", "gangscale.scheduling", "kubernetes", "boto3", "botocore", "ortools.sat.python.cp_model",
         "pandas", "subprocess",  # subprocess: only `gangscale bench` starts a child
         "pydantic")  # the plan and a plain catalog are read and written without it (~0.2 s: plan_schema, catalog)
print(json.dumps({"code": code, "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


def _probe(*args: str, tmp_path: Path) -> dict:
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-c", _PROBE, "plan", *EXAMPLE, "-o", "json", "--output-file", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_solver_plan_loads_neither_the_scheduler_model_nor_a_cloud_or_kube_client(tmp_path):
    probe = _probe("--mode", "off", tmp_path=tmp_path)
    # the bundled example is small enough for CP-SAT, so cp_model may load (when the greedy leaves a gap to close),
    # and with it the pandas it imports and the subprocess pandas imports; nothing else
    assert probe["code"] == 0
    with_cp_sat = {"ortools.sat.python.cp_model", "pandas", "subprocess"}
    assert set(probe["loaded"]) <= with_cp_sat
    assert "ortools.sat.python.cp_model" in probe["loaded"] or not probe["loaded"]
    assert json.loads((tmp_path / "plan.json").read_text())["scheduler"]["mode"] == "off"


def test_a_plan_that_never_runs_cp_sat_never_imports_it_or_pandas(tmp_path):
    # At 10,000 pods and more the default budget returns the greedy plan with LP bounds (docs/benchmarks.md);
    # a budget too short for any CP-SAT model takes the same path here. OR-Tools' cp_model imports pandas
    # (0.3-0.5 s of a 2 s plan), so it loads only when a CP-SAT model is solved.
    probe = _probe("--time-limit", "0.05", "--mode", "off", tmp_path=tmp_path)
    assert probe == {"code": 0, "loaded": []}
    solver = json.loads((tmp_path / "plan.json").read_text())["solver"]
    assert solver["greedyOnly"] is True


def test_the_default_gate_mode_plan_loads_the_scheduler_model_only_to_place_the_ungated_queue_first(tmp_path):
    """Gate mode (the default) places the pods nobody gates first where the scheduler puts them on the Ready nodes:
    the example has both, so the model loads; a cluster with no node has nothing to place first and stays light."""
    probe = _probe(tmp_path=tmp_path)
    assert "gangscale.scheduling" in probe["loaded"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["mode"] == "gate" and plan["scheduler"]["mode"] == "off"
    from gangscale.loader import read_objects

    nodeless = tmp_path / "nodeless.json"
    nodeless.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        o for o in read_objects(ROOT / "config/examples/backlog.yaml") if o.get("kind") != "Node"]}))
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-c", _PROBE, "plan", "--cluster", str(nodeless), "--nodegroups",
                           str(ROOT / "config/examples/catalog.yaml"), "-o", "json", "--output-file", str(out),
                           "--time-limit", "0.05"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"code": 0, "loaded": []}


def test_observe_mode_still_loads_the_scheduler_model_and_checks_the_plan(tmp_path):
    probe = _probe("--scheduler-model", "observe", tmp_path=tmp_path)
    assert "gangscale.realize" in probe["loaded"]
    assert json.loads((tmp_path / "plan.json").read_text())["scheduler"]["mode"] == "observe"


_GC_PROBE = """
import gc, json, sys
import gangscale.planner
from gangscale.cli import main
seen = []
make_plan = gangscale.planner.make_plan
gangscale.planner.make_plan = lambda *a, **k: (seen.append(gc.isenabled()), make_plan(*a, **k))[1]
code = main(sys.argv[1:])
print(json.dumps({"code": code, "collector_while_planning": seen, "enabled_after": gc.isenabled()}))
"""


def test_plan_runs_without_the_cyclic_collector_and_gives_it_back(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _GC_PROBE, "plan", *EXAMPLE, "-o", "json", "--output-file",
                           str(tmp_path / "plan.json")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "code": 0, "collector_while_planning": [False], "enabled_after": True}


_EXIT_PROBE = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("interpreter-teardown\\n"))
from gangscale.cli import main
if sys.argv[1] == "program":
    sys.argv[1:2] = []
    code = main()  # as `gangscale plan` / `python -m gangscale plan` call it
else:
    code = main(sys.argv[2:])  # an in-process caller
sys.stderr.write(f"main-returned {code}\\n")
"""


def _exit_probe(how: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _EXIT_PROBE, how, "plan", *EXAMPLE, "-o", "json", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_plan_run_as_a_program_ends_once_its_output_is_flushed_without_the_interpreter_teardown():
    proc = _exit_probe("program")  # stdout is a pipe: block-buffered, so only the flush gets the plan out
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["solver"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert "main-returned" not in proc.stderr and "interpreter-teardown" not in proc.stderr


def test_main_with_arguments_returns_so_an_in_process_caller_keeps_its_process():
    proc = _exit_probe("caller")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["solver"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert proc.stderr.splitlines()[-2:] == ["main-returned 0", "interpreter-teardown"]


def test_a_plan_that_fails_to_read_its_input_still_exits_2_the_usual_way():
    proc = _exit_probe("program", "--cluster", "/nonexistent/cluster.json")
    assert "no such file" in proc.stderr and "main-returned 2" in proc.stderr
