"""Durations (`--grace 1h`, `expire --before 30d`): pure logic of core.instants."""

from __future__ import annotations

import pytest
from topicvault.core.instants import duration_to_ms, instant_or_age_to_epoch_ms

NOW = 1_700_000_000_000


@pytest.mark.parametrize(("text", "millis"), [
    ("30d", 30 * 86_400_000), ("12h", 12 * 3_600_000), ("90m", 5_400_000), ("45s", 45_000),
    ("500ms", 500), ("2w", 14 * 86_400_000), ("0s", 0), ("250", 250), (" 1H ", 3_600_000),
])
def test_durations_are_exact(text, millis):
    assert duration_to_ms(text) == millis


@pytest.mark.parametrize("text", ["", "d", "-1d", "1.5h", "1y", "1d2h", "h1", "ten days"])
def test_durations_refuse_what_they_cannot_read(text):
    with pytest.raises(ValueError):
        duration_to_ms(text)


@pytest.mark.parametrize(("text", "millis"), [
    ("1700000000001", 1_700_000_000_001),  # epoch ms, not a duration in ms
    ("2023-11-14T22:13:20.001Z", 1_700_000_000_001),
    ("30d", NOW - 30 * 86_400_000),
    ("1h", NOW - 3_600_000),
])
def test_instants_as_epoch_iso_or_age(text, millis):
    assert instant_or_age_to_epoch_ms(text, NOW) == millis


def test_instants_refuse_other_text():
    with pytest.raises(ValueError):
        instant_or_age_to_epoch_ms("last tuesday", NOW)
