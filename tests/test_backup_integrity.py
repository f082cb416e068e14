"""Issue #16 (backup side): topic identity, commit what was read, lost ranges, isolation level."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from clitools import run_cli
from confluent_kafka.admin import AdminClient
from kafkatools import create_topic, produce_records
from topicvault.core.envelope import Record

CLI = str(Path(sys.executable).with_name("topicvault"))
BASE = 1_700_000_000_000


def records(topic: str, start: int, count: int, tag: str) -> list[Record]:
    return [Record(topic, 0, 0, b"k%d" % i, f"{tag}-{i}".encode(), BASE + i, 0, (("n", b"%d" % i),))
            for i in range(start, start + count)]


def commits(location: Path) -> list[dict]:
    folder = location / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def assert_one_line_error(output: str, *needles: str) -> None:
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], lines[0]


def recreate(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # Kafka deletes asynchronously: create fails until the old topic is gone
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except Exception:
            assert time.monotonic() < deadline, f"could not re-create {topic}"
            time.sleep(0.2)


# --- item 12: read_uncommitted is refused for backups -------------------------------------------------

@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_read_uncommitted_is_refused_before_anything_is_written(bootstrap, topic_factory, tmp_path, follow):
    topic = topic_factory(1, prefix="iso")
    produce_records(bootstrap, topic, records(topic, 0, 3, "a"))
    out = run_cli("backup", *follow, "-b", bootstrap, "--to", str(tmp_path / "b"), "-t", topic,
                  "-X", "isolation.level=Read_Uncommitted", expect_exit=1)
    assert_one_line_error(out, "isolation.level=Read_Uncommitted", "aborted")
    assert not (tmp_path / "b").exists()
