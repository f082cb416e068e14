"""How fast records reach a topic, for tests of a rate limit (restore throttling, the DataFrame
writer's limits): its high watermarks sampled on a thread of their own.

Only the rate's upper bound is checked (the limit holds): a loaded machine can only lower the
rate observed. A lower bound would be a speed check, which belongs in benchmarks/. A short window
can catch records that a stalled broker delivers in a clump, so the rate is taken over the whole
run: from the first sample that shows records to the one where the last record had arrived;
records delivered late at the start count in the first sample and are left out.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient


class WatermarkWatch:
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
        """Stop sampling; the samples (time, records), in order."""
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
        return self.samples


def overall_rate(samples: list[tuple[float, int]]) -> float:
    """Records per second from the first sample that shows records to the first that shows them all."""
    moving = [s for s in samples if s[1] > 0]
    assert len({n for _, n in moving}) >= 2, f"too few samples while records came in: {samples}"
    first = moving[0]
    last = next(s for s in moving if s[1] == moving[-1][1])  # when the last record had arrived
    return (last[1] - first[1]) / (last[0] - first[0])
