"""Every numeric flag of every command refuses nan, inf, negative and huge values at parse time (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cli import main as bench_main
from gangscale import argtypes
from gangscale.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ["--cluster", str(ROOT / "config/examples/backlog.yaml"), "--nodegroups", str(ROOT / "config/examples/catalog.yaml")]

# (argv before the flag, flag, hostile values)
SECONDS = ["nan", "inf", "-inf", "-1", "0", "1e308", "ten"]
FLAGS = [
    (["plan", *EXAMPLE], "--time-limit", SECONDS),
    (["plan", *EXAMPLE], "--relative-gap", ["nan", "inf", "-0.1", "1.5", "x"]),
    (["plan", *EXAMPLE], "--workers", ["5000", "-1", "2.5", "nan", "١٢"]),
    (["plan", *EXAMPLE], "--seed", ["99999999999999999999", "-1", "2147483648", "1e3", "١٢"]),
    (["plan", *EXAMPLE], "--request-timeout", SECONDS),
    (["check"], "--request-timeout", SECONDS),
    (["dump"], "--request-timeout", SECONDS),
]
BENCH_FLAGS = [
    (["run", "--quick"], "--time-limit", SECONDS),
    (["run", "--quick"], "--relative-gap", ["nan", "inf", "-1", "2"]),
    (["run", "--quick"], "--bound-seconds", SECONDS),
    (["run", "--quick"], "--timing-runs", ["0", "-1", "1000000000000", "nan"]),
]


def cases(table):
    return [pytest.param(argv, flag, v, id=f"{argv[0]} {flag} {v}") for argv, flag, values in table for v in values]


@pytest.mark.parametrize("argv, flag, value", cases(FLAGS))
def test_a_hostile_number_for_a_gangscale_flag_exits_2_naming_the_flag(argv, flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, f"{flag}={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}: {value!r} is " in err


@pytest.mark.parametrize("argv, flag, value", cases(BENCH_FLAGS))
def test_a_hostile_number_for_a_bench_flag_exits_2_naming_the_flag(argv, flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_main([*argv, f"{flag}={value}"])  # what `gangscale bench` runs (in a child process)
    assert exc.value.code == 2
    assert f"argument {flag}: {value!r} is " in capsys.readouterr().err


def test_gangscale_bench_runs_the_benchmark_cli_in_a_child_and_passes_its_exit_code_and_errors_on(capfd):
    assert main(["bench", "run", "--quick", "--time-limit=nan"]) == 2
    assert "argument --time-limit: 'nan' is " in capfd.readouterr().err
    assert main(["bench", "list", "--quick"]) == 0
    assert "pods=" in capfd.readouterr().out


def test_the_extreme_valid_values_are_accepted():
    args = build_parser().parse_args(["plan", *EXAMPLE, "--time-limit", "0.5", "--workers", str(argtypes.MAX_WORKERS),
                                      "--seed", str(argtypes.MAX_SEED), "--relative-gap", "0", "--request-timeout", "1"])
    assert (args.time_limit, args.workers, args.seed, args.relative_gap) == (0.5, 256, 2**31 - 1, 0.0)
    assert build_parser().parse_args(["plan", *EXAMPLE]).workers == 0  # the default: one per core


@pytest.mark.parametrize("content", ["[1, 2]", '"state"', '{"groups": [1]}', '{"seq": 1e400}'])
def test_a_simulated_state_file_that_is_not_a_map_exits_2_with_one_line(content, tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text(content)
    code = main(["plan", *EXAMPLE, "--provider", "simulated", "--simulated-state", str(state), "-o", "json",
                 "--time-limit", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not a simulated-cloud state file" in err, err


def test_a_simulated_cloud_seeded_with_a_million_instances_exits_2_with_one_line_instead_of_building_them(
        tmp_path, capsys):
    catalog = tmp_path / "catalog.yaml"  # 43 s and 890 MB (and a 78 MB state file) before
    catalog.write_text("nodeGroups:\n- {name: g, instanceType: m5.large, currentSize: 1000000, maxSize: 1000000}\n")
    code = main(["plan", "--cluster", EXAMPLE[1], "--nodegroups", str(catalog), "--provider", "simulated",
                 "--simulated-state", str(tmp_path / "state.json"), "-o", "json", "--time-limit", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "currentSize 1,000,000 is more instances than the simulated" in err
    assert not (tmp_path / "state.json").exists()


def test_a_plan_with_a_bounded_seed_and_workers_still_runs(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", *EXAMPLE, "--seed", str(argtypes.MAX_SEED), "--workers", "1", "--time-limit", "3",
                 "-o", "json", "--output-file", str(out)]) == 0
    assert json.loads(out.read_text())["gangs"]


@pytest.mark.parametrize("line", ["resyncSeconds: .inf", "batchWindowSeconds: .nan", "solverTimeLimitSeconds: .inf",
                                  "defaultNamespaceCap: {maxDollarsPerHour: .inf}"])
def test_a_controller_config_with_an_infinite_or_nan_number_is_refused_naming_the_field(line, tmp_path):
    from gangscale.controller.config import load_config
    from gangscale.loader import InputError

    cfg = tmp_path / "config.yaml"
    cfg.write_text(line + "\n")
    with pytest.raises(InputError, match="finite number"):
        load_config(cfg)
