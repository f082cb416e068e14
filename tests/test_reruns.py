"""Issue #34: reruns of a restore id keep the guarantees of its first run.

A rerun that picks up records backed up since (a one-shot rerun of a finished id, or a follow
round) produces into topics whose saved configs a finished run applied: it sets the loading
configs first (no LogAppendTime, compaction or retention on records being produced and
counted) and applies the saved ones after. A rerun whose saved state predates source_starts
still notices an expire that dropped records it had not restored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from confluent_kafka import Consumer, TopicPartition
from test_restore_guards import LOADING, edit_saved_configs
from test_standby_maintenance import backed_up, overrides, same_as_source
from topicvault.core.kafka import KafkaSettings
from topicvault.source.restore import RestoreJob, plan_restore, run_restore
from topicvault.source.throttle import RateLimit


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def configs_while_producing(bootstrap: str, target: str, already: int, run, names) -> dict[str, str]:
    """`run()` in a thread; the target's values of `names` once it holds more than `already` records
    (while the run still produces: it is rate-limited)."""
    failure: list[BaseException] = []

    def in_thread() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 — handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=in_thread, daemon=True)
    thread.start()
    seen = None
    deadline = time.monotonic() + 180
    while thread.is_alive() and time.monotonic() < deadline:
        if high_watermark(bootstrap, target) > already:
            seen = overrides(bootstrap, target, names)
            break
        time.sleep(0.05)
    thread.join(180)
    assert not failure, failure
    assert seen is not None, "the run ended before a record it produced could be seen"
    return seen


def test_a_rerun_of_a_finished_restore_produces_with_loading_configs_and_applies_the_saved_ones_after(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="rerun-configs")
    target, location = f"{topic}-r", tmp_path / "archive"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    backed_up(spark, bootstrap, str(location), topic, 0, 100)
    saved = {"cleanup.policy": "compact", "retention.ms": "60000"}
    edit_saved_configs(location, topic, saved)  # as real Kafka reports overrides (tansu reports none)
    run_restore(spark, job, plan_restore(job, [topic], {topic: target}, "rerun"))
    assert overrides(bootstrap, target, saved) == saved  # finished: the target looks like its source

    backed_up(spark, bootstrap, str(location), topic, 100, 100)
    slow = replace(job, rate=RateLimit(records_per_s=40))  # about 2.5 s of producing to look at
    # The rerun counts what the first run wrote and produces the rest: a compacting target (or
    # LogAppendTime, or a short retention) would change or delete records while it does.
    during = configs_while_producing(
        bootstrap, target, 100, lambda: run_restore(spark, slow, plan_restore(slow, [], {topic: target}, "rerun")),
        LOADING)
    assert during == LOADING
    assert overrides(bootstrap, target, saved) == saved  # and the saved configs once the data is in
    same_as_source(bootstrap, topic, target)
