"""Read a topic-partition's committed objects back as envelope batches, in offset order."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.archive.commits import ObjectEntry
from ..core.crypto import Keyring, ObjectBinding, is_sealed, open_data_key, refuse_plaintext, require_keys, unseal
from ..core.envelope import ARROW_SCHEMA
from ..core.errors import CLI_WORDING, CorruptObject, ObjectNotFound, TopicvaultError, Wording
from ..core.stores.store import ObjectStore, ReadBuffer
from ..formats import extension_of, format_for_extension

READ_BATCH_RECORDS = 50_000
# About this many bytes of records are decoded at a time: 50,000 records of 2 KB decoded
# at once (and turned into Python bytes for the producer) held 100s of MiB in a worker.
READ_BATCH_BYTES = 8 * 1024 * 1024
ON_ERROR = ("stop", "skip")


@dataclass(frozen=True)
class SkippedObject:
    """An object a restore left out because it could not be read (--on-error skip)."""

    key: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int
    reason: str

    def describe(self) -> str:
        """One line naming what is missing from the restore and why."""
        return (f"{self.topic}[{self.partition}] offsets {self.first_offset}..{self.last_offset} left out: "
                f"object {self.key} ({self.records} records) cannot be read: {self.reason}")


def check_on_error(value: str) -> str:
    """`--on-error` checked: stop (the default) or skip."""
    if value not in ON_ERROR:
        raise TopicvaultError(f"bad --on-error {value!r}: use stop (end the restore at an unreadable object) "
                              "or skip (leave it out, name it, restore the rest)")
    return value


def read_object(store: ObjectStore, entry: ObjectEntry, keyring: Keyring | None = None) -> pa.Table:
    """Read one committed object and check it against its commit entry (checksum, count, offsets)."""
    return pa.Table.from_batches(list(read_object_batches(store, entry, keyring)), schema=ARROW_SCHEMA)


def read_object_batches(store: ObjectStore, entry: ObjectEntry, keyring: Keyring | None = None,
                        buffer: ReadBuffer | None = None, allow_plaintext: bool = False) -> Iterator[pa.RecordBatch]:
    """One committed object's records as batches, checked against its commit entry first.

    The checksum, the record count and the offsets (first, last, ascending) are all checked
    before the first record is yielded, so a damaged object stops a restore before any of
    its records is produced; the records themselves are decoded a batch at a time, each
    checked to be of the entry's topic and partition before it is yielded (an object named by
    another topic's entry holds none of that topic's records). With `buffer`, an unencrypted
    object of a format that copies what it decodes is read into it (see ReadBuffer): the next
    object read into the same buffer must wait until these batches are taken.

    With a keyring an unencrypted object is refused (anyone can write one) unless
    `allow_plaintext` (compact, which encrypts such objects of a location backed up without a
    key before).
    """
    if keyring is not None and not entry.key_id and not allow_plaintext:
        refuse_plaintext(entry.key)
    object_format = format_for_extension(extension_of(entry.key))
    data = stored_bytes(store, entry, buffer if object_format.reads_views and not entry.key_id else None)
    if entry.key_id and not is_sealed(data):
        # Its commit says it was encrypted: plaintext in its place is a substitution, not a backup.
        raise CorruptObject(f"object {entry.key} was committed encrypted (key {entry.key_id}) but is not: "
                            "it was replaced; restore stops before producing anything of it")
    data = object_bytes(data, entry.key, keyring, ObjectBinding.of(entry))
    offsets, batches = object_format.read_stream(data, entry.key, READ_BATCH_RECORDS, READ_BATCH_BYTES)
    del data  # the reader keeps what it still needs
    count = len(offsets)
    first, last = (offsets[0].as_py(), offsets[-1].as_py()) if count else (None, None)
    if (count, first, last) != (entry.records, entry.first_offset, entry.last_offset):
        raise CorruptObject(
            f"object {entry.key} holds {count} records (offsets {first}..{last}) but its commit "
            f"says {entry.records} ({entry.first_offset}..{entry.last_offset})"
        )
    if count > 1 and not pc.all(pc.greater(offsets.slice(1), offsets.slice(0, count - 1))).as_py():
        raise CorruptObject(f"object {entry.key} holds records out of offset order")
    del offsets
    for batch in batches:
        _check_partition(batch, entry)
        yield batch


def _check_partition(batch: pa.RecordBatch, entry: ObjectEntry) -> None:
    """Every record of `batch` is of the entry's topic and partition."""
    same = pc.and_(pc.equal(batch.column("topic"), entry.topic), pc.equal(batch.column("partition"), entry.partition))
    if batch.num_rows and not pc.all(same).as_py():
        row = pc.index(same, False).as_py()
        raise CorruptObject(
            f"object {entry.key} holds records of {batch.column('topic')[row].as_py()}"
            f"[{batch.column('partition')[row].as_py()}] but its commit names it as {entry.topic}[{entry.partition}]: "
            "the commit records or the object were changed; nothing of it is produced"
        )


def stored_bytes(store: ObjectStore, entry: ObjectEntry, buffer: ReadBuffer | None = None) -> bytes | memoryview:
    """A committed object's stored bytes, checked against the checksum its commit recorded (over
    the stored bytes, so damage to an encrypted object is found without its key); read into
    `buffer` where the store can (ObjectStore.get_into)."""
    try:
        data = store.get(entry.key) if buffer is None else store.get_into(entry.key, buffer)
    except ObjectNotFound:
        raise ObjectNotFound(
            f"object {entry.key} named by the commit records was not found in {store.uri}: if a compact or expire "
            "replaced it after this was planned and its grace period has passed, run again (a restore under the "
            "same restore id continues from the current state); otherwise the archive was damaged"
        ) from None
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise CorruptObject(
            f"object {entry.key} does not match the checksum its commit recorded: it was changed or damaged; "
            "restore stops before producing anything of it"
        )
    return data


def object_bytes(stored: bytes, key: str, keyring: Keyring | None, binding: ObjectBinding | None) -> bytes:
    """The format bytes of a stored object: decrypted when it is an encrypted container
    (authenticated against its key and what its commit entry says it holds, `binding`; without
    the right key a one-line error names the object)."""
    return unseal(bytes(stored), key, keyring, binding) if is_sealed(stored) else stored


def check_keys_open(store: ObjectStore, entries: Iterable[ObjectEntry], keyring: Keyring | None,
                    allow_plaintext: bool = False, wording: Wording = CLI_WORDING) -> None:
    """Before anything is produced: every encrypted object names a key that was given, and each
    key really opens a data key (the smallest object of each key is tried: a KMS key that can
    be described but not used for Decrypt fails here, not halfway through a restore)."""
    entries = list(entries)
    require_keys(entries, keyring, allow_plaintext, wording)
    smallest: dict[str, ObjectEntry] = {}
    for entry in entries:
        if entry.key_id and (entry.key_id not in smallest or entry.bytes < smallest[entry.key_id].bytes):
            smallest[entry.key_id] = entry
    for entry in smallest.values():
        open_data_key(stored_bytes(store, entry), entry.key, keyring)


def read_partition(
    store: ObjectStore, entries: list[ObjectEntry], skip: Callable[[ObjectEntry, str], None] | None = None,
    keyring: Keyring | None = None, ends_if_left_out: Callable[[ObjectEntry], bool] = lambda entry: False,
) -> Iterator[pa.RecordBatch]:
    """Yield a topic-partition's records in offset order, one object at a time.

    Each object is checked before any of its records is yielded (see read_object_batches), so
    a corrupt object stops the restore before producing past the corruption. With `skip`, an
    object that cannot be read (damaged, missing, undecodable) is left out whole instead and
    `skip(entry, reason)` is called; the partition goes on with the next object, unless
    `ends_if_left_out(entry)` says the selection may end inside it. Objects are read lazily: a
    consumer that stops early never reads the rest.
    """
    previous_last = -1
    buffer = ReadBuffer()  # one object is read at a time: each into the same memory
    for entry in sorted(entries, key=lambda e: e.first_offset):
        if entry.first_offset <= previous_last:
            raise CorruptObject(f"object {entry.key} overlaps the previous object (offset {entry.first_offset})")
        previous_last = entry.last_offset
        if skip is None:
            yield from read_object_batches(store, entry, keyring, buffer)
            continue
        try:
            # Decoded whole before any record is yielded, so an error anywhere in it leaves it out
            # whole: never half an object (memory: one object's records, bounded by --max-bytes).
            batches = list(read_object_batches(store, entry, keyring, buffer))
        except ObjectNotFound:
            # Not the stop-mode hint (run again): records after it are produced, so a rerun cannot put it in.
            reason = (f"not found in {store.uri} (a compact or expire may have replaced it after the restore was "
                      "planned and its --grace passed): restore these offsets into a new topic with a new --restore-id")
        except CorruptObject as exc:  # formats raise CorruptObject for bytes they cannot decode
            # Any other error (network, credentials) says nothing about the object: it stops the restore.
            reason = str(exc)
        else:
            yield from batches
            continue
        skip(entry, reason)
        if ends_if_left_out(entry):
            return
