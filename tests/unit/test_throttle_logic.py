"""The pure-logic half of tests/integration/test_throttle.py (its docstring covers both halves):
Restore throttling: --max-records-per-second and --max-bytes-per-second hold for the whole restore, shared across its tasks (issue #19 item 3).
"""

from __future__ import annotations

import pytest
from clitools import run_cli
from clocktools import SteppedClock
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.throttle import RateLimit, TokenBucket


@pytest.mark.parametrize("option", ["--max-records-per-second", "--max-bytes-per-second"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_zero_or_negative_rate_is_a_one_line_error(option, value, tmp_path):
    out = run_cli("restore", "--from", str(tmp_path / "nothing"), "-b", "127.0.0.1:1", option, value,
                  expect_exit=1)
    assert out.strip().splitlines() == [f"error: {option} must be a positive number, not {value}: "
                                         "leave it out for no limit"]
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize("limit,record_size", [(RateLimit(records_per_s=1000), 10),
                                               (RateLimit(bytes_per_s=50_000), 100),
                                               (RateLimit(records_per_s=1000, bytes_per_s=50_000), 100)])
def test_token_bucket_keeps_the_rate_over_any_window(limit, record_size):
    clock = SteppedClock(100.0)
    bucket = TokenBucket(limit, clock, clock.sleep)
    sent: list[tuple[float, int]] = []
    for _ in range(300):
        records = bucket.piece_records(record_size)
        bucket.take(records, records * record_size)
        sent.append((clock.now, records))
    per_s = min(r for r in (limit.records_per_s, limit.bytes_per_s / record_size if limit.bytes_per_s else None) if r)
    total = sum(n for _, n in sent)
    assert total / (sent[-1][0] - sent[0][0]) == pytest.approx(per_s, rel=0.05)
    for start, _ in sent:  # no one-second window holds more than the limit plus one piece
        in_window = sum(n for t, n in sent if start <= t < start + 1.0)
        assert in_window <= per_s * 1.0 + bucket.piece_records(record_size)


def test_rate_is_shared_by_the_tasks_running_at_once():
    assert RateLimit(1000, 90_000).shared_by(3) == RateLimit(1000 / 3, 30_000)
    assert RateLimit(bytes_per_s=10).shared_by(4) == RateLimit(None, 2.5)
    assert not RateLimit().limited and RateLimit(1).limited


def test_rate_limit_refuses_zero():
    with pytest.raises(TopicvaultError, match="--max-records-per-second must be a positive number"):
        RateLimit.of(0, None)
