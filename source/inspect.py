"""`topicvault inspect`: records of one object or of a backed-up topic, printed safely."""

from __future__ import annotations

import base64
import json
from typing import Iterator

from ..core.archive.checkpoints import load_state
from ..core.archive.commits import BackupState, ObjectEntry
from ..core.archive.conditional_writes import remembered_conditional_writes
from ..core.crypto import Keyring, ObjectBinding, is_sealed
from ..core.envelope import Record, batch_to_records
from ..core.errors import NoBackup, TopicvaultError
from ..core.stores.locations import open_store
from ..core.stores.store import ObjectStore
from ..core.text import iso, show_text
from ..formats import extension_of, format_for_extension
from .object_reader import object_bytes, read_partition


def records_of_object(store: ObjectStore, key: str, offset: int = 0, keyring: Keyring | None = None) -> Iterator[Record]:
    """The records of one object (any object topicvault can read, decrypted with `keyring`), from `offset` on."""
    data = store.get(key)
    # An encrypted object is bound to its commit entry (topic, partition, offsets): look it up.
    entry = _committed_entry(store, key, keyring) if is_sealed(data) else None
    table = format_for_extension(extension_of(key)).read(
        object_bytes(data, key, keyring, ObjectBinding.of(entry) if entry else None), key)
    for record in batch_to_records(table):
        if record.offset >= offset:
            yield record


def _committed_entry(store: ObjectStore, key: str, keyring: Keyring | None) -> ObjectEntry | None:
    for partition in load_state(store, keyring).partitions.values():
        for entry in partition.objects:
            if entry.key == key:
                return entry
    return None


def records_of_topic(store: ObjectStore, topic: str | None, partition: int | None, offset: int = 0,
                     keyring: Keyring | None = None) -> Iterator[Record]:
    """A topic's committed records (every topic's, by name, if `topic` is None), partition by partition in
    offset order, from `offset` on."""
    state = load_state(store, keyring)
    chosen = sorted((t, p) for (t, p) in state.partitions
                    if (topic is None or t == topic) and (partition is None or p == partition))
    if not state.last_sequence:
        raise NoBackup(store.uri)
    if not chosen and _saved(state, topic, partition):
        return  # a backup whose commits cover no offsets of these yet: no records (issue #50 item 18)
    if not chosen:
        what = f"partition {partition}" if topic is None else f"{topic}{'' if partition is None else f'[{partition}]'}"
        raise TopicvaultError(f"{what} is not in the backup at {store.uri}; `topicvault ls` lists what is")
    for topic_partition in chosen:
        entries = [e for e in state.partitions[topic_partition].objects if e.last_offset >= offset]
        for batch in read_partition(store, entries, keyring=keyring):
            for record in batch_to_records(batch):
                if record.offset >= offset:
                    yield record


def _saved(state: BackupState, topic: str | None, partition: int | None) -> bool:
    """Whether the commits saved the settings of `topic` (any, if None) with `partition` (any, if
    None), whether or not they cover offsets of it."""
    counts = [settings.get("partitions", 0) for name, settings in state.topics.items() if topic in (None, name)]
    return (topic is None and partition is None) or any(partition is None or partition < n for n in counts)


def show_bytes(data: bytes | None, limit: int = 200) -> str:
    """UTF-8 text with control characters escaped, else a bytes literal; null as `null`."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        shown = repr(data[:limit])
    else:
        shown = show_text(text[:limit])
    return shown + (f"…(+{len(data) - limit} bytes)" if len(data) > limit else "")


def text_line(record: Record) -> str:
    """One line per record, like a console consumer."""
    headers = ",".join(f"{show_text(name)}={show_bytes(value)}" for name, value in record.headers)
    return (f"{show_text(record.topic)}[{record.partition}]@{record.offset} {iso(record.timestamp_ms)} "
            f"key={show_bytes(record.key)} headers=[{headers}] value={show_bytes(record.value)}")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def json_line(record: Record) -> str:
    """One JSON object per record; bytes as base64, null kept."""
    return json.dumps({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp_ms, "timestampType": record.timestamp_type,
        "key": _b64(record.key), "value": _b64(record.value),
        "headers": [{"key": name, "value": _b64(value)} for name, value in record.headers],
    }, sort_keys=True)


def archive_listing(uri: str, store_options: dict[str, str]) -> tuple[BackupState, str | None]:
    """What `ls` shows of the location at `uri`: its state and what it remembers of conditional writes
    (core.archive.conditional_writes); NoBackup when it holds no commit."""
    store = open_store(uri, store_options)
    state = load_state(store)
    if not state.last_sequence:  # commits covering no offsets yet are a backup too (of topics with no records)
        raise NoBackup(uri)
    return state, remembered_conditional_writes(store)


def records_to_show(uri: str, store_options: dict[str, str], object_key: str | None, topic: str | None,
                    partition: int | None, offset: int, limit: int, keyring: Keyring | None) -> Iterator[Record]:
    """`inspect`: at most `limit` records of one object (`object_key`) or of a topic(-partition) (every
    topic's, by name, with neither), from `offset` on; both named is a one-line error."""
    store = open_store(uri, store_options)
    if object_key is not None and topic is not None:
        raise TopicvaultError("pass either --object KEY or --topic NAME (with --partition P), not both")
    records = (records_of_object(store, object_key, offset, keyring) if object_key
               else records_of_topic(store, topic, partition, offset, keyring))
    return _at_most(records, limit)


def _at_most(records: Iterator[Record], limit: int) -> Iterator[Record]:
    for count, record in enumerate(records):
        if count >= limit:
            break
        yield record
