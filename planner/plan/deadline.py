"""One time limit for a whole command.

`--time-limit` (or the scenario's solver.time_limit_s) is turned into one Deadline per command; the candidate
search, the serving configurations of a fleet, every CP-SAT call and every variant of a what-if or a report
each take what is left of it, checking at their loop heads. When it runs out, a stage stops and says what it
searched; a plan printed after that is the best found, not proven, and is re-checked by the estimator like
any other.

A command's Deadline is anchored where `planner` starts it (planner.cli.main, before the catalogs load: a
CommandStart), and its searches stop early enough for what runs outside them -- Python starting and importing
the CLI, the explanations and re-checks after the search, rendering, printing and the interpreter's exit -- to
end within the limit too. How long that work takes with a whole CPU is measured; it is reckoned at the share
of a CPU the command has had so far, so a command on a busy machine stops its searches sooner. A library
call's Deadline starts when the call does and keeps the whole limit (its caller prints).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from planner.errors import PlannerInputError


# Seconds a command spends outside its searches with a whole CPU to itself: Python starting and importing
# planner.cli, the work after the search stops (explanations, re-checks, rendering, printing) and the
# interpreter's exit. bench/fuzz.py --large measures it for the long-search reproducers of issue 13, finding 14
# that run into the limit, on the 2-core development machine: 0.35-0.60 s at a CPU share of 0.97-1.00 (0.57 s at
# 0.64), of which 0.33-0.40 s is CPU time (starting reads files, exiting frees memory). Rounded up, with room for
# a search's last step past the deadline (one group of candidates, one workload's sizing step).
FINISHING_S = 1.0


@dataclass(frozen=True)
class CommandStart:
    """When a `planner` command began (before its catalogs load) and the seconds it spends outside its searches,
    which its searches keep back from its time limit."""

    at: float  # time.perf_counter()
    cpu_at: float  # time.thread_time(): the CPU time of the thread that runs the command
    finishing_s: float = FINISHING_S  # with a whole CPU

    @classmethod
    def now(cls) -> CommandStart:
        return cls(time.perf_counter(), time.thread_time())

    def also_finishing(self, seconds: float) -> CommandStart:
        """The same command with more to do once its searches end (e.g. drawing a page's charts)."""
        return replace(self, finishing_s=self.finishing_s + seconds)

    def finishing_now_s(self) -> float:
        """finishing_s at the share of a CPU the command's thread has had so far: on a machine busy with other jobs
        the same work takes longer. (The finishing work runs on that thread; CP-SAT's workers, on their own
        threads, are not counted.)"""
        wall, cpu = time.perf_counter() - self.at, time.thread_time() - self.cpu_at
        share = min(1.0, cpu / wall) if cpu > 0 and wall > 0 else 1.0
        return self.finishing_s / share


class OutOfTime(PlannerInputError):
    """The time limit ran out before any answer was found: one line naming what was searched and the fix."""


@dataclass(frozen=True)
class Deadline:
    limit_s: float
    last_moment: float  # on time.perf_counter()'s clock: when the call or command must be over
    command: CommandStart | None = None  # a command finishes after its searches, within the limit

    @classmethod
    def start(cls, limit_s: float) -> Deadline:
        return cls(limit_s, time.perf_counter() + limit_s)

    @classmethod
    def for_command(cls, limit_s: float, started: CommandStart | None) -> Deadline:
        """The limit of a command from when it started (it may already be spent when the search starts); None: a
        library call, the whole limit from now."""
        if started is None:
            return cls.start(limit_s)
        return cls(limit_s, started.at + limit_s, started)

    @property
    def ends_at(self) -> float:
        """When the searches must stop (time.perf_counter()): a command's finishing time before its last moment."""
        return self.last_moment - (self.command.finishing_now_s() if self.command else 0.0)

    def remaining_s(self) -> float:
        return max(0.0, self.ends_at - time.perf_counter())

    def expired(self) -> bool:
        return time.perf_counter() >= self.ends_at

    def out_of_time(self, searched: str, narrow: str, before: str = "any plan was found") -> OutOfTime:
        return OutOfTime(f"the {self.limit_s:g} s time limit (--time-limit, solver.time_limit_s) ran out after "
                         f"{searched}, before {before}; raise --time-limit or narrow {narrow}")


NO_DEADLINE = Deadline(math.inf, math.inf)  # library calls that set no limit
