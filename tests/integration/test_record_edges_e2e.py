"""Records at the edges through a real broker and Spark: timestamps at and beyond what the envelope
carries, header names holding line separators in the line formats."""

from __future__ import annotations

from pathlib import Path

import pytest
from clitools import run_cli
from kafkatools import consume_all, produce_records
from topicvault.core.envelope import MAX_TIMESTAMP_MS, Record


def test_the_largest_carried_timestamp_is_backed_up_and_restored_exactly(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="ts-max")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"a", b"1", MAX_TIMESTAMP_MS, 0, ()),
                                       Record(topic, 0, 0, b"c", b"3", 1_700_000_000_000, 0, ())])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    source, restored = consume_all(bootstrap, topic)[0], consume_all(bootstrap, f"{topic}-r")[0]
    assert [r.timestamp_ms for r in source][0] == MAX_TIMESTAMP_MS
    assert [(r.key, r.timestamp_ms) for r in restored] == [(r.key, r.timestamp_ms) for r in source]


def test_a_microsecond_timestamp_sent_as_milliseconds_fails_the_backup_clearly(bootstrap, spark, topic_factory,
                                                                              tmp_path):
    topic = topic_factory(1, prefix="ts-us")
    micros = 1_700_000_000_000_000 * 10  # beyond 9.22e15 ms
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"ok", b"1", 1_700_000_000_000, 0, ()),
                                       Record(topic, 0, 0, b"us", b"2", micros, 0, ()),
                                       Record(topic, 0, 0, b"last", b"3", 1_700_000_000_001, 0, ())])
    assert consume_all(bootstrap, topic)[0][1].timestamp_ms == micros  # the broker keeps it
    location = tmp_path / "b"
    output = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{topic}[0]@1 has timestamp {micros} ms" in errors[0], output
    assert "Traceback" not in output
    assert not list(Path(location).glob("_topicvault/commits/*")), "nothing may be committed"


@pytest.mark.parametrize("format_name,compression", [("jsonl", "none"), ("csv", "gzip")])
def test_header_names_with_line_separators_survive_a_line_format_backup(bootstrap, spark, topic_factory, tmp_path,
                                                                         format_name, compression):
    topic = topic_factory(1, prefix=f"lines-{format_name}")
    breakers = ["\u2028", "\u2029", "\x85", "\r", "\x0b"]
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", f"v{c}".encode(), 1_700_000_000_000 + i, 0,
                                              ((f"h{c}x", f"{c}".encode()), (c, None)))
                                       for i, c in enumerate(breakers)]
                    + [Record(topic, 0, 0, b"last", b"last", 1_700_000_000_009, 0, ())])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--format", format_name,
            "--compression", compression)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    source, restored = consume_all(bootstrap, topic)[0], consume_all(bootstrap, f"{topic}-r")[0]
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored] == \
        [(r.key, r.value, r.headers, r.timestamp_ms) for r in source]
    assert len(source) == 6
