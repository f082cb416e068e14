"""ISO-8601 → epoch milliseconds without floats (`--until`, Aiven JSON timestamps)."""

from __future__ import annotations

import pytest
from topicvault.core.envelope import timestamps_ms
from topicvault.core.errors import TopicvaultError
from topicvault.formats.peers import PEERS, PeerKey, PeerOptions
from topicvault.source.restore.selection import parse_until

# int(datetime.timestamp() * 1000) gives 1000 for this instant: 1.001 is not exact in binary.
FLOAT_WRONG = "1970-01-01T00:00:01.001Z"


@pytest.mark.parametrize(("text", "millis"), [
    (FLOAT_WRONG, 1001),
    ("1970-01-01T00:00:00.003Z", 3),
    ("2023-11-14T22:13:20Z", 1_700_000_000_000),
    ("2023-11-14T22:13:20.0079999Z"[:-2] + "Z", 1_700_000_000_007),  # below the millisecond: cut, not rounded
    ("2023-11-14T23:13:20.001+01:00", 1_700_000_000_001),
    ("2023-11-14T22:13:20.001", 1_700_000_000_001),  # no zone: UTC
    ("1700000000001", 1_700_000_000_001),
])
def test_until_is_exact_to_the_millisecond(text, millis):
    assert parse_until(text) == millis


def test_until_rejects_text_that_is_no_instant():
    with pytest.raises(TopicvaultError, match="bad --until"):
        parse_until("yesterday")


def test_aiven_json_timestamps_are_exact():
    line = b'{"value": "dg==", "offset": 5, "timestamp": "%s"}\n' % FLOAT_WRONG.encode()
    decoded = PEERS["aiven"].decode(line, PeerKey("t-0-5", "t", 0, 5), PeerOptions(("value", "offset", "timestamp")),
                                    lambda key: None)
    assert timestamps_ms(decoded.table.to_batches()[0]).to_pylist() == [1001]
