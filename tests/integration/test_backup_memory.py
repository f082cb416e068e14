"""A backup task's memory: what its consumer reads ahead stays small beside the objects it builds.

While a task encodes and stores objects its consumer reads ahead, up to the limits the task sets.
librdkafka counts a queue's size in payload bytes, but holds each queued record with a few hundred
bytes of its own and keeps a whole fetch response alive while any record of it is queued: with
16 MiB fetches and a 16 MiB queue, one task of two partitions of 200-byte records peaked 60-70 MiB
higher than with 8 MiB fetches and queue, and was no faster. Issue #20's worker memory target
(2 x --max-bytes + 300 MiB = 428 MiB) was exceeded on Apache Kafka: 438-441 MiB.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kafkatools import produce_records
from peak_memory import PEAK_MEMORY_SOURCE
from topicvault.core.envelope import Record

PARTITIONS = 2
RECORDS_PER_PARTITION = 200_000
VALUE = 200
# How much a read whose caller is slower than its consumer may add to its process's resident
# memory (its batches, Python's and Arrow's, and the consumer's read-ahead). Measured, three runs
# each: 152-162 MiB with 16 MiB fetches and queue, 124-125 MiB with 8 MiB.
PEAK_LIMIT_MIB = 140

# A read of every partition through one consumer (sink.kafka_reader.read_ranges, as a backup task
# reads) whose caller takes 50 ms over each batch, as a task encoding and storing objects does, so
# the consumer's queue fills to its limits; in a fresh process. Prints how much its resident memory
# peaked above what it held before the read began.
READ = PEAK_MEMORY_SOURCE + """
import json, sys, time
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.sink.kafka_reader import OffsetRange, RangeEnd, read_ranges

bootstrap, topic, partitions, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ranges = [OffsetRange(topic, p, 0, records) for p in range(partitions)]
read = 0
before = resident_bytes("VmRSS")
restart_peak()  # the peak (VmHWM) starts again from here
for _, item in read_ranges(KafkaSettings.of(bootstrap), ranges):
    if not isinstance(item, RangeEnd):
        read += item.num_rows
        del item
        time.sleep(0.05)
print(json.dumps({"records": read, "peak_mib": (resident_bytes("VmHWM") - before) / 2**20}))
"""


def test_a_backup_reads_ahead_a_few_mib_not_tens(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(PARTITIONS, prefix="memory")
    produce_records(bootstrap, topic, (Record(topic, i % PARTITIONS, i // PARTITIONS, os.urandom(16), os.urandom(VALUE),
                                              1_700_000_000_000 + i)
                                       for i in range(PARTITIONS * RECORDS_PER_PARTITION)),
                    {"linger.ms": 50, "batch.size": 1 << 20})
    log = tmp_path / "read.log"
    with open(log, "wb") as errors:
        done = subprocess.run([sys.executable, "-c", READ, bootstrap, topic, str(PARTITIONS), str(RECORDS_PER_PARTITION)],
                              stdout=subprocess.PIPE, stderr=errors, timeout=300)
    assert done.returncode == 0, log.read_text()[-3000:]
    read = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert read["records"] == PARTITIONS * RECORDS_PER_PARTITION
    assert read["peak_mib"] <= PEAK_LIMIT_MIB, f"reading {read['records']} records peaked {read['peak_mib']:.0f} MiB above the start"
