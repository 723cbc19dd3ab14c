"""Artifacts of a suite run: property checks, the markdown tables and the PNG plots."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

POLICY_ORDER = (
    "gangscale",
    "gangscale-off",
    "gangscale-gate",
    "ca",
    "ca-atomic",
    "karpenter",
)  # gangscale: observe
# on paper gate mode is the solver's plan (gangscale-off): the paper tables and plots show it once
PAPER_ORDER = tuple(p for p in POLICY_ORDER if p != "gangscale-gate")
BASELINE_NAMES = ("ca", "ca-atomic", "karpenter")
LABELS = {
    "gangscale": "gangscale observe",
    "gangscale-off": "gangscale off",
    "gangscale-gate": "gangscale gate",
}
EPS = 1e-6
# observe and gate mode cost at most 3% over the solver's plan of the same gangs
SAME_SELECTION_SLACK = 0.03


def check_properties(results) -> dict:
    """The suite's claims (docs/benchmarks.md), checked per backlog against every baseline (never tuned, only
    reported)."""
    rows = []
    ratios = []
    for r in results:
        name = r.case.spec.name
        for pol, m in r.metrics.items():
            if m.violations:
                rows.append(
                    {
                        "case": name,
                        "policy": pol,
                        "property": "valid placement",
                        "ok": False,
                        "detail": "; ".join(m.violations[:3]),
                    }
                )
        rows += _observe_rows(name, r.metrics["gangscale"])
        if "gangscale-gate" in r.metrics:
            rows += _gate_rows(name, r.metrics)
        rows += _same_selection_rows(name, r.metrics)
        # the paper comparison with the baselines is the solver's own selection (observe mode promises less:
        # only what the scheduler model starts; compare its model columns instead)
        gs = r.metrics.get("gangscale-off", r.metrics["gangscale"])
        rows.append(
            {
                "case": name,
                "policy": gs.policy,
                "property": "no stranded node",
                "ok": gs.stranded_nodes == 0,
                "detail": f"{gs.stranded_nodes} stranded",
            }
        )
        for pol, m in r.metrics.items():
            if pol.startswith("gangscale"):
                continue
            rows.append(
                {
                    "case": name,
                    "policy": pol,
                    "property": "gangs satisfied >= baseline",
                    "ok": gs.gangs_satisfied >= m.gangs_satisfied,
                    "detail": f"{gs.gangs_satisfied} vs {m.gangs_satisfied}",
                }
            )
            if gs.gangs_satisfied == m.gangs_satisfied and gs.useful_pods <= m.useful_pods:
                rows.append(
                    {
                        "case": name,
                        "policy": pol,
                        "property": "cost <= baseline at equal gangs",
                        "ok": gs.cost <= m.cost + EPS,
                        "detail": f"${gs.cost:,.2f} vs ${m.cost:,.2f}",
                    }
                )
        if gs.cost_ratio is not None:
            ratios.append(gs.cost_ratio)
    failed = [row for row in rows if not row["ok"]]
    return {
        "all_ok": not failed,
        "failed": failed,
        "checked": len(rows),
        "gangscale_median_cost_ratio": statistics.median(ratios) if ratios else None,
        "gangscale_max_cost_ratio": max(ratios) if ratios else None,
        "rows": rows,
    }


def _observe_rows(case: str, gs) -> list[dict]:
    """Observe mode under each profile: promised gangs all start in the model, no new node left empty."""
    rows = [
        {
            "case": case,
            "policy": "gangscale",
            "property": "no stranded node",
            "ok": gs.stranded_nodes == 0,
            "detail": f"{gs.stranded_nodes} stranded",
        }
    ]
    for strategy, r in gs.model.items():
        if r.get("promised_not_started") is None:
            continue
        rows.append(
            {
                "case": case,
                "policy": "gangscale",
                "property": f"promised ⊆ started ({strategy})",
                "ok": r["promised_not_started"] == 0,
                "detail": f"{r['promised_not_started']} of {r['promised']} promised gangs do not start",
            }
        )
        rows.append(
            {
                "case": case,
                "policy": "gangscale",
                "property": f"no empty new node ({strategy})",
                "ok": r["empty_nodes"] == 0,
                "detail": f"{r['empty_nodes']} empty",
            }
        )
    return rows


def _gate_rows(case: str, metrics: dict) -> list[dict]:
    """Gate mode's claims, per profile: every promised gang starts, no bought node stays empty,
    and it starts at least as many gangs as observe mode, the solver's plan and every baseline."""
    rows = []
    for strategy, r in metrics["gangscale-gate"].model.items():
        rows.append(
            {
                "case": case,
                "policy": "gangscale-gate",
                "property": f"promised ⊆ started ({strategy})",
                "ok": r["promised_not_started"] == 0,
                "detail": f"{r['promised_not_started']} of {r['promised']} promised gangs do not start"
                + (f" (e.g. {r['not_started'][0]})" if r.get("not_started") else ""),
            }
        )
        rows.append(
            {
                "case": case,
                "policy": "gangscale-gate",
                "property": f"no empty new node ({strategy})",
                "ok": r["empty_nodes"] == 0,
                "detail": f"{r['empty_nodes']} empty",
            }
        )
        for pol, m in metrics.items():
            other = m.model.get(strategy)
            if pol == "gangscale-gate" or not other:
                continue
            rows.append(
                {
                    "case": case,
                    "policy": pol,
                    "property": f"gate mode starts >= ({strategy})",
                    "ok": r["gangs_started"] >= other["gangs_started"],
                    "detail": f"{r['gangs_started']} vs {other['gangs_started']}",
                }
            )
    return rows


def _same_selection_rows(case: str, metrics: dict) -> list[dict]:
    """The cost bound at the same selection: where observe mode (the default profile's plan) or gate mode (per
    profile, the nodes later passes buy included) satisfies exactly the gangs the solver's own plan satisfies, it
    costs at most SAME_SELECTION_SLACK more than that plan. Observe mode is compared only where the solver's plan is
    what happens, i.e. its gangs all start in the model under the default profile: where they do not (q-mixed), that
    cheaper plan starts fewer gangs, and observe mode's extra nodes are what it takes to start them unpinned."""
    off = metrics.get("gangscale-off")
    if off is None:
        return []
    real = off.model.get("LeastAllocated", {}).get("gangs_started", 0) >= off.gangs_satisfied
    rows = []
    for pol in ("gangscale", "gangscale-gate"):
        m = metrics.get(pol)
        if (
            m is None
            or sorted(m.satisfied) != sorted(off.satisfied)
            or (pol == "gangscale" and not real)
        ):
            continue
        later = (
            {s: r.get("later_cost", 0.0) for s, r in m.model.items()}
            if pol == "gangscale-gate"
            else {"": 0.0}
        )
        for strategy, extra in later.items():
            cost = m.cost + extra
            label = (
                f"cost within {SAME_SELECTION_SLACK:.0%} of the solver's plan at the same gangs"
                + (f" ({strategy})" if strategy else "")
            )
            rows.append(
                {
                    "case": case,
                    "policy": pol,
                    "property": label,
                    "ok": cost <= off.cost * (1 + SAME_SELECTION_SLACK) + EPS,
                    "detail": f"${cost:,.2f} vs ${off.cost:,.2f}",
                }
            )
    return rows


def _fmt_ratio(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _fmt_money(x) -> str:
    return f"{x:,.2f}"


def headline_table(doc: dict) -> str:
    """Per policy, over the whole suite: gangs, useful pods, stranded nodes, cost ratio."""
    agg: dict[str, dict[str, Any]] = {
        p: {
            "gangs": 0,
            "sat": 0,
            "useful": 0,
            "stranded": 0,
            "stranded_cost": 0.0,
            "cost": 0.0,
            "ratios": [],
            "wins": 0,
        }
        for p in PAPER_ORDER
    }
    for case in doc["cases"]:
        for p, m in case["metrics"].items():
            if p not in agg:
                continue
            a = agg[p]
            a["gangs"] += m["gangs"]
            a["sat"] += m["gangs_satisfied"]
            a["useful"] += m["useful_pods"]
            a["stranded"] += m["stranded_nodes"]
            a["stranded_cost"] += m["stranded_cost"]
            a["cost"] += m["cost"]
            if m["cost_ratio"] is not None:
                a["ratios"].append(m["cost_ratio"])
    lines = [
        "| policy | gangs satisfied | useful pods placed | stranded nodes ($/h) | total $/h bought | "
        "median cost / lower bound | worst cost / lower bound |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in PAPER_ORDER:
        a = agg[p]
        med = statistics.median(a["ratios"]) if a["ratios"] else None
        worst = max(a["ratios"]) if a["ratios"] else None
        lines.append(
            f"| {p} | {a['sat']} / {a['gangs']} | {a['useful']:,} | {a['stranded']} "
            f"(${_fmt_money(a['stranded_cost'])}) | ${_fmt_money(a['cost'])} | {_fmt_ratio(med)} | "
            f"{_fmt_ratio(worst)} |"
        )
    return "\n".join(lines)


def case_table(doc: dict) -> str:
    lines = [
        "| backlog | pending pods | gangs | node groups | existing nodes | policy | gangs satisfied | "
        "useful / placed pods | new nodes | $/h | DaemonSets' share $/h | stranded nodes ($/h) | cost / LB | "
        "time s | peak MB |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in doc["cases"]:
        st = case["stats"]
        first = True
        for p in PAPER_ORDER:
            m = case["metrics"][p]
            head = (
                (
                    f"| {case['name']} | {st['pending_pods']:,} | {st['gangs']} | {st['node_groups']} | "
                    f"{st['existing_nodes']:,} "
                )
                if first
                else "| | | | | "
            )
            first = False
            lines.append(
                f"{head}| {p} | {m['gangs_satisfied']} | {m['useful_pods']:,} / {m['pods_placed']:,} | "
                f"{m['new_nodes']:,} | {_fmt_money(m['cost'])} | "
                f"{_fmt_money(m['notes'].get('daemonset_cost', 0.0))} | {m['stranded_nodes']} "
                f"(${_fmt_money(m['stranded_cost'])}) | {_fmt_ratio(m['cost_ratio'])} | {m['seconds']:.2f} | "
                f"{m['peak_mb']:.0f} |"
            )
    return "\n".join(lines)


def timing_table(doc: dict) -> str:
    lines = [
        "| backlog | pending pods | existing nodes | format | runs | median s | min s | max s | "
        "peak MB | target |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for case in doc["cases"]:
        t = case["targets"]
        off_runs = case.get("off_runs") or (
            [case["variant_runs"]["off"]] if "off" in case.get("variant_runs", {}) else []
        )
        off = statistics.median(r["seconds"] for r in off_runs) if off_runs else None
        # the CLI's defaults plan with the solver alone (the timed targets); observe mode adds the scheduler model
        # (its target: at most 2 s more than the solver's plan)
        for fmt, runs in (
            ("JSON, default (model off)", off_runs if t["seconds"] else []),
            ("JSON, observe mode", case["gangscale_runs"]),
            ("YAML, observe mode", case["yaml_runs"]),
        ):
            if not runs or (fmt == "JSON, observe mode" and len(runs) < 2 and not t["seconds"]):
                continue
            secs = [r["seconds"] for r in runs]
            target = ""
            if fmt.startswith("JSON, default") and t["seconds"]:
                ok = statistics.median(secs) <= t["seconds"] and (
                    t["peak_mb"] is None or max(r["peak_mb"] for r in runs) <= t["peak_mb"]
                )
                target = (
                    f"≤ {t['seconds']:g} s"
                    + (f", < {t['peak_mb']:.0f} MB" if t["peak_mb"] else "")
                    + (": met" if ok else ": **missed**")
                )
            elif fmt == "JSON, observe mode" and t["seconds"] and off is not None:
                ok = statistics.median(secs) <= off + 2.0
                target = f"≤ model off + 2 s ({off + 2.0:.2f} s)" + (
                    ": met" if ok else ": **missed**"
                )
            lines.append(
                f"| {case['name']} | {case['stats']['pending_pods']:,} | "
                f"{case['stats']['existing_nodes']:,} | {fmt} | {len(runs)} | "
                f"{statistics.median(secs):.2f} | {min(secs):.2f} | {max(secs):.2f} | "
                f"{max(r['peak_mb'] for r in runs):.0f} | {target} |"
            )
    return "\n".join(lines)


def _model_cell(m: dict, strategy: str, key: str) -> str:
    r = m.get("model", {}).get(strategy)
    if not r:
        return "n/a"
    v = r.get(key)
    if key == "promised" and v is None:
        v = m[
            "gangs_satisfied"
        ]  # a policy without promises of its own: the gangs its placement satisfies
    if key == "empty_nodes" and v is not None and r.get("empty_cost") is not None:
        return f"{v} (${_fmt_money(r['empty_cost'])})"
    if v is None:
        return "n/a"
    return f"{v:,.2f}" if isinstance(v, float) else str(v)


MODEL_KEYS = ("promised", "gangs_started", "empty_nodes", "cost_per_started_gang")


def model_table(doc: dict) -> str:
    """Per backlog and policy: what kube-scheduler's model does with the policy's nodes (benchmarks/evaluate.py,
    benchmarks/gatemode.py), under each profile."""
    head = " | ".join(
        f"{k} ({s})" if k == "promised" else k
        for s in ("LeastAllocated", "MostAllocated")
        for k in ("promised", "started", "empty nodes ($/h)", "$/h per started gang")
    )
    lines = [f"| backlog | policy | {head} |", "|---|---|" + "---:|" * 8]
    for case in doc["cases"]:
        first = True
        for p in POLICY_ORDER:
            m = case["metrics"].get(p)
            if not m or not m.get("model"):
                continue
            head = f"| {case['name']} " if first else "| "
            first = False
            cells = [
                _model_cell(m, s, k)
                for s in ("LeastAllocated", "MostAllocated")
                for k in MODEL_KEYS
            ]
            lines.append(f"{head}| {LABELS.get(p, p)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model_totals(doc: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Per profile and policy, summed over the backlogs the model ran on: promised, started, empty nodes, $/h."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for case in doc["cases"]:
        for p in POLICY_ORDER:
            m = case["metrics"].get(p)
            for strategy, r in (m or {}).get("model", {}).items():
                a = out.setdefault(strategy, {}).setdefault(
                    p,
                    {
                        "gangs": 0,
                        "promised": 0,
                        "started": 0,
                        "empty": 0,
                        "empty_cost": 0.0,
                        "cost": 0.0,
                    },
                )
                a["gangs"] += r["gangs"]
                a["promised"] += (
                    r["promised"] if r.get("promised") is not None else m["gangs_satisfied"]
                )
                a["started"] += r["gangs_started"]
                a["empty"] += r["empty_nodes"]
                a["empty_cost"] += r.get("empty_cost") or 0.0
                a["cost"] += (r["cost_per_started_gang"] or 0.0) * r["gangs_started"]
    return out


def model_headline(doc: dict) -> str:
    """The headline of docs/results.md: per profile and policy, what really starts over the whole suite."""
    lines = [
        "| profile | policy | gangs promised | gangs started | bought nodes left empty ($/h) | "
        "$/h per started gang |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for strategy, per in model_totals(doc).items():
        for p, a in per.items():
            per_gang = a["cost"] / a["started"] if a["started"] else None
            lines.append(
                f"| {strategy} | {LABELS.get(p, p)} | {a['promised']:,} | {a['started']:,} / {a['gangs']:,} "
                f"| {a['empty']:,} (${_fmt_money(a['empty_cost'])}) | "
                f"{'n/a' if per_gang is None else _fmt_money(per_gang)} |"
            )
    return "\n".join(lines)


def quality_table(doc: dict) -> str:
    """Plan quality: gangs, the gang bound and the cost gap at the default flags (median run) and at the long
    limit."""
    lines = [
        "| backlog | run | median s | max RSS MB | gangs started | gang upper bound | gangs vs long run | $/h | "
        "cost bound $/h | cost gap | status | load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for case in doc["cases"]:
        long_runs = case.get("long_runs") or []
        # the CLI's defaults: the solver alone
        default_runs = case.get("off_runs") or case["gangscale_runs"]
        if not long_runs or not default_runs:
            continue
        ref = long_runs[0].get("gangs_started") or 0
        runs = sorted(default_runs, key=lambda r: r["seconds"])
        label = (
            "default flags"
            if case.get("default_flags")
            else f"--time-limit {case.get('time_limit')}"
        )
        for name, group in (
            (label, runs),
            (
                "long: " + long_runs[0]["command"].split("--time-limit ")[-1].split()[0] + " s",
                long_runs,
            ),
        ):
            r = group[len(group) // 2]
            gangs = r.get("gangs_started")
            rel = f"{(gangs - ref) / ref:+.1%}" if ref and gangs is not None else "n/a"
            gap = r.get("gap")
            lines.append(
                f"| {case['name']} | {name} | {statistics.median(x['seconds'] for x in group):.2f} | "
                f"{max(x['peak_mb'] for x in group):.0f} | {gangs} | "
                f"{r.get('gangs_upper_bound')} | {rel} | {_fmt_money(r.get('cost') or 0.0)} | "
                f"{_fmt_money(r.get('cost_bound') or 0.0)} | "
                f"{'n/a' if gap is None else f'{gap:.2%}'} | {r.get('status')} | {r.get('load_avg')} |"
            )
    return "\n".join(lines)


def markdown_report(doc: dict) -> str:
    checks = doc["checks"]
    out = [
        f"# gangscale benchmark: `{doc['suite']}` suite",
        "",
        f"Command: `{doc['command']}` — {doc['seconds']:.0f} s on {doc['environment']['cpus']} cores "
        f"(Python {doc['environment']['python']}, OR-Tools {doc['environment']['ortools']}); "
        f"gangscale `--time-limit {doc['config']['time_limit']:g} --relative-gap "
        f"{doc['config']['relative_gap']:g}`.",
        "",
        "## Headline (all backlogs)",
        "",
        headline_table(doc),
        "",
        f"Properties checked: {checks['checked']}, failed: {len(checks['failed'])}. gangscale median cost / "
        f"lower bound: {_fmt_ratio(checks['gangscale_median_cost_ratio'])}.",
        "",
    ]
    if checks["failed"]:
        out += (
            ["### Failed properties", ""]
            + [
                f"- {f['case']} vs {f['policy']}: {f['property']} ({f['detail']})"
                for f in checks["failed"]
            ]
            + [""]
        )
    timing = timing_table(doc)
    if timing.count("\n") > 1:
        out += ["## Whole-process timing of `gangscale plan`", "", timing, ""]
    quality = quality_table(doc)
    if quality.count("\n") > 1:
        out += ["## Gangs and cost at the default flags and at the long limit", "", quality, ""]
    models = model_table(doc)
    if models.count("\n") > 1:
        out += [
            "## What really starts (gangscale.scheduling model, all backlogs it ran on)",
            "",
            model_headline(doc),
            "",
        ]
    out += [
        "## Per backlog",
        "",
        "\"DaemonSets' share\": of the new nodes' bill, what their DaemonSet pods' room "
        "costs (per node, its price times the larger of the cpu and memory shares they take; "
        "`--daemonsets off` runs the backlogs without them).",
        "",
        case_table(doc),
        "",
    ]
    if models.count("\n") > 1:
        out += [
            "## What the scheduler does with the nodes (gangscale.scheduling model)",
            "",
            "Every policy's nodes (existing + upcoming + bought) and every pending gang, placed by the model "
            "of kube-scheduler in queue order (gate mode: its own plan, the scheduler's queue planned first; "
            "ungrouped pods first, then the plan's gangs "
            "released by gates.release, each pod narrowed to its node, deferred gangs kept gated, gangs "
            'whose room ungated pods took planned again: benchmarks/gatemode.py). "promised": for '
            "gangscale the gangs its plan starts, for a "
            "baseline the gangs its own placement satisfies.",
            "",
            models,
            "",
        ]
    return "\n".join(out)


def plot_results(doc: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = {
        "gangscale": "o",
        "gangscale-off": "v",
        "gangscale-gate": "P",
        "ca": "s",
        "ca-atomic": "^",
        "karpenter": "D",
    }
    colors = {
        "gangscale": "#1b7837",
        "gangscale-off": "#7fbf7b",
        "gangscale-gate": "#00441b",
        "ca": "#b2182b",
        "ca-atomic": "#ef8a62",
        "karpenter": "#2166ac",
    }
    paths = []
    specs = [
        (
            "cost_ratio.png",
            "cost_ratio",
            "cost / proven lower bound (own placed pods)",
            False,
            "Cost against a proven lower bound",
        ),
        (
            "time.png",
            "seconds",
            "wall time (s): gangscale = whole process, baselines = planning only",
            True,
            "Planning time",
        ),
        ("gangs.png", None, "gangs satisfied (fraction)", False, "Whole gangs satisfied"),
        (
            "stranded.png",
            "stranded_cost",
            "stranded nodes' cost ($/h)",
            False,
            "Cost of stranded nodes",
        ),
    ]
    cases = doc["cases"]
    for fname, key, ylabel, logy, title in specs:
        fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
        for i, p in enumerate(PAPER_ORDER):
            xs, ys = [], []
            for c in cases:
                m = c["metrics"][p]
                if key is None:
                    y = m["gangs_satisfied"] / m["gangs"] if m["gangs"] else None
                else:
                    y = m[key]
                if y is None:
                    continue
                # a small horizontal offset per policy keeps equal values visible
                xs.append(c["stats"]["pending_pods"] * (1.0 + 0.06 * (i - 1.5)))
                ys.append(y)
            ax.scatter(
                xs,
                ys,
                label=p,
                marker=markers[p],
                color=colors[p],
                s=42,
                alpha=0.85,
                edgecolors="black",
                linewidths=0.4,
            )
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        if key == "cost_ratio":
            ax.axhline(1.02, color="grey", linestyle="--", linewidth=0.8)
            ax.text(ax.get_xlim()[0] * 1.05, 1.02, " +2%", va="bottom", fontsize=8, color="grey")
        if key == "seconds":
            for c in cases:
                t = c["targets"]["seconds"]
                if t:
                    ax.plot(
                        [c["stats"]["pending_pods"]], [t], marker="_", markersize=30, color="grey"
                    )
                    ax.annotate(
                        f"target {t:g}s",
                        (c["stats"]["pending_pods"], t),
                        textcoords="offset points",
                        xytext=(8, 4),
                        fontsize=8,
                        color="grey",
                    )
        ax.set_xlabel("pending pods in the backlog")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} — {doc['suite']} suite")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend()
        fig.tight_layout()
        path = out / fname
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    if any(c["metrics"].get("gangscale", {}).get("model") for c in cases):
        paths.append(_plot_model(doc, out, markers, colors))
        paths.append(_plot_started_empty(doc, out, colors))
    return paths


def _plot_model(doc: dict, out: Path, markers: dict, colors: dict) -> Path:
    """Promised vs started gangs under both scheduler profiles, per backlog and policy."""
    import matplotlib.pyplot as plt

    cases = [c for c in doc["cases"] if c["metrics"]["gangscale"].get("model")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), dpi=110, sharey=True)
    for ax, strategy in zip(axes, ("LeastAllocated", "MostAllocated"), strict=True):
        for i, p in enumerate(POLICY_ORDER):
            xs, ys = [], []
            for k, c in enumerate(cases):
                m = c["metrics"].get(p) or {}
                r = m.get("model", {}).get(strategy)
                if not r or not m["gangs"]:
                    continue
                xs.append(k + 0.15 * (i - 1.5))
                ys.append(r["gangs_started"] / m["gangs"])
            ax.scatter(
                xs,
                ys,
                label=p,
                marker=markers[p],
                color=colors[p],
                s=42,
                alpha=0.85,
                edgecolors="black",
                linewidths=0.4,
            )
        ax.set_xticks(
            range(len(cases)), [c["name"] for c in cases], rotation=45, ha="right", fontsize=8
        )
        ax.set_title(f"gangs the scheduler starts — {strategy}")
        ax.grid(True, alpha=0.25)
    axes[0].set_ylabel("gangs started (fraction of gangs)")
    axes[0].legend()
    fig.tight_layout()
    path = out / "model_started.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _plot_started_empty(doc: dict, out: Path, colors: dict) -> Path:
    """Gangs the scheduler model really starts (top) and bought nodes it leaves empty (bottom), per backlog and
    policy, LeastAllocated left and MostAllocated right: one bar per policy."""
    import matplotlib.pyplot as plt

    cases = [c for c in doc["cases"] if c["metrics"]["gangscale"].get("model")]
    pols = [p for p in POLICY_ORDER if any(c["metrics"].get(p, {}).get("model") for c in cases)]
    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), dpi=110, sharex=True, sharey="row")
    width = 0.8 / max(1, len(pols))
    for col, strategy in enumerate(("LeastAllocated", "MostAllocated")):
        for i, p in enumerate(pols):
            started, empty, xs = [], [], []
            for k, c in enumerate(cases):
                m = c["metrics"].get(p) or {}
                r = m.get("model", {}).get(strategy)
                if not r or not r["gangs"]:
                    continue
                xs.append(k - 0.4 + width * (i + 0.5))
                started.append(r["gangs_started"] / r["gangs"])
                empty.append(r["empty_nodes"])
            for row, ys in ((0, started), (1, empty)):
                axes[row][col].bar(
                    xs,
                    ys,
                    width=width,
                    label=LABELS.get(p, p),
                    color=colors[p],
                    edgecolor="black",
                    linewidth=0.3,
                )
        axes[0][col].set_title(f"{strategy}: gangs that really start")
        axes[1][col].set_title(f"{strategy}: bought nodes left empty")
        axes[1][col].set_xticks(
            range(len(cases)), [c["name"] for c in cases], rotation=45, ha="right", fontsize=8
        )
        for row in (0, 1):
            axes[row][col].grid(True, axis="y", alpha=0.25)
    axes[0][0].set_ylabel("gangs started (fraction of gangs)")
    axes[1][0].set_ylabel("empty nodes")
    axes[1][0].set_yscale("symlog", linthresh=1)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(pols), fontsize=8)
    fig.suptitle(
        f"What the kube-scheduler model does with each policy's nodes — {doc['suite']} suite"
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = out / "model_started_empty.png"
    fig.savefig(path)
    plt.close(fig)
    return path
