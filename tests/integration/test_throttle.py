"""Restore throttling: --max-records-per-second and --max-bytes-per-second hold for the whole
restore, shared across its tasks (issue #19 item 3)."""
from __future__ import annotations

from clitools import run_cli
from kafkatools import consume_all, produce_records
from ratetools import WatermarkWatch, overall_rate
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


def _backup(bootstrap, topic_factory, tmp_path, partitions: int, per_partition: int, value_size: int) -> tuple[str, str]:
    topic = topic_factory(partitions, prefix="throttle")
    produce_records(bootstrap, topic, [Record(topic, p, 0, None, b"v" * value_size, BASE + i, 0, ())
                                       for p in range(partitions) for i in range(per_partition)])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    return topic, location


def test_records_per_second_holds_across_tasks(bootstrap, spark, topic_factory, tmp_path):
    limit, partitions, per_partition = 3000, 4, 3000  # 12,000 records: 4 s at the limit
    topic, location = _backup(bootstrap, topic_factory, tmp_path, partitions, per_partition, 10)
    target = f"{topic}-slow"
    watch = WatermarkWatch(bootstrap, target, partitions)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--max-records-per-second", str(limit))
    overall = overall_rate(watch.stop())
    print(f"records/s: {overall:.0f}, limit {limit}")
    # Held to the limit across its tasks: one task's share per task, not the whole limit each.
    assert overall <= 1.2 * limit
    assert sum(len(records) for records in consume_all(bootstrap, target).values()) == partitions * per_partition


def test_bytes_per_second_holds(bootstrap, spark, topic_factory, tmp_path):
    limit, partitions, per_partition, value_size = 200_000, 2, 400, 1000  # 800 kB: 4 s at the limit
    topic, location = _backup(bootstrap, topic_factory, tmp_path, partitions, per_partition, value_size)
    target = f"{topic}-slow"
    watch = WatermarkWatch(bootstrap, target, partitions)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--max-bytes-per-second", str(limit))
    overall = overall_rate(watch.stop())
    print(f"bytes/s: {overall * value_size:.0f}, limit {limit}")
    assert overall * value_size <= 1.2 * limit


def test_progress_keeps_pace_with_a_throttled_restore(bootstrap, spark, topic_factory, tmp_path, monkeypatch):
    """#40 item 8: a task counted a whole batch (an object of 1,001 records here) the moment the producer took it,
    so under a limit the progress line sat at "2,002/3,003, ETA 2 s" while that batch went out for seconds."""
    topic = topic_factory(1, prefix="throttle")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"v%d" % i, BASE + i, 0, ()) for i in range(3003)])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "1001")
    interval_s, limit = 0.25, 400  # 3,003 records: about 7.5 s at the limit
    monkeypatch.setenv("TOPICVAULT_PROGRESS_INTERVAL_S", str(interval_s))
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-slow",
                  "--max-records-per-second", str(limit))
    counts = [int(line.split(": ", 1)[1].split("/", 1)[0].replace(",", "")) for line in out.splitlines()
              if line.startswith("restore: ") and "records/s" in line]
    # The counts shown while it ran, from 0: counted a whole batch at a time they went 1,001 then 2,002;
    # counted as the producer takes them (pieces of PIECE_S at the limit, 40 records), every step
    # between two counts shown is smaller than a batch, however slowly the lines came.
    shown = [0, *sorted({n for n in counts if 0 < n < 3003})]
    steps = [after - before for before, after in zip(shown, shown[1:])]
    assert len(steps) >= 2 and max(steps) < 1001, f"counted a whole batch at once: {counts}"
    assert sum(len(records) for records in consume_all(bootstrap, f"{topic}-slow").values()) == 3003
