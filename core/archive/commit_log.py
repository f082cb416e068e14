"""The commit log: the only way anything is added to an archive's history is `append`.

A location's truth is its commit records 1, 2, 3, … (core.commits: the record format and how
records fold into a BackupState); core.checkpoints reads the log (load_state, read_forward).
Every writer (a backup run, a `backup --follow` micro-batch, a DataFrame write, compact,
expire) appends one record through `append`, which:

1. takes the commit turn where the store ignores conditional writes (core.conditional_writes)
   and then reads the commits forward: under the turn they are all there are;
2. builds the record on the state as last read (the caller's `build`: `backup_record` or
   `maintenance_record` with what the run did; it re-checks what the record depends on);
3. checks that every object the record adds is still in the store (core.leases: a garbage
   collection may have deleted a run's objects while its lease had lapsed);
4. writes the record only if its sequence is free (core.commits.write_commit_bytes) and, every
   CHECKPOINT_INTERVAL records, a checkpoint (best effort);
5. when another writer took that sequence first, reads the new records forward and goes back
   to 2 (at most COMMIT_ATTEMPTS times).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from ..crypto import Keyring
from ..errors import TopicvaultError
from ..stores.store import ObjectStore
from .checkpoints import CHECKPOINT_INTERVAL, read_forward, write_checkpoint
from .commits import (
    BackupState,
    CommitConflict,
    CommitRecord,
    ObjectEntry,
    PartitionRange,
    PartitionStart,
    RemovedObject,
    write_commit_bytes,
)
from .conditional_writes import commit_turn
from .leases import check_objects_held

# How often a writer re-reads the state and rebuilds its record after losing a race.
COMMIT_ATTEMPTS = 5

Build = Callable[[BackupState], CommitRecord]


def append(store: ObjectStore, state: BackupState, build: Build, keyring: Keyring | None = None) -> CommitRecord:
    """Append the record `build` makes from `state` (the location's state as last read) to the
    commit log of `store`; return it as written (its key: `record.key`).

    When another writer committed that sequence first (a follower's micro-batch beside a compact,
    say), the records it added are read forward into `state` and `build` runs again on the new
    state: `build` re-checks whatever its record depends on (a backup that its ranges still
    continue, a compact that the objects it replaces are still there) and raises if not.
    """
    with commit_turn(store) as turn:
        if turn is not None:
            # The store ignores conditional writes: only the commits read under the turn are
            # sure to be all there are, and nobody else commits until it is given back.
            state = read_forward(store, state, keyring=keyring)
        for attempt in range(COMMIT_ATTEMPTS):
            _check_authenticated(store, state, keyring)
            record = build(state)
            check_objects_held(store, record)  # every attempt: time passed since the last one
            # Under a turn the commit goes through a store that gives up before the turn may lapse.
            writer = store if turn is None else turn.bounded_store()
            try:
                commit_with_checkpoint(writer, state, record, keyring)
                return record
            except CommitConflict:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                state = read_forward(store, state, keyring=keyring)
    raise AssertionError("unreachable")


def _check_authenticated(store: ObjectStore, state: BackupState, keyring: Keyring | None) -> None:
    """A record no key vouches for after authenticated ones makes every reader given the key
    refuse the whole location: refuse to write one."""
    if keyring is None and state.authenticated_from:
        raise TopicvaultError(
            f"the backup at {store.uri} is encrypted and its commit records authenticated: pass its "
            "--encryption-key (a commit written without it would lock out every reader given the key); "
            "nothing was committed")


def commit_with_checkpoint(store: ObjectStore, state: BackupState, record: CommitRecord,
                           keyring: Keyring | None = None) -> str:
    """Write `record` (authenticated with a keyring) on top of `state`, the fold of every record
    before it, only if its sequence is free; every CHECKPOINT_INTERVAL records (and the first
    authenticated one after unauthenticated ones) also write a checkpoint (best effort). The
    write step of `append`, without build or retry (tests write crafted records with it)."""
    data = record.to_json(keyring)
    key = write_commit_bytes(store, record, data)
    # The first commit with a key onto a location written before commits were authenticated
    # checkpoints at once: readers then start from it instead of reading (unauthenticated, with a
    # warning and a small read of an object each) every commit before it.
    first_authenticated = keyring is not None and not state.authenticated_from and record.sequence > 1
    if record.sequence % CHECKPOINT_INTERVAL == 0 or first_authenticated:
        write_checkpoint(store, state, record, keyring, data)
    return key


# --- building the record a writer appends ----------------------------------------------


def backup_record(
    state: BackupState, ranges: Iterable[PartitionRange], objects: Iterable[ObjectEntry], **fields: object,
) -> CommitRecord:
    """The backup record that follows `state`: the next sequence number, stamped now, with `fields`
    (see CommitRecord). Each range must start where `state` ends its partition: a run that another
    one overtook while it read is refused, and nothing of it is committed."""
    ranges = tuple(ranges)
    for r in ranges:
        committed = state.end_offset(r.topic, r.partition)
        if committed is not None and committed != r.start:
            raise TopicvaultError(
                f"another backup committed {r.topic}[{r.partition}] up to {committed} while this one ran: "
                "nothing of this run was committed; run the backup again"
            )
    objects = tuple(objects)
    schema_ids: dict[int, int] = {}
    for entry in objects:  # the objects' own counts, summed: the commit is what keeps them
        for schema_id, count in entry.schema_ids:
            schema_ids[schema_id] = schema_ids.get(schema_id, 0) + count
    return CommitRecord(state.last_sequence + 1, int(time.time() * 1000), ranges, objects,
                        authenticated_from=state.authenticated_from, schema_ids=schema_ids or None, **fields)


def maintenance_record(state: BackupState, kind: str, removed: Iterable[RemovedObject], *,
                       objects: Iterable[ObjectEntry] = (), starts: Iterable[PartitionStart] = (),
                       forgotten: tuple[str, ...] = ()) -> CommitRecord:
    """The compact or expire record (`kind`) that follows `state`: it covers no new offsets, adds
    `objects` (compact's merged ones), removes `removed` and moves partition `starts` (expire)."""
    return CommitRecord(
        sequence=state.last_sequence + 1,
        created_ms=int(time.time() * 1000),
        ranges=(),
        objects=tuple(objects),
        kind=kind,
        removed=tuple(removed),
        starts=tuple(starts),
        forgotten=forgotten,
        authenticated_from=state.authenticated_from,
    )
