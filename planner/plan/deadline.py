"""One time limit for a whole command.

`--time-limit` (or the scenario's solver.time_limit_s) is turned into one Deadline when a command starts;
the candidate search, the serving configurations of a fleet and every CP-SAT call each take what is left
of it, checking at their loop heads. When it runs out, a stage stops and says what it searched; a plan
printed after that is the best found, not proven, and is re-checked by the estimator like any other.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from planner.errors import PlannerInputError


class OutOfTime(PlannerInputError):
    """The time limit ran out before any answer was found: one line naming what was searched and the fix."""


@dataclass(frozen=True)
class Deadline:
    limit_s: float
    ends_at: float  # on time.perf_counter()'s clock

    @classmethod
    def start(cls, limit_s: float) -> Deadline:
        return cls(limit_s, time.perf_counter() + limit_s)

    def remaining_s(self) -> float:
        return max(0.0, self.ends_at - time.perf_counter())

    def expired(self) -> bool:
        return time.perf_counter() >= self.ends_at

    def out_of_time(self, searched: str, narrow: str, before: str = "any plan was found") -> OutOfTime:
        return OutOfTime(f"the {self.limit_s:g} s time limit (--time-limit, solver.time_limit_s) ran out after "
                         f"{searched}, before {before}; raise --time-limit or narrow {narrow}")


NO_DEADLINE = Deadline(math.inf, math.inf)  # library calls that set no limit
