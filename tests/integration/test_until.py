"""Point-in-time restore: `--until` keeps each partition's prefix up to the first record after TIME."""

from __future__ import annotations

from clitools import run_cli
from kafkatools import consume_all, produce_records
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


def test_until_restores_the_prefix_of_each_partition(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="pit")
    records = [Record(topic, p, 0, b"k%d" % i, b"v%d" % i, BASE + i * 1000 + (50_000 if (p, i) == (1, 3) else 0), 0, ())
               for p in (0, 1) for i in range(40)]
    produce_records(bootstrap, topic, records)
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "7")

    until = "2023-11-14T22:13:30Z"  # BASE + 10 s: records 0..10 of partition 0
    assert BASE + 10_000 == 1_700_000_010_000
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-pit", "--until", until)
    restored = consume_all(bootstrap, f"{topic}-pit")
    assert [r.value for r in restored[0]] == [b"v%d" % i for i in range(11)]
    # Partition 1's record 3 carries a time 50 s late: the prefix stops before it, although
    # records 4..10 are within TIME (prefix by offset, not a filter).
    assert [r.value for r in restored[1]] == [b"v0", b"v1", b"v2"]

    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-pit2",
            "--until", str(BASE + 2_500))
    restored = consume_all(bootstrap, f"{topic}-pit2")
    assert [r.value for r in restored[0]] == [b"v0", b"v1", b"v2"]
    assert [r.value for r in restored[1]] == [b"v0", b"v1", b"v2"]


def test_until_outside_the_data_is_a_clear_error(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="pit-bad")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"v", BASE + 60_000, 0, ())])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--until", "2999-01-01T00:00:00Z", expect_exit=1)
    assert "in the future" in out
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--until", str(BASE), expect_exit=1)
    assert "before the backed-up data" in out
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--until", "yesterday", expect_exit=1)
    assert "bad --until" in out
