"""Restore's pure logic without a broker or Spark: offset maps, selection, task grouping."""

from __future__ import annotations

import pyarrow as pa
import pytest
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.envelope import Record, batch_to_records, content_fingerprint, records_to_batch
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.offset_map import OffsetMap, recording
from topicvault.source.restore.restore_job import RestoreTask, group_tasks
from topicvault.source.restore.selection import NotAPrefix, Selection, skip_records


def offsets(*values: int) -> pa.Array:
    return pa.array(values, pa.int64())


def batch(first: int, count: int, timestamps: list[int] | None = None) -> pa.RecordBatch:
    times = timestamps or [1_000 + i for i in range(count)]
    return records_to_batch([Record("s", 0, first + i, b"k", b"v", times[i]) for i in range(count)])


def entry(first: int, last: int, min_ts: int = 0) -> ObjectEntry:
    return ObjectEntry(f"o{first}", "s", 0, first, last, last - first + 1, 1, min_ts, min_ts, "x")


# --- offset map --------------------------------------------------------------------------------

def test_offset_map_keeps_runs_of_consecutive_source_offsets_and_translates_through_gaps():
    offset_map = OffsetMap("s", 0, "t", 100)
    offset_map.add_offsets(offsets(0, 1, 2, 5, 6))  # 3, 4 compacted away
    offset_map.add_offsets(offsets(7, 9))  # 8 a transaction marker
    assert offset_map.ranges == [(0, 100, 3), (5, 103, 3), (9, 106, 1)]
    assert (offset_map.records, offset_map.target_end) == (7, 107)
    # A group offset is the next record to read: a gap maps to the next restored record.
    assert [offset_map.translate(o) for o in (0, 2, 3, 4, 5, 8, 9, 10, 99)] == [100, 102, 103, 103, 103, 106, 106, 107, 107]


def test_offset_map_refuses_offsets_that_repeat_or_go_back():
    offset_map = OffsetMap("s", 0, "t", 0)
    offset_map.add_offsets(offsets(0, 1, 2))
    with pytest.raises(TopicvaultError, match=r"s\[0\]: source offset 2 repeats or goes back"):
        offset_map.add_offsets(offsets(2, 3))


def test_offset_map_landed_at_maps_records_to_target_offsets_with_gaps():
    offset_map = OffsetMap("s", 0, "t", 10)
    offset_map.add_offsets(offsets(0, 1, 2, 3))
    landed = offset_map.landed_at([10, 11, 13, 14])  # the target skipped offset 12
    assert landed.ranges == [(0, 10, 2), (2, 13, 2)]
    assert landed.target_end == 15 and landed.translate(2) == 13
    assert OffsetMap.from_json(landed.to_json()) == landed


def test_recording_fills_the_map_as_batches_pass_and_changes_none():
    offset_map = OffsetMap("s", 0, "t", 0)
    source = [batch(0, 3), batch(3, 2)]
    assert list(recording(source, offset_map)) == source
    assert offset_map.ranges == [(0, 0, 5)]


# --- selection ---------------------------------------------------------------------------------

def test_objects_outside_offset_bounds_are_left_out():
    selection = Selection(from_offsets=(("s:0", 10),), to_offsets=(("*", 25),))
    kept = selection.objects("s", 0, [entry(20, 29), entry(0, 9), entry(10, 19), entry(30, 39)])
    assert [e.first_offset for e in kept] == [10, 20]
    assert selection.bounds("s", 1) == (0, 25)  # "*" applies to every partition


def test_until_prefix_stops_at_the_first_later_record_and_filter_drops_each():
    times = [1, 2, 9, 3, 4]
    prefix = Selection(until_ms=5, until_mode="prefix")
    assert [b.num_rows for b in prefix.records("s", 0, [batch(0, 5, times), batch(5, 2)])] == [2]
    filtered = Selection(until_ms=5, until_mode="filter")
    kept = list(filtered.records("s", 0, [batch(0, 5, times)]))
    assert kept[0].column("offset").to_pylist() == [0, 1, 3, 4]
    # Objects whose earliest record is after TIME: prefix stops there, filter skips just that one.
    entries = [entry(0, 4, 1), entry(5, 9, 8), entry(10, 14, 2)]
    assert [e.first_offset for e in prefix.objects("s", 0, entries)] == [0]
    assert [e.first_offset for e in filtered.objects("s", 0, entries)] == [0, 10]


def test_records_slice_offset_bounds_inside_a_batch():
    selection = Selection(from_offsets=(("*", 2),), to_offsets=(("s:0", 3),))
    assert [b.column("offset").to_pylist() for b in selection.records("s", 0, [batch(0, 5)])] == [[2, 3]]


def test_skip_records_leaves_out_what_a_resumed_restore_finds_written():
    out = list(skip_records([batch(0, 3), batch(3, 3), batch(6, 3)], 4))
    assert [b.column("offset").to_pylist() for b in out] == [[4, 5], [6, 7, 8]]
    assert list(skip_records([batch(0, 3)], 3)) == []


def numbered(first: int, count: int) -> pa.RecordBatch:
    return records_to_batch([Record("s", 0, first + i, b"k%d" % (first + i), b"v%d" % (first + i), 1_000 + first + i,
                                    headers=(("h", b"%d" % (first + i)), ("h", None))) for i in range(count)])


def tail_of(batch: pa.RecordBatch, broker_time: bool = False) -> tuple:
    """What the target's count_records reports for these records as its last ones."""
    return tuple((content_fingerprint(r.key, r.value, r.headers), None if broker_time else r.timestamp_ms)
                 for r in batch_to_records(batch))


def test_skip_records_checks_the_last_written_records_wherever_the_count_ends():
    source = numbered(0, 6)
    batches = [source.slice(0, 3), source.slice(3, 3)]
    # The count ends mid-batch, at a batch end, and the tail spans two batches.
    assert [b.column("offset").to_pylist() for b in skip_records(batches, 4, tail_of(source.slice(2, 2)))] == [[4, 5]]
    assert [b.column("offset").to_pylist() for b in skip_records(batches, 3, tail_of(source.slice(0, 3)))] == [[3, 4, 5]]
    assert list(skip_records(batches, 6, tail_of(source.slice(1, 5)))) == []
    # A gap: record 2 missing, so the target's last records are 3 and 4 where 2 and 3 belong.
    with pytest.raises(NotAPrefix):
        next(skip_records(batches, 4, tail_of(source.slice(3, 2))))


def test_a_gap_among_records_of_equal_content_is_found_by_their_timestamps():
    x, y = (b"s1", b"ok"), (b"s1", b"ALARM")
    contents = [x, y, x, x, x]
    source = records_to_batch([Record("s", 0, i, k, v, 1_000 + i) for i, (k, v) in enumerate(contents)])
    # y's delivery timed out, records 2 and 3 went: the target holds x x x (source records 0, 2, 3).
    target = tail_of(records_to_batch([batch_to_records(source)[i] for i in (0, 2, 3)]))
    with pytest.raises(NotAPrefix):
        next(skip_records([source], 3, target))
    # Where the broker set the timestamps (LogAppendTime), content alone is compared.
    assert list(skip_records([source.slice(0, 3)], 3, tail_of(source.slice(0, 3), broker_time=True))) == []


# --- task grouping -----------------------------------------------------------------------------

def task(partition: int, records: int) -> RestoreTask:
    return RestoreTask("s", partition, "t", 0, (ObjectEntry(f"o{partition}", "s", partition, 0, records - 1, records,
                                                              1, 0, 0, "x"),))


def test_group_tasks_balances_records_over_at_most_the_cores_deterministically():
    tasks = [task(p, n) for p, n in enumerate([100, 10, 10, 10, 60, 40, 5])]
    groups = group_tasks(tasks, 3)
    assert len(groups) == 3
    # Largest first onto the least loaded: the 100-record partition alone, the rest beside each other.
    assert sorted(sum(t.records for t in g) for g in groups) == [65, 70, 100]
    assert [[t.partition for t in g] for g in groups if any(t.records == 100 for t in g)] == [[0]]
    assert all(g == sorted(g, key=lambda t: t.target) for g in groups)
    assert group_tasks(list(reversed(tasks)), 3) == groups
    assert [len(g) for g in group_tasks(tasks[:2], 8)] == [1, 1]  # never more groups than tasks
    assert group_tasks([], 4) == []


def test_a_restore_job_resolves_its_state_location_where_it_is_built(monkeypatch, tmp_path):
    # Tasks record the objects --on-error skip leaves out in the restore state; a Spark worker on
    # another machine resolving the default state directory itself would record them where the
    # driver never looks, and a rerun would produce records twice.
    import pickle

    from topicvault.core.cluster.kafka import KafkaSettings
    from topicvault.source.restore.restore_job import RestoreJob

    monkeypatch.setenv("TOPICVAULT_STATE_DIR", str(tmp_path / "driver"))
    shipped = pickle.dumps(RestoreJob(KafkaSettings.of("localhost:9092"), str(tmp_path / "archive")))
    monkeypatch.setenv("TOPICVAULT_STATE_DIR", str(tmp_path / "worker"))
    job = pickle.loads(shipped)
    assert job.state_uri == str(tmp_path / "driver")
    assert job.restore_records().state.uri.endswith("driver")
