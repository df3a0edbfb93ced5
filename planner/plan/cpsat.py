"""OR-Tools' CP-SAT module, imported without loading pandas until something uses it.

ortools/sat/python/cp_model.py (ortools 9.15) imports pandas at its top for its pandas helpers
(new_int_var_series and the like), which the planners never call; pandas alone takes about 0.2 s of the
1.9 s of `planner solve scenarios/70b-chat.yaml` (python -X importtime). At its module level cp_model
reads only pd.Index and pd.Series, in type annotations. So cp_model is imported with a stand-in holding
those two names, and its `pd` then becomes a proxy that imports pandas on first use: a cp_model function
that does use pandas gets the real module. Should a later ortools read more of pandas while importing,
the stand-in fails and cp_model is imported as it stands.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _PandasOnFirstUse(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)


def _import_cp_model() -> types.ModuleType:
    if "pandas" in sys.modules or "ortools.sat.python.cp_model" in sys.modules:
        from ortools.sat.python import cp_model

        return cp_model
    stand_in = types.ModuleType("pandas")
    stand_in.Index = type("Index", (), {})  # type: ignore[attr-defined]
    stand_in.Series = type("Series", (), {})  # type: ignore[attr-defined]
    sys.modules["pandas"] = stand_in
    try:
        from ortools.sat.python import cp_model
    except AttributeError:  # it read another name of pandas: import it with pandas
        sys.modules.pop("ortools.sat.python.cp_model", None)
        del sys.modules["pandas"]
        from ortools.sat.python import cp_model

        return cp_model
    del sys.modules["pandas"]
    cp_model.pd = _PandasOnFirstUse("pandas")  # type: ignore[attr-defined]
    return cp_model


cp_model = _import_cp_model()

__all__ = ["cp_model"]
