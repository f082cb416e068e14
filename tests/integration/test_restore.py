"""Round trips through backup and restore against the real broker and stores."""

from __future__ import annotations

import pytest
from clitools import run_cli
from kafkatools import consume_all, produce_records
from nasty import nasty_records


def without_offsets(partitions: dict) -> dict:
    """Records compared on everything but topic name and offset (a restore may shift offsets)."""
    return {
        p: [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]
        for p, records in partitions.items()
    }


@pytest.mark.parametrize("store", ["local", "s3"])
def test_round_trip_three_topics_under_new_names(bootstrap, spark, topic_factory, store, tmp_path, request):
    location = str(tmp_path / "backup") if store == "local" else request.getfixturevalue("s3_uri")
    topics = [topic_factory(4, prefix=f"rt.{store}-src") for _ in range(3)]
    for topic in topics:
        produce_records(bootstrap, topic, nasty_records(topic, 4, 4_200))
    run_cli("backup", "-b", bootstrap, "--to", location, *sum((["-t", t] for t in topics), []),
            "--max-records", "2000")

    renames = {t: t.replace("-src", "-restored") for t in topics}
    out = run_cli("restore", "--from", location, "-b", bootstrap,
                  *sum((["--rename", f"{a}={b}"] for a, b in renames.items()), []))
    assert "restored" in out

    total = 0
    for source, target in renames.items():
        original, restored = consume_all(bootstrap, source), consume_all(bootstrap, target)
        assert sorted(restored) == [0, 1, 2, 3]
        assert without_offsets(restored) == without_offsets(original)
        # Fresh target topics: offsets are the same too.
        assert {p: [r.offset for r in rs] for p, rs in restored.items()} == \
            {p: [r.offset for r in rs] for p, rs in original.items()}
        total += sum(map(len, original.values()))
    assert total >= 50_000


def test_restore_dry_run_produces_nothing(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="dry-restore")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, big_values=0))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-new", "--dry-run")
    assert "80 records" in out
    from kafkatools import topic_exists

    assert not topic_exists(bootstrap, f"{topic}-new")


def test_restore_refuses_nonempty_or_smaller_target(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(3, prefix="guard")
    produce_records(bootstrap, topic, nasty_records(topic, 3, 10, big_values=0))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)

    out = run_cli("restore", "--from", location, "-b", bootstrap, expect_exit=1)
    assert "already holds records" in out and topic in out

    smaller = topic_factory(2, prefix="smaller")
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={smaller}", expect_exit=1)
    assert "2 partitions" in out and "3" in out


def test_restore_of_empty_location_is_a_clear_error(bootstrap, tmp_path):
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, expect_exit=1)
    assert "no backup at" in out and "Traceback" not in out
