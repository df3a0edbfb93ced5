"""What a CP-SAT solve ended with, in the words both planners print (renderers read the names without OR-Tools)."""

from __future__ import annotations

OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, MODEL_INVALID = "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"


def status_name(code: int) -> str:
    from planner.plan.cpsat import cp_model

    names = {cp_model.OPTIMAL: OPTIMAL, cp_model.FEASIBLE: FEASIBLE, cp_model.INFEASIBLE: INFEASIBLE,
             cp_model.UNKNOWN: UNKNOWN, cp_model.MODEL_INVALID: MODEL_INVALID}
    return names.get(code, UNKNOWN)


def solved(code: int) -> bool:
    """CP-SAT holds a solution (proven optimal or not)."""
    return status_name(code) in (OPTIMAL, FEASIBLE)
