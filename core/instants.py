"""ISO-8601 instants as Kafka epoch milliseconds, in integer arithmetic.

`int(datetime.timestamp() * 1000)` goes through a float and is 1 ms off for some instants
(1970-01-01T00:00:01.001Z gives 1000); timedelta arithmetic is exact.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from .errors import TopicvaultError

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


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def duration_to_ms(text: str) -> int:
    """Milliseconds of a duration such as `30d`, `12h`, `90m`, `45s`, `500ms` or `2w` (one number,
    one unit; no unit: milliseconds). Raises ValueError for anything else, negative included."""
    stripped = text.strip().lower()
    number = stripped.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = stripped[len(number):] or "ms"
    if not number.isdigit() or unit not in _DURATION_UNITS_MS:
        raise ValueError(f"not a duration: {text!r}")
    return int(number) * _DURATION_UNITS_MS[unit]


def instant_or_age_to_epoch_ms(text: str, now_ms: int) -> int:
    """An instant given as epoch ms (digits only), ISO-8601, or a duration before `now_ms`
    (`30d`: thirty days ago). Raises ValueError for anything else."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        return now_ms - duration_to_ms(stripped)
    except ValueError:
        return iso_to_epoch_ms(stripped)


def grace_to_ms(text: str) -> int:
    """Milliseconds of --grace (a duration, see duration_to_ms); a one-line error otherwise."""
    try:
        return duration_to_ms(text)
    except ValueError:
        raise TopicvaultError(f"bad --grace {text!r}: give a duration such as 24h, 90m, 30s or 0s") from None


def before_to_epoch_ms(text: str, now_ms: int) -> int:
    """Epoch ms of expire's --before (see instant_or_age_to_epoch_ms); a one-line error otherwise."""
    try:
        return instant_or_age_to_epoch_ms(text, now_ms)
    except ValueError:
        raise TopicvaultError(f"bad --before {text!r}: give ISO-8601 (2026-11-01T00:00:00Z), epoch milliseconds "
                              "or an age such as 30d, 12h") from None
