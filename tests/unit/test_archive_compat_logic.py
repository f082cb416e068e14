"""The pure-logic half of tests/integration/test_archive_compat.py (its docstring covers both halves):
On-disk compatibility: an archive written before issue #21 still reads and restores exactly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from clitools import run_cli
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.envelope import Record, batch_to_records
from topicvault.core.locations import open_store
from topicvault.source.object_reader import read_partition

DATA = Path(__file__).parents[1] / "data"


ARCHIVE = DATA / "archive-v1"


def _expected() -> tuple[str, dict[int, list[Record]]]:
    saved = json.loads((DATA / "archive-v1.expected.json").read_text())

    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    topic = saved["topic"]
    return topic, {
        int(p): [Record(topic, int(p), r["offset"], raw(r["key"]), raw(r["value"]), r["timestamp"], r["timestampType"],
                        tuple((k, raw(v)) for k, v in r["headers"])) for r in records]
        for p, records in saved["partitions"].items()
    }


def test_archive_written_before_the_change_reads_exactly():
    topic, expected = _expected()
    store = open_store(str(ARCHIVE))
    state = load_state(store)
    assert {(t, p): ps.end for (t, p), ps in state.partitions.items()} == {(topic, 0): 16, (topic, 1): 16}
    for partition, records in expected.items():
        entries = state.partitions[(topic, partition)].objects
        assert len(entries) == 5
        read = [r for batch in read_partition(store, list(entries)) for r in batch_to_records(batch)]
        assert read == records


def test_inspect_without_a_topic_prints_the_first_records_of_the_archive(tmp_path):
    # Like kcat on a topic: `inspect URI --limit N` shows the archive's first records, topic by topic.
    topic, expected = _expected()
    shown = run_cli("inspect", str(ARCHIVE), "--limit", "5", "--json").splitlines()
    assert [(r["topic"], r["partition"], r["offset"]) for r in map(json.loads, shown)] == \
        [(topic, 0, r.offset) for r in expected[0][:5]]
    one = run_cli("inspect", str(ARCHIVE), "--partition", "1", "--limit", "2").splitlines()
    assert [line.split(" ")[0] for line in one] == [f"{topic}[1]@{r.offset}" for r in expected[1][:2]]
    assert "partition 7 is not in the backup" in run_cli("inspect", str(ARCHIVE), "-p", "7", expect_exit=1)
    (tmp_path / "empty").mkdir()
    assert "no backup at" in run_cli("inspect", str(tmp_path / "empty"), expect_exit=1)
    assert "not both" in run_cli("inspect", str(ARCHIVE), "--topic", topic, "--object", "x", expect_exit=1)
