"""A backup read keeps pace once the task is busy elsewhere (issue #20).

A backup task stops consuming while it encodes and stores an object, so the consumer's
read-ahead queue fills. librdkafka then postpones that partition's next fetch by
`fetch.queue.backoff.ms`, 1 s by default: every full queue cost the task a second of waiting
once it came back (2 KB records backed up at a third of a bare consumer's pace).

These tests check the waits themselves (the settings the real consumers got, the calls that
block), never how long a read took: a loaded machine slows every read, a fast one hides a wait.
"""
from __future__ import annotations

from kafkatools import produce_records
from observetools import record_new_clients
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.sink import kafka_reader
from topicvault.sink.kafka_reader import OffsetRange, RangeEnd, read_ranges
from topicvault.sink.native_reader import NATIVE_ENV

RECORDS = 6_000


VALUE = 2048


def test_a_read_whose_queue_filled_does_not_wait_a_second_per_fetch(bootstrap, topic_factory, monkeypatch):
    topic = topic_factory(1, prefix="pace")
    produce_records(bootstrap, topic, (Record(topic, 0, i, b"k%d" % i, bytes([i % 251]) * VALUE, 1_700_000_000_000 + i)
                                       for i in range(RECORDS)))
    # A read-ahead of 1 MiB fetched 1 MiB at a time: each fetch fills the queue, as 16 MiB
    # fetches fill a backup's 32 MiB queue while it encodes an object.
    small_queue = KafkaSettings.of(bootstrap, {"queued.max.messages.kbytes": "1024", "fetch.max.bytes": "1048576",
                                               "max.partition.fetch.bytes": "1048576"})
    clients = record_new_clients(monkeypatch, kafka_reader)
    read = 0
    for _, item in read_ranges(small_queue, [OffsetRange(topic, 0, 0, RECORDS)], batch_records=500):
        if isinstance(item, RangeEnd):
            assert item.stopped_at == RECORDS
            continue
        read += item.num_rows
    assert read == RECORDS
    # About 12 fetches of 1 MiB, each filling the queue: the consumer that read them postpones
    # the next fetch after a full queue by fetch.queue.backoff.ms. librdkafka's default, 1 s,
    # made this read take 6.5 s instead of under 1 s.
    [config] = clients.configs
    assert int(config.get("fetch.queue.backoff.ms", 1000)) <= 50, config  # 1000: librdkafka's default
def test_a_task_reads_on_while_an_object_it_closed_is_being_stored(bootstrap, topic_factory, tmp_path, monkeypatch):
    # Storing an object costs an upload (S3: a round trip per part) or fsyncs (a directory). A
    # task that stored each object it closed before reading on spent that time not reading.
    # Deterministic: the first put waits until the task has read past that object; a task that
    # stores before reading on makes it wait out its timeout instead.
    import itertools
    import threading

    from topicvault.core.rotation import Rotation
    from topicvault.core.stores.local_store import LocalStore
    from topicvault.sink.backup import BackupJob, backup_group, plan_run
    from topicvault.sink.objects import PartitionObjects

    topic = topic_factory(1, prefix="store-aside")
    produce_records(bootstrap, topic, (Record(topic, 0, i, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i)
                                       for i in range(30)))
    read_past_first, put, add = threading.Event(), LocalStore.put, PartitionObjects.add
    waited: list[bool] = []
    puts = itertools.count()  # next() is atomic: puts run on several threads

    def put_after_the_read_went_on(store, key, data, **conditions):
        if next(puts) == 0:
            waited.append(read_past_first.wait(timeout=10))
        return put(store, key, data, **conditions)

    def add_then_say_so(self, batch):
        add(self, batch)
        read_past_first.set()  # this batch's records went past the first object (10 records)

    monkeypatch.setattr(LocalStore, "put", put_after_the_read_went_on)
    monkeypatch.setattr(PartitionObjects, "add", add_then_say_so)
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "b"), rotation=Rotation(max_records=10))
    results = backup_group(job, plan_run(job, [topic]).tasks)
    assert [o.records for r in results for o in r.objects] == [10, 10, 10]
    assert [o.first_offset for r in results for o in r.objects] == [0, 10, 20]
    assert waited == [True], "the task stored its first object before reading on"


def _read_five(bootstrap: str, topic_factory, monkeypatch, prefix: str, fetch_wait_ms: int, end: int) -> list:
    """Five records in a new topic, read as the range [0, end) with the broker holding an
    empty fetch `fetch_wait_ms`, checked to give the five records and to stop at 5: the
    consume() and poll() calls of the consumer that read them, in order."""
    topic = topic_factory(1, prefix=prefix)
    produce_records(bootstrap, topic, (Record(topic, 0, i, b"k", b"v", 1_700_000_000_000 + i) for i in range(5)))
    settings = KafkaSettings.of(bootstrap, {"fetch.wait.max.ms": str(fetch_wait_ms)})
    # The calls observed are confluent-kafka's: without this the native record loop reads, makes
    # none, and every assertion on them would pass on nothing.
    monkeypatch.setenv(NATIVE_ENV, "0")
    clients = record_new_clients(monkeypatch, kafka_reader)
    items = [item for _, item in read_ranges(settings, [OffsetRange(topic, 0, 0, end)])]
    assert clients.calls, "no consume() or poll() was recorded"
    assert [item.num_rows for item in items[:-1]] == [5] and items[-1] == RangeEnd(5)
    return [call for call in clients.calls if call.method in ("consume", "poll")]


def test_a_read_returns_records_already_fetched_without_waiting_for_a_full_batch(bootstrap, topic_factory,
                                                                                  monkeypatch):
    """`consume(n, timeout)` waits until n messages came or the timeout passed: a read whose
    last records are fewer than a batch (every range's last batch, every small partition)
    waited 0.2 s for records that never come, in every backup task (issue #20, fixed cost)."""
    # A range past the partition's end stops at its EOF; empty fetches come back at once.
    calls = _read_five(bootstrap, topic_factory, monkeypatch, "tail", fetch_wait_ms=5, end=6)
    # A blocking consume() that returned fewer messages than it asked for, but some, held
    # records until its timeout ran out.
    held = [call for call in calls if call.method == "consume" and call.timeout() > 0
            and 0 < len(call.messages()) < call.kwargs.get("num_messages", call.args[0] if call.args else 1)]
    assert not held, f"waited for a full batch while holding records: {held}"


def test_a_range_whose_last_offset_holds_a_record_ends_there_without_waiting_for_an_eof(bootstrap, topic_factory,
                                                                                      monkeypatch):
    """The EOF comes with a fetch at the end, which the broker holds for fetch.wait.max.ms: a
    range is read through once its last offset's record came (issue #20, fixed cost)."""
    calls = _read_five(bootstrap, topic_factory, monkeypatch, "lastoffset", fetch_wait_ms=2000, end=5)
    last_record = max(i for i, call in enumerate(calls)
                      if any(m.error() is None and m.offset() == 4 for m in call.messages()))
    # Nothing asked of the consumer after the record at the range's last offset came: no wait for an EOF.
    assert calls[last_record + 1:] == [], f"asked again after the last record came: {calls[last_record + 1:]}"
def test_a_read_cuts_batches_by_bytes_when_its_records_grow(bootstrap, topic_factory):
    """A read sizes its batches from the first records it gets: small ones there set a batch of
    20,000 records, and large records after them were held until that many came (one batch of
    1 MiB records would have been 20 GiB). Batches are cut at about BATCH_BYTES as well."""
    from topicvault.sink.kafka_reader import BATCH_BYTES

    topic = topic_factory(1, prefix="growing")
    small = [Record(topic, 0, i, b"k", b"s", 1_700_000_000_000 + i) for i in range(1_000)]
    large = [Record(topic, 0, 1_000 + i, b"k", bytes([i]) * 500_000, 1_700_000_000_000 + i) for i in range(100)]
    produce_records(bootstrap, topic, small + large)
    batches = [item for _, item in read_ranges(KafkaSettings.of(bootstrap), [OffsetRange(topic, 0, 0, 1_100)])
               if not isinstance(item, RangeEnd)]
    assert sum(batch.num_rows for batch in batches) == 1_100
    largest = max(sum(len(value or b"") for value in batch.column("value").to_pylist()) for batch in batches)
    assert largest <= 2 * BATCH_BYTES, f"a batch held {largest / 2**20:.0f} MiB of values"


def test_counting_a_topic_created_a_moment_ago_does_not_wait_out_a_fetch_error_backoff(bootstrap, topic_factory,
                                                                                         monkeypatch):
    """Apache Kafka answers the first fetch of a partition created a moment ago with
    UNKNOWN_LEADER_EPOCH (the metadata already names the leader's epoch, the leader has not taken
    it yet), and librdkafka then waits `fetch.error.backoff.ms`, 500 ms by default, before it
    fetches again: every restore task spent half a second counting the target partitions its
    run had just created (issue #33, a restore's fixed part on Apache Kafka)."""
    from topicvault.core.cluster import kafka
    from topicvault.source.restore.kafka_writer import count_records

    clients = record_new_clients(monkeypatch, kafka)
    topic = topic_factory(2, prefix="fresh")
    written = count_records(KafkaSettings.of(bootstrap), {(topic, 0): 0, (topic, 1): 0})
    assert [w.records for w in written.values()] == [0, 0]
    # Measured: 0.55-1.05 s with the 500 ms backoff (the race hit 5 counts in 6), 0.03-0.15 s
    # with a short one: the consumer that counted refetches soon after such an error.
    [config] = clients.configs
    assert int(config.get("fetch.error.backoff.ms", 500)) <= 50, config  # 500: librdkafka's default
