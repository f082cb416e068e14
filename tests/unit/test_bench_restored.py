"""benchmarks/restored.py: the comparison that says what a tool lost or altered in a restore (issue #51 item 4)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from restored import Differences, compare, header_changes  # noqa: E402  (benchmarks/ is not a package)

# The user-shaped records' five headers (benchmarks/records.py): a repeated name, a null, an empty value.
USER_HEADERS = [("trace", b"0123456789abcdef"), ("trace", b"01234567"), ("gelöscht", None),
                ("größe-名前", b"200"), ("empty", b"")]


def record(key=b"k", value=b"v", headers=None, ts_type=1, ts=1_700_000_000_000):
    return key, value, list(headers or []), ts_type, ts


def compared(expected: list, restored: list) -> Differences:
    differences = Differences()
    compare(0, expected, restored, differences)
    return differences


def test_an_identical_restore_is_exact():
    records = [record(), record(None, None, USER_HEADERS), record(b"", b"", ts=5)]
    differences = compared(records, list(records))
    assert differences.exact and differences.per_partition == {0: (3, 3)}
    assert differences.summary().startswith("exact")


def test_lost_and_added_records_are_counted_per_partition():
    assert compared([record(), record()], [record()]).counts["missing"] == 1
    extra = compared([record()], [record(), record()])
    assert extra.counts["extra"] == 1 and extra.per_partition == {0: (1, 2)} and not extra.exact


def test_a_null_key_or_value_restored_empty_is_altered():
    differences = compared([record(None, None)], [record(b"", b"")])
    assert differences.counts["key"] == 1 and differences.counts["value"] == 1


def test_timestamp_and_its_type_are_compared():
    differences = compared([record(ts=1), record(ts_type=1)], [record(ts=2), record(ts_type=2)])
    assert differences.counts["timestamp"] == 1 and differences.counts["timestamp_type"] == 1


def test_headers_a_tool_adds_are_named():
    restored = USER_HEADERS + [("x-original-offset", b"7"), ("x-original-timestamp", b"1")]
    differences = compared([record(headers=USER_HEADERS), record()],
                           [record(headers=restored), record(headers=[("x-original-offset", b"8")])])
    assert differences.counts["headers_added"] == 2
    assert differences.added_header_names == {"x-original-offset", "x-original-timestamp"}
    assert differences.counts["headers_other"] == 0


def test_repeated_names_collapsed_and_nulls_made_empty_are_told_apart():
    # What a map of headers does: one value per name (here the last), null written as empty.
    collapsed = [("trace", b"01234567"), ("gelöscht", b""), ("größe-名前", b"200"), ("empty", b"")]
    kinds, added = header_changes(USER_HEADERS, collapsed)
    assert kinds == {"header_duplicates_collapsed", "header_nulls_became_empty"} and added == set()
    kinds, _ = header_changes([("a", b"1"), ("a", b"2")], [("a", b"1")])
    assert kinds == {"header_duplicates_collapsed"}


def test_reordered_or_changed_headers_are_other():
    assert header_changes([("a", b"1"), ("b", b"2")], [("b", b"2"), ("a", b"1")])[0] == {"headers_other"}
    assert header_changes([("a", b"1")], [("a", b"2")])[0] == {"headers_other"}
    assert header_changes([("a", None)], [])[0] == {"headers_other"}


def test_the_summary_says_what_was_altered():
    differences = compared([record(headers=[("a", None)])] * 2, [record(headers=[("a", b""), ("x", b"1")])])
    assert differences.summary() == "1 records lost; headers x added on 1; null header values made empty on 1"
