"""Restore throttling: a rate limit for the whole restore, and a token bucket per task.

The driver knows how many restore tasks run at once (one per core, see restore.run_restore),
so each task gets an equal share of the limit and no task needs to talk to another. The
produce loop asks the bucket once per piece of a batch (about PIECE_S worth of records), not
per record, so the hot loop stays as fast as without a limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from ...core.errors import TopicvaultError

# A piece is this many seconds' worth of records at the limit: small enough that one piece
# never bursts much above the rate, large enough that the bucket is asked rarely.
PIECE_S = 0.1
# Time not used (a slow read, a wait on the broker, a late wake-up) may be caught up for at most
# this long: small, so a stall never turns into a burst above the limit.
BURST_S = 0.02


@dataclass(frozen=True)
class RateLimit:
    """Records and payload bytes (key + value + headers) per second; None: no limit."""

    records_per_s: float | None = None
    bytes_per_s: float | None = None

    @classmethod
    def of(cls, records_per_s: float | None, bytes_per_s: float | None) -> "RateLimit":
        """The limit the CLI options give; zero or negative is refused with a one-line error."""
        for option, value in (("--max-records-per-second", records_per_s), ("--max-bytes-per-second", bytes_per_s)):
            if value is not None and not value > 0:
                raise TopicvaultError(f"{option} must be a positive number, not {value:g}: leave it out for no limit")
        return cls(records_per_s, bytes_per_s)

    @property
    def limited(self) -> bool:
        return self.records_per_s is not None or self.bytes_per_s is not None

    def records_in(self, seconds: float, bytes_per_record: float) -> int:
        """How many records (of about this size) the limit lets go in `seconds` (at least 1)."""
        records = [rate * seconds for rate in (self.records_per_s,) if rate]
        if self.bytes_per_s:
            records.append(self.bytes_per_s * seconds / max(bytes_per_record, 1.0))
        return max(1, int(min(records, default=1_000_000)))

    def shared_by(self, tasks: int) -> "RateLimit":
        """Each task's share when `tasks` run at the same time."""
        return RateLimit(*(None if rate is None else rate / tasks for rate in (self.records_per_s, self.bytes_per_s)))


class TokenBucket:
    """Waits before each piece until sending it keeps within the limit (one task's share)."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.limit = limit
        self._clock = clock
        self._sleep = sleep
        self._rates = [rate for rate in (limit.records_per_s, limit.bytes_per_s)]
        now = clock()
        self._ready_at = [now, now]  # per rate: when the next piece may go

    def piece_records(self, bytes_per_record: float) -> int:
        """How many records (of about this size) make one piece."""
        return self.limit.records_in(PIECE_S, bytes_per_record)

    def take(self, records: int, nbytes: int) -> None:
        """Wait until this piece may be sent, then count it."""
        while (wait := max(self._ready_at) - self._clock()) > 0:
            self._sleep(wait)  # may return early (a producer poll serving deliveries): check again
        now = self._clock()
        for index, (amount, rate) in enumerate(zip((records, nbytes), self._rates)):
            if rate:
                self._ready_at[index] = max(self._ready_at[index], now - BURST_S) + amount / rate


def in_pieces(batches: Iterable[pa.RecordBatch], limit: RateLimit) -> Iterator[pa.RecordBatch]:
    """The batches cut into pieces of about PIECE_S at `limit` (as they are; no limit).

    A throttled producer then takes records about as fast as it sends them, so what counts what
    it takes (a restore task's progress, core.progress.counted) keeps pace: a whole batch counted
    when taken stood still in the progress line for the seconds it took to send.
    """
    for batch in batches:
        if not limit.limited or batch.num_rows <= 1:
            yield batch
            continue
        step = limit.records_in(PIECE_S, batch.nbytes / batch.num_rows)
        for start in range(0, batch.num_rows, step):
            yield batch.slice(start, step)
