"""How often a follower (`backup --follow`, `restore --follow`) starts again after a failure.

A worker that crashed costs a task attempt (Spark retries it, see spark.task_retries); a
micro-batch or a round that fails anyway is started again from the last commit (backup) or
the saved offset map (restore), after a growing pause, at most MAX_RESTARTS times in any
WINDOW_S seconds: a fault that keeps coming back ends the follower with one line instead of
a loop that never gets anywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

MAX_RESTARTS = 5
WINDOW_S = 600.0
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


@dataclass
class RestartBudget:
    """The restarts a follower made, and whether and when it may make the next one."""

    max_restarts: int = MAX_RESTARTS
    window_s: float = WINDOW_S
    clock: Callable[[], float] = time.monotonic
    times: list[float] = field(default_factory=list)  # of the restarts within the window
    total: int = 0

    def next_delay(self) -> float | None:
        """Count one restart and return the pause before it (doubling with each restart in the
        window, from FIRST_DELAY_S to MAX_DELAY_S), or None: the window's restarts are used up."""
        now = self.clock()
        self.times = [t for t in self.times if now - t < self.window_s]
        if len(self.times) >= self.max_restarts:
            return None
        self.times.append(now)
        self.total += 1
        return min(FIRST_DELAY_S * 2 ** (len(self.times) - 1), MAX_DELAY_S)

    def give_up(self, what: str, reason: str) -> str:
        """The one line a follower ends with when its restarts are used up."""
        return (f"{what} failed again after {len(self.times)} restarts in {self.window_s:.0f} s, giving up: {reason} "
                "(the archive holds everything committed; run it again once the cause is fixed)")


def pause(seconds: float, should_stop: Callable[[], bool]) -> bool:
    """Wait `seconds` unless a stop is requested first; True if the wait ran out (go on)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if should_stop():
            return False
        time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
    return not should_stop()
