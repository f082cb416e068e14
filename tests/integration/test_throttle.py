"""Restore throttling: --max-records-per-second and --max-bytes-per-second hold for the whole
restore, shared across its tasks (issue #19 item 3)."""
from __future__ import annotations

import threading
import time
from itertools import groupby

from clitools import run_cli
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafkatools import consume_all, produce_records
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


class Watch:
    """Samples the summed high watermarks of a topic's partitions until stopped, each sample
    stamped with the middle of the time its queries took."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._bootstrap, self._topic = bootstrap, topic
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # A client that asked for the topic before it existed may not see it for a while: wait first.
        admin = AdminClient({"bootstrap.servers": self._bootstrap})
        while not self._stop.is_set() and self._topic not in admin.list_topics(timeout=10).topics:
            self._stop.wait(0.05)
        self._consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "watch"})
        while not self._stop.is_set():
            asked = time.monotonic()
            try:
                total = sum(self._consumer.get_watermark_offsets(tp, timeout=5)[1] for tp in self._partitions)
                answered = time.monotonic()
                if answered - asked < 0.1:  # a slow answer (e.g. metadata of a new topic) has no clear time
                    self.samples.append(((asked + answered) / 2, total))
            except KafkaException:  # the topic does not exist yet
                pass
            self._stop.wait(0.2)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
        return self.samples


def _rates(samples: list[tuple[float, int]], window_s: float) -> tuple[list[float], float]:
    """Rates over every window of at least `window_s` while records came in, and the overall rate."""
    moving = [s for s in samples if s[1] > 0]
    first = moving[0]
    last = next(s for s in moving if s[1] == moving[-1][1])  # when the last record had arrived
    windows = []
    for i, (t0, n0) in enumerate(moving):
        for t1, n1 in moving[i + 1:]:
            if t1 - t0 >= window_s and t1 <= last[0]:
                windows.append((n1 - n0) / (t1 - t0))
                break
    return windows, (last[1] - first[1]) / (last[0] - first[0])


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
    watch = Watch(bootstrap, target, partitions)
    started = time.monotonic()
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--max-records-per-second", str(limit))
    elapsed = time.monotonic() - started
    samples = watch.stop()
    windows, overall = _rates(samples, 2.0)
    print(f"records/s: overall {overall:.0f}, 2 s windows {min(windows):.0f}..{max(windows):.0f}, "
          f"restore {elapsed:.1f} s, limit {limit}")
    assert windows and max(windows) <= 1.2 * limit
    assert overall >= 0.5 * limit  # loose: the machine is shared
    assert sum(len(records) for records in consume_all(bootstrap, target).values()) == partitions * per_partition


def test_bytes_per_second_holds(bootstrap, spark, topic_factory, tmp_path):
    limit, partitions, per_partition, value_size = 200_000, 2, 400, 1000  # 800 kB: 4 s at the limit
    topic, location = _backup(bootstrap, topic_factory, tmp_path, partitions, per_partition, value_size)
    target = f"{topic}-slow"
    watch = Watch(bootstrap, target, partitions)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--max-bytes-per-second", str(limit))
    windows, overall = _rates(watch.stop(), 2.0)
    print(f"bytes/s: overall {overall * value_size:.0f}, 2 s windows {min(windows) * value_size:.0f}.."
          f"{max(windows) * value_size:.0f}, limit {limit}")
    assert windows and max(windows) * value_size <= 1.2 * limit
    assert overall * value_size >= 0.5 * limit


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
    moving = [n for n in counts if 0 < n < 3003]
    assert len(moving) >= 10, counts  # the restore took seconds and was shown while it ran
    longest = max(len(list(run)) for _, run in groupby(moving))
    # A task's counter file is rewritten at most every 0.5 s: a count may stand for 2-3 lines, not for the
    # 10+ lines (2.5 s at 1,001 records / 400 per second) a whole batch took.
    assert longest * interval_s <= 1.5, f"the count stood still for {longest} lines: {counts}"
    assert sum(len(records) for records in consume_all(bootstrap, f"{topic}-slow").values()) == 3003
