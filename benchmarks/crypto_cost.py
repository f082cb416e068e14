"""What client-side encryption costs (issue #22), without a broker or Spark.

1. seal / unseal alone (AES-256-GCM over the finished object, key-file data key) in MB/s;
2. the object writer and reader on a local directory, Parquet zstd, with and without a key:
   the encrypted run's extra time per MB of stored bytes.

    PYTHONPATH=… python benchmarks/crypto_cost.py [--records 400000] [--size 200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from topicvault.core.crypto import Keyring, ObjectBinding, keyring_of, seal, unseal, write_key_file
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.rotation import Rotation
from topicvault.core.stores.locations import open_store
from topicvault.formats import resolve_format
from topicvault.keys import default_codec
from topicvault.sink.objects import write_objects
from topicvault.source.object_reader import read_partition

MB = 1024 * 1024


def best_of(repeats: int, action) -> float:
    """The fastest of `repeats` runs, in seconds (the machine is shared)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


BINDING = ObjectBinding("t", 0, 0, 0, 1)  # what a commit entry would say the object holds


def container_rates(keyring: Keyring) -> dict:
    rates = {}
    for size_mb in (1, 16, 64):
        data = os.urandom(size_mb * MB)
        sealed = seal(data, "k", keyring.sealing, BINDING)
        rates[f"{size_mb}MB"] = {
            "seal_MBps": round(size_mb / best_of(3, lambda d=data: seal(d, "k", keyring.sealing)), 1),
            "unseal_MBps": round(size_mb / best_of(3, lambda s=sealed: unseal(s, "k", keyring, BINDING)), 1),
            "overhead_bytes": len(sealed) - len(data),
        }
    return rates


def writer_reader(records: int, size: int, keyring: Keyring | None, scratch: str) -> dict:
    batches = [records_to_batch(Record("bench", 0, start + i, b"key-%d" % (start + i), os.urandom(size),
                                       1_700_000_000_000 + start + i, 0, (("h", b"v"),)) for i in range(50_000))
               for start in range(0, records, 50_000)]
    store = open_store(os.path.join(scratch, "plain" if keyring is None else "sealed"))
    started = time.perf_counter()
    entries = write_objects(batches, store, default_codec(), resolve_format("parquet"), Rotation(),
                            run_id="r0000000be7c4", keyring=keyring)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    read = sum(b.num_rows for b in read_partition(store, entries, keyring=keyring))
    read_s = time.perf_counter() - started
    assert read == records
    return {"write_s": round(write_s, 3), "read_s": round(read_s, 3),
            "stored_MB": round(sum(e.bytes for e in entries) / MB, 1), "objects": len(entries)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tv-crypto-bench-") as scratch:
        key_path = os.path.join(scratch, "key")
        write_key_file(key_path)
        keyring = keyring_of((f"file://{key_path}",))
        result = {"container": container_rates(keyring)}
        plain = writer_reader(args.records, args.size, None, scratch)
        sealed = writer_reader(args.records, args.size, keyring, scratch)
        result["parquet_zstd"] = {"records": args.records, "value_bytes": args.size, "plain": plain, "encrypted": sealed,
                                  "extra_write_ms_per_MB": round((sealed["write_s"] - plain["write_s"]) * 1000
                                                                 / plain["stored_MB"], 2),
                                  "extra_read_ms_per_MB": round((sealed["read_s"] - plain["read_s"]) * 1000
                                                                / plain["stored_MB"], 2)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
