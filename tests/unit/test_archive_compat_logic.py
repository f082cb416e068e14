"""The pure-logic half of tests/integration/test_archive_compat.py (its docstring covers both halves):
On-disk compatibility: an archive written before issue #21 still reads and restores exactly.
"""

from __future__ import annotations

import json

from archivetools import ARCHIVE, expected_v1
from clitools import run_cli
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.envelope import batch_to_records
from topicvault.core.stores.locations import open_store
from topicvault.source.object_reader import read_partition


def test_archive_written_before_the_change_reads_exactly():
    topic, expected = expected_v1()
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
    topic, expected = expected_v1()
    shown = run_cli("inspect", str(ARCHIVE), "--limit", "5", "--json").splitlines()
    assert [(r["topic"], r["partition"], r["offset"]) for r in map(json.loads, shown)] == \
        [(topic, 0, r.offset) for r in expected[0][:5]]
    one = run_cli("inspect", str(ARCHIVE), "--partition", "1", "--limit", "2").splitlines()
    assert [line.split(" ")[0] for line in one] == [f"{topic}[1]@{r.offset}" for r in expected[1][:2]]
    assert "partition 7 is not in the backup" in run_cli("inspect", str(ARCHIVE), "-p", "7", expect_exit=1)
    (tmp_path / "empty").mkdir()
    assert "no backup at" in run_cli("inspect", str(tmp_path / "empty"), expect_exit=1)
    assert "not both" in run_cli("inspect", str(ARCHIVE), "--topic", topic, "--object", "x", expect_exit=1)
