"""The pure half of `topicvault demo` (tests/integration/test_demo.py runs it whole): its result line."""

from __future__ import annotations

from topicvault.source.demo import round_trip_verdict


def records(kind: int) -> dict[int, list[tuple]]:
    """Two records of partition 0 as demo.read_topic gives them: (key, value, headers, millis, type)."""
    return {0: [(b"k", b"v", (), 1_700_000_000_000, kind), (None, None, (), 1_700_000_000_001, kind)]}


def test_the_result_line_claims_the_timestamp_type_only_where_it_came_back():
    # Issue #50.6: a LogAppendTime record comes back typed CreateTime; the line must not claim its type.
    identical, line = round_trip_verdict(records(1), records(0), 2)
    assert identical and "timestamp value" in line and "LogAppendTime records come back typed CreateTime" in line
    identical, line = round_trip_verdict(records(0), records(0), 2)
    assert identical and "timestamp type CreateTime" in line
    assert round_trip_verdict(records(0), records(1), 2) == (False, "result: restored topic DIFFERS from the source")
    assert not round_trip_verdict(records(0), records(0), 3)[0]
