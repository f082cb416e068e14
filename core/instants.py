"""ISO-8601 instants as Kafka epoch milliseconds, in integer arithmetic.

`int(datetime.timestamp() * 1000)` goes through a float and is 1 ms off for some instants
(1970-01-01T00:00:01.001Z gives 1000); timedelta arithmetic is exact.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)


def iso_to_epoch_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant (UTC unless it names a zone; `Z` accepted).

    Digits below the millisecond are cut toward the past, as Kafka's millisecond clock would.
    Raises ValueError for text that is not ISO-8601.
    """
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _ONE_MS
