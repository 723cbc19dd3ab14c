"""The solver: problem reduction, greedy hint, packing patterns, CP-SAT model, lower bound.

Invariant: nothing here imports Kubernetes, boto3, the controller, the cloud adapters or
the scheduler model. OR-Tools' `cp_model` imports pandas (~0.3 s, a sixth of a 10k-pod plan)
only for its pandas-series helpers, which gangscale never calls: the solver modules take it from
`cp_model_module()`, which loads it against a placeholder pandas, so the plan path imports no
pandas. Commands that never solve (`check`, `dump`, `run`'s parser, `bench`) do not
import this package at all: `gangscale/cli.py` imports the planner only inside `plan`.
"""

from __future__ import annotations

import sys
import types
from types import ModuleType

_CP_MODEL = "ortools.sat.python.cp_model"


def cp_model_module() -> ModuleType:
    """OR-Tools' `cp_model`, imported without pandas when pandas is not loaded yet."""
    _load_cp_model_without_pandas()
    return __import__(_CP_MODEL, fromlist=["CpModel"])


def _load_cp_model_without_pandas() -> None:
    """Import `cp_model` with a placeholder `pandas` (only its `Index`/`Series` names, which cp_model reads at
    import), then remove the placeholder so a later real `import pandas` works as ever. Pandas already loaded,
    or any failure: the ordinary import, with nothing of the attempt left behind."""
    if "pandas" in sys.modules or _CP_MODEL in sys.modules:
        return
    stub = types.ModuleType("pandas", "placeholder while OR-Tools' cp_model imports (gangscale.solver)")
    stub.Index = type("Index", (), {})  # type: ignore[attr-defined]
    stub.Series = type("Series", (), {})  # type: ignore[attr-defined]
    sys.modules["pandas"] = stub
    try:
        __import__(_CP_MODEL)
    except Exception:  # pragma: no cover - an OR-Tools release that needs more of pandas at import
        sys.modules.pop(_CP_MODEL, None)
    finally:
        if sys.modules.get("pandas") is stub:
            del sys.modules["pandas"]

