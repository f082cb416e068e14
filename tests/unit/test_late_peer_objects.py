"""A peer-archive standby checks objects that land after it restored past their offsets
(source.restore.standby.late_peer_records): what it can no longer restore is named, never dropped quietly.

Real Lenses JSON objects in a directory and real offset maps; no broker is needed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.source.peer_layout import peer_state
from topicvault.source.restore.offset_map import OffsetMap
from topicvault.source.restore.restore_job import RestoreJob, RestorePlan
from topicvault.source.restore.selection import Selection
from topicvault.source.restore.standby import late_peer_records


def lenses_json(topic: str, offsets) -> bytes:
    """A Lenses JSON object (one envelope per line) holding `offsets` of partition 0."""
    def encoded(data: bytes) -> str:
        return base64.b64encode(data).decode()
    return b"".join(json.dumps({
        "key": encoded(b"k%d" % o), "keyIsArray": True, "value": encoded(b"v%d" % o), "valueIsArray": True,
        "headers": {}, "metadata": {"timestamp": 1_700_000_000_000 + o, "topic": topic, "partition": 0, "offset": o},
    }).encode() + b"\n" for o in offsets)


def lenses_archive(root: Path, objects: dict[str, range]) -> RestoreJob:
    """Objects named by Lenses (the offset in the name is the object's last at commit time)."""
    (root / "t" / "0").mkdir(parents=True, exist_ok=True)
    for name, offsets in objects.items():
        (root / "t" / "0" / f"{name}.json").write_bytes(lenses_json("t", offsets))
    return RestoreJob(KafkaSettings.of("127.0.0.1:1"), str(root), layout="lenses", state_uri=str(root.parent / "state"))


def plan_after(job: RestoreJob, restored_offsets: list[int]) -> RestorePlan:
    """The plan of a standby round whose earlier rounds restored `restored_offsets` of t[0]."""
    restored = OffsetMap("t", 0, "t-r", 0)
    restored.add_offsets(pa.array(restored_offsets, pa.int64()))
    state, _ = peer_state(job.open_store(), "lenses", None)
    return RestorePlan("standby", [], {"t": "t-r"}, {}, True, selection=Selection(), layout="lenses",
                       restored={("t", 0): restored}, archive=state)


def objects_of(job: RestoreJob, *names: str) -> set[tuple[str, int]]:
    root = Path(job.store_uri)
    return {(f"t/0/{name}.json", (root / "t" / "0" / f"{name}.json").stat().st_size) for name in names}


def test_a_late_lenses_object_named_after_the_restored_offset_is_checked_too(tmp_path):
    # Lenses names an object by its offset at commit: a late one holding 51..130 is named 130, after the
    # 100 restored. The round reads it for 101..130; 51..80 (a gap until now) can no longer go in.
    job = lenses_archive(tmp_path / "archive", {"000000000050": range(0, 51), "000000000100": range(81, 101)})
    seen = objects_of(job, "000000000050", "000000000100")
    lenses_archive(tmp_path / "archive", {"000000000130": range(51, 131)})
    found = late_peer_records(job, plan_after(job, [*range(0, 51), *range(81, 101)]), seen)
    assert [(x.first_offset, x.last_offset, x.records) for x in found.left_out] == [(51, 80, 30)]


def test_late_records_named_in_an_earlier_round_are_not_named_again(tmp_path):
    # Checked again in a later round (the object written again, or a restart): the same offsets, a
    # later restored point. They were counted twice, in every report and in the exit line.
    job = lenses_archive(tmp_path / "archive", {"000000000050": range(0, 51), "000000000100": range(81, 101)})
    seen = objects_of(job, "000000000050", "000000000100")
    lenses_archive(tmp_path / "archive", {"000000000080": range(51, 81)})
    first = late_peer_records(job, plan_after(job, [*range(0, 51), *range(81, 101)]), seen)
    lenses_archive(tmp_path / "archive", {"000000000080": range(51, 86)})  # written again, with more
    again = late_peer_records(job, plan_after(job, [*range(0, 51), *range(81, 151)]), seen, first.left_out)
    assert [(x.first_offset, x.last_offset) for x in first.left_out] == [(51, 80)]
    assert [(x.first_offset, x.last_offset) for x in again.left_out] == []


def test_a_late_object_gone_before_it_is_checked_is_named_and_checked_again_if_it_comes_back(tmp_path):
    job = lenses_archive(tmp_path / "archive", {"000000000050": range(0, 51), "000000000100": range(81, 101)})
    seen = objects_of(job, "000000000050", "000000000100")
    lenses_archive(tmp_path / "archive", {"000000000080": range(51, 81)})
    plan = plan_after(job, [*range(0, 51), *range(81, 101)])
    (tmp_path / "archive" / "t" / "0" / "000000000080.json").unlink()  # a sink rewriting it: delete, then create
    found = late_peer_records(job, plan, seen)
    assert found.left_out == [] and found.gone == {("t/0/000000000080.json", len(lenses_json("t", range(51, 81))))}
    assert any("000000000080.json" in note and "gone" in note for note in found.notes), found.notes
