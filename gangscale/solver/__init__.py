"""The solver: problem reduction, greedy hint, packing patterns, CP-SAT model, lower bound.

Importing OR-Tools' `cp_model` also imports pandas (~0.3 s, a sixth of a
10,000-pod plan) although only its pandas-indexed helpers (`*_series`,
`values()`) use it and gangscale calls none of them. So `cp_model` is
imported here with a stand-in `pandas` module and then pointed at a proxy
that imports the real pandas the first time anything touches it. If anything
about that fails, the normal import happens instead.
"""

from __future__ import annotations

import sys
import types


class _LazyPandas(types.ModuleType):
    def __getattr__(self, name: str):
        import pandas

        return getattr(pandas, name)


def _import_cp_model_without_pandas() -> None:
    if "ortools.sat.python.cp_model" in sys.modules or "pandas" in sys.modules:
        return
    stub = types.ModuleType("pandas")
    stub.Index = type("Index", (), {})  # only used in cp_model's type aliases at import time
    stub.Series = type("Series", (), {})
    sys.modules["pandas"] = stub
    try:
        from ortools.sat.python import cp_model
    except Exception:  # pragma: no cover - an OR-Tools release that needs more of pandas at import
        return
    finally:
        if sys.modules.get("pandas") is stub:
            del sys.modules["pandas"]
    cp_model.pd = _LazyPandas("pandas")


_import_cp_model_without_pandas()
