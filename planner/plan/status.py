"""What a CP-SAT solve ended with, in the words both planners print."""

from __future__ import annotations

from ortools.sat.python import cp_model

OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, MODEL_INVALID = "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"
_NAMES = {cp_model.OPTIMAL: OPTIMAL, cp_model.FEASIBLE: FEASIBLE, cp_model.INFEASIBLE: INFEASIBLE,
          cp_model.UNKNOWN: UNKNOWN, cp_model.MODEL_INVALID: MODEL_INVALID}


def status_name(code: int) -> str:
    return _NAMES.get(code, UNKNOWN)


def solved(code: int) -> bool:
    """CP-SAT holds a solution (proven optimal or not)."""
    return code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
