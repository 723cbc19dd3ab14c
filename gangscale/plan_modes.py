"""`gangscale plan --mode`: plan as the controller does in one of its modes.

- `gate` (the controller's default: `gateMode: opt-out`): every gang pod the webhook would gate carries
  `gangscale.io/capacity` (a pod linked to a group, outside the system namespaces, the namespaces labelled
  `gangscale.io/gate-mode=false` and the pods annotated so); the scheduler's queue (every other pod) is
  placed first where the scheduler model puts it on the Ready nodes (`gates.scheduled_first`), and the
  solver plans the gangs on what is left. The controller releases each such gang narrowed to its
  planned nodes (KEP-3521), so the solver's plan is what happens: no model check is needed.
- `observe` (`gateMode: off`, `schedulerModel: observe`): the plan is checked and repaired against the
  scheduler model, and promises only what it starts.
- `off` (`schedulerModel: off`): the solver's plan as is, as if the scheduler followed it.

The default and the parser half import nothing heavy (cli.py builds every parser at start-up).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from .loader import InputError
from .model import API_NONE
from .parse import CAPACITY_GATE, SYSTEM_NAMESPACES

if TYPE_CHECKING:  # the scheduling package is imported only when the queue needs placing
    from .model import Gang
    from .scheduling import SchedulerConfig
    from .snapshot import ClusterSnapshot


class PlanMode(str, Enum):
    GATE = "gate"
    OBSERVE = "observe"
    OFF = "off"


# the controller's default mode: ControllerConfig's gateMode opt-out gates every gang pod (tests/test_plan_modes.py
# keeps the two in step; controller/config.py is not imported here: pydantic costs the parser ~0.1 s)
DEFAULT_MODE = PlanMode.GATE
MODES = tuple(m.value for m in PlanMode)
CONTROLLER_GATE_MODE = "opt-out"  # ControllerConfig's default gateMode, which DEFAULT_MODE plans as
# controller/gates.py's opt-in/opt-out key (gates imports the model)
GATE_MODE_KEY = "gangscale.io/gate-mode"
SKIPPED = frozenset({*SYSTEM_NAMESPACES, "gangscale-system"})  # and the default stateNamespace


def resolve_mode(mode: str | None, scheduler_model: str | None) -> PlanMode:
    """`--mode` and the older `--scheduler-model` as one mode: `--scheduler-model` alone keeps its meaning (observe,
    or off: the solver's plan); neither: the controller's default; both must agree."""
    if mode is None:
        return DEFAULT_MODE if scheduler_model is None else PlanMode(scheduler_model)
    chosen = PlanMode(mode)
    # gate mode plans with the solver alone (the model only places the queue first): it agrees with `off`
    agrees = "observe" if chosen is PlanMode.OBSERVE else "off"
    if scheduler_model is not None and scheduler_model != agrees:
        raise InputError(f"--scheduler-model {scheduler_model} contradicts --mode {chosen.value}")
    return chosen


def resolve_plan_mode(args: argparse.Namespace) -> None:
    """`args.mode` as a PlanMode and `args.scheduler_model` as the mode plans with (gate: the solver alone)."""
    if isinstance(getattr(args, "mode", None), PlanMode):
        return  # resolved already
    args.mode = resolve_mode(getattr(args, "mode", None), getattr(args, "scheduler_model", None))
    args.scheduler_model = "observe" if args.mode is PlanMode.OBSERVE else "off"


def gate_mode_prepare(args: argparse.Namespace, objects: list[Any]) -> Callable[[Any], Any] | None:
    """The snapshot step of `--mode gate` (`gate_mode_snapshot`), or None in another mode."""
    if getattr(args, "mode", None) is not PlanMode.GATE:
        return None
    path = getattr(args, "scheduler_config", None)
    config = None  # upstream kube-scheduler defaults
    if path:  # a bad file: InputError, exit 2
        from .realize import scheduler_model_from

        config = scheduler_model_from(path, "observe").config
    return lambda snap: gate_mode_snapshot(snap, objects, config)


def gate_mode_snapshot(
    snap: ClusterSnapshot, objects: Iterable[Any], scheduler_config: SchedulerConfig | None
) -> ClusterSnapshot:
    """`snap` as gate mode plans it: the gang pods the webhook gates carry the gate, the queue placed first (the
    scheduler model is imported only when the queue has a pod and the cluster a Ready node to place it on)."""
    out = _opted_out(objects)
    gated = [
        g if g.namespace in out or g.namespace in SKIPPED or g.api == API_NONE else _gated(g)
        for g in snap.gangs
    ]
    snap = replace(snap, gangs=gated)
    ungated = any(not p.scheduling_gates for g in snap.solvable for p in g.pending)
    if not ungated or all(v.upcoming for v in snap.nodes):
        return snap  # nothing for the scheduler to place before the gangs
    from .controller.gates import holds, namespace_labels, scheduled_first

    labels = namespace_labels(o for o in objects if isinstance(o, Mapping))
    return scheduled_first(
        snap, lambda g: holds(g, CONTROLLER_GATE_MODE, labels), config=scheduler_config
    )


def _opted_out(objects: Iterable[Any]) -> set[str]:
    """Namespaces labelled `gangscale.io/gate-mode: "false"` among the input's Namespace objects."""
    out = set()
    for o in objects:
        if isinstance(o, Mapping) and o.get("kind") == "Namespace":
            meta = _mapping(o.get("metadata"))
            if str(_mapping(meta.get("labels")).get(GATE_MODE_KEY, "")).strip().lower() == "false":
                out.add(str(meta.get("name")))
    return out


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _gated(g: Gang) -> Gang:
    """`g` as the mutating hook admits it: each pending pod gets the gate unless it opts out or carries one already
    (admission.gate_patch)."""
    pods = tuple(
        p
        if p.scheduling_gates
        or str(p.annotations.get(GATE_MODE_KEY, "")).strip().lower() == "false"
        else replace(p, scheduling_gates=(CAPACITY_GATE,))
        for p in g.pending
    )
    return replace(g, pending=pods)
