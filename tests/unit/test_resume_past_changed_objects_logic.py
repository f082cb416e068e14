"""The pure-logic half of tests/integration/test_resume_past_changed_objects.py (its docstring covers both):
a resume refuses where repeated records would hide a sequence shifted by an object.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.restore_job import check_as_restored, check_not_within_written
from topicvault.source.restore.restore_plan import RestoreTask


def task(restored_before: tuple[tuple[int, int], ...] = ()) -> RestoreTask:
    return RestoreTask("t", 0, "t-r", 0, (), restore_id="r1", restored_before=restored_before)


def batches(*offsets: list[int]) -> list[pa.RecordBatch]:
    return [pa.record_batch({"offset": pa.array(o, pa.int64())}) for o in offsets]


def test_the_counted_records_must_sit_at_the_offsets_the_last_run_restored():
    earlier = task(((0, 5), (10, 5)))  # offsets 5..9 were a gap when it ran
    same = list(check_as_restored(iter(batches([0, 1, 2, 3, 4, 10], [11, 12, 13, 14, 15])), earlier, 10))
    assert sum(b.num_rows for b in same) == 11
    with pytest.raises(TopicvaultError, match=r"source offset 5 now comes where restore r1 restored source offset 10 "
                                              r"\(target offset 5\)"):
        list(check_as_restored(iter(batches([0, 1, 2], [3, 4, 5, 6])), earlier, 10))
    # Only what the target holds is compared: records after it are new.
    assert len(list(check_as_restored(iter(batches([0, 1, 2, 3, 4, 5])), earlier, 5))) == 1


def test_an_object_left_out_now_that_an_earlier_run_went_past_is_refused():
    entry = ObjectEntry("k0", "t", 0, 0, 4, 5, 100, 0, 0, "sha")
    check_not_within_written(task(), entry, before=5, present=5)  # the target ends before it: a plain hole
    with pytest.raises(TopicvaultError, match="already holds 5 records after offset 0, more than the 0 selected before "
                                              "object k0"):
        check_not_within_written(task(), entry, before=0, present=5)
