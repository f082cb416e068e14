"""On-disk compatibility: an archive written before issue #21 still reads and restores exactly.

tests/data/archive-v1 was made with the CLI of commit a17ac99 (two backups of a 2-partition
topic `legacy.orders`, --max-records 4: nulls, empty bytes, tombstones, duplicate and null
headers, timestamps 1 and 2100); archive-v1.expected.json holds what the broker held then.
"""
from __future__ import annotations

import shutil
import uuid

from archivetools import ARCHIVE, expected_v1
from kafkatools import consume_all
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore
from topicvault.source.restore.restore_plan import RestoreRequest


def test_archive_written_before_the_change_restores_exactly(bootstrap, spark, tmp_path):
    topic, expected = expected_v1()
    location = tmp_path / "archive"
    shutil.copytree(ARCHIVE, location)  # the committed copy stays untouched whatever the restore does
    target = f"legacy-{uuid.uuid4().hex[:8]}"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    plan = plan_restore(job, RestoreRequest(renames={topic: target}))
    result = run_restore(spark, job, plan)
    assert sum(r.produced for r in result.results) == 32
    restored = consume_all(bootstrap, target)
    assert {p: [(r.offset, r.key, r.value, r.timestamp_ms, r.timestamp_type, r.headers) for r in rs]
            for p, rs in restored.items()} == \
        {p: [(r.offset, r.key, r.value, r.timestamp_ms, r.timestamp_type, r.headers) for r in rs]
         for p, rs in expected.items()}
