"""A clock tests move by hand: time passes only when the code under test sleeps, so a wait is
measured in what it waited, never in how loaded the machine is."""

from __future__ import annotations

import time


class SteppedClock:
    """Stands in for a clock function (call it) or for the `time` module (`monotonic`, `sleep`,
    `time`): `now` moves only by `sleep`; wall time (`time`) is the real one."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    @staticmethod
    def time() -> float:
        return time.time()
