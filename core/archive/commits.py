"""Commit records: the single truth of what a backup location holds.

Each backup run that moved data writes one JSON record
`_topicvault/commits/<sequence, 19 digits>.json` (core.archive_keys.commit_key), created only
if absent, so two runs that raced from the same previous state cannot both commit. A record
names, per topic-partition, the offset range it covers and every object in it. Objects no
record names are not part of the backup.

Maintenance commits (`compact`, `expire`) also remove objects from the state (`removed`) and
move a partition's start (`starts`). A reader that ignored those would see the replaced and
the replacing objects (every record twice), so such records carry format_version 2, which
topicvault before them refuses to read ("unsupported format_version 2"); backups still write
version 1, readable by every version. Removed objects are remembered as `retired` (with the
time of the commit) until they are deleted after a grace period (see source.maintenance.garbage).

Authentication (issue #39, docs/threat-model-encryption.md): a record written with a keyring
carries AUTHENTICATION_FIELD (core.crypto.authentication) over its body, which names the first
authenticated commit of the location (`authenticated_from`). Read with a keyring (read_commit):
a record whose authentication does not verify is refused; records without one are read only
while no authenticated record came before them (written by topicvault before #39: a warning
says how many), and refused after it, or when they say they were authenticated. Once folded,
every encrypted object they named that the state still holds must be sealed in container
version 1 (check_written_before_authentication, issue #50.1): one of version 2 (sealed only by
a topicvault that authenticates every commit it writes), a missing one or one that is no
container means their authentication was removed. Their ACLs and SCRAM users (`access`) are
dropped: an unauthenticated commit never carries cluster access into a restore.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping

from ..cluster.cluster_access import check_access_json
from ..crypto import (
    AUTHENTICATION_FIELD,
    CONTAINER_V2,
    MAGIC,
    Keyring,
    Unauthenticated,
    authentication,
    check_authentication,
    container_version,
)
from ..errors import ObjectNotFound, PreconditionFailed, TopicDeleted, TopicvaultError
from ..stores.store import ObjectInfo, ObjectStore
from .archive_keys import COMMITS_PREFIX, commit_key

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# Written only by commits that remove objects or move a start: older readers must refuse them.
MAINTENANCE_FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (FORMAT_VERSION, MAINTENANCE_FORMAT_VERSION)
COMMIT_KINDS = ("backup", "compact", "expire")
# Group snapshots kept per group in the folded state; beyond it the older half is thinned
# (every other one dropped), so the history keeps its whole span at a coarser step.
MAX_GROUP_SNAPSHOTS = 2000
# Commits of a partition made within this span of each other share one entry of its commit times
# (the later time kept, so an offset may look up to this much younger, never older).
COMMIT_TIMES_STEP_MS = 60_000


@dataclass(frozen=True)
class ObjectEntry:
    """One committed object: where it is and what it holds."""

    key: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int
    bytes: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    sha256: str  # of the stored bytes (the encrypted container, when encrypted)
    # Which key wrapped the object's data key (core.crypto key id); None: not encrypted.
    key_id: str | None = None
    # (schema id, keys and values carrying it) for the object's records in the schema registry's
    # wire format (formats.saved_registry.count_schema_ids), ascending by id. Held in memory only:
    # backup_record sums them into the commit's `schema_ids`, and an entry's JSON leaves them out,
    # so a topicvault before them still reads the commit (it refuses unknown entry fields).
    schema_ids: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict:
        """As stored in a commit record; key_id only when set, so unencrypted entries stay as before."""
        body = asdict(self)
        del body["schema_ids"]
        if self.key_id is None:
            del body["key_id"]
        return body


@dataclass(frozen=True)
class PartitionRange:
    """The offsets [start, end) of one topic-partition a commit covers (gaps allowed inside)."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class RemovedObject:
    """A committed object a maintenance commit takes out of the state (replaced or expired)."""

    topic: str
    partition: int
    key: str


@dataclass(frozen=True)
class PartitionStart:
    """The new first offset of a topic-partition's archive (expire dropped what lies before)."""

    topic: str
    partition: int
    start: int


class CommitConflict(TopicvaultError):
    """Another run wrote the commit record with this sequence first."""


@dataclass(frozen=True)
class CommitRecord:
    """What one backup run added, or what one compact or expire run replaced or dropped."""

    sequence: int
    created_ms: int
    ranges: tuple[PartitionRange, ...]
    objects: tuple[ObjectEntry, ...]
    topics: dict[str, dict] = field(default_factory=dict)  # topic -> TopicSettings.to_json()
    # Consumer-group offsets read just before this run's offset snapshot (None: not read):
    # {group: {"read_ms": ms, "offsets": {topic: {partition: next offset}}}}
    groups: dict[str, dict] | None = None
    # Written by `backup --follow`: {"id": run id, "batch": micro-batch id, "lag": {"topic:partition": records}}
    stream: dict | None = None
    # Kafka topic ID of each topic this run read (None: written before topic IDs were recorded).
    topic_ids: dict[str, str] | None = None
    # Offsets inside `ranges` that retention deleted before any backup could read them.
    lost: tuple[PartitionRange, ...] = ()
    # Topics whose groups `groups` covers, when not `topics` (a streamed commit saves no topic settings).
    group_topics: tuple[str, ...] | None = None
    # backup | compact | expire: only backups add offsets; the other two rewrite or drop objects.
    kind: str = "backup"
    removed: tuple[RemovedObject, ...] = ()
    starts: tuple[PartitionStart, ...] = ()
    # Retired objects found deleted: the state stops remembering them (so it does not grow for ever).
    forgotten: tuple[str, ...] = ()
    # "topic:partition" -> [offset, leader epoch] of the last record its range read: the next
    # backup reads that offset again first and finds the same epoch there, or the log was
    # truncated and rewritten (an unclean leader election) and it stops instead of splicing.
    last_records: dict[str, tuple[int, int]] | None = None
    # Sequence of the location's first authenticated commit (0: none before this one); written
    # (and authenticated) only with a keyring, as this record's own sequence if it is the first.
    authenticated_from: int = 0
    # The cluster's ACL bindings and SCRAM users (core.cluster.cluster_access.AccessState.to_json), in the commits
    # whose run found them changed; a part left out was not read.
    access: dict | None = None
    # The schema registry (formats.saved_registry's saved form), in the commits whose run found
    # it changed; kept as plain JSON here, checked where it is used.
    schema_registry: dict | None = None
    # Schema id -> keys and values carrying it in the wire format among the records this commit's
    # objects hold (from ObjectEntry.schema_ids); a backup's only, so ids are counted once.
    schema_ids: dict[int, int] | None = None

    @property
    def key(self) -> str:
        """The object key of this record in the commit log."""
        return commit_key(self.sequence)

    @property
    def is_maintenance(self) -> bool:
        """Removes objects or moves a start: unreadable to topicvault before format_version 2."""
        return bool(self.removed or self.starts or self.forgotten) or self.kind != "backup"

    def to_json(self, keyring: Keyring | None = None) -> bytes:
        """Serialise (stable key order, so identical records give identical bytes); with a
        keyring, authenticated by its sealing key (a fresh MAC data key each time)."""
        body = {
            "format_version": MAINTENANCE_FORMAT_VERSION if self.is_maintenance else FORMAT_VERSION,
            "sequence": self.sequence,
            "created_ms": self.created_ms,
            "topics": self.topics,
            "ranges": [asdict(r) for r in self.ranges],
            "objects": [o.to_json() for o in self.objects],
        }
        if self.groups is not None:
            body["groups"] = self.groups
        if self.stream is not None:
            body["stream"] = self.stream
        if self.topic_ids is not None:
            body["topic_ids"] = self.topic_ids
        if self.lost:
            body["lost"] = [asdict(r) for r in self.lost]
        if self.group_topics is not None:
            body["group_topics"] = list(self.group_topics)
        if self.kind != "backup":
            body["kind"] = self.kind
        if self.removed:
            body["removed"] = [asdict(r) for r in self.removed]
        if self.starts:
            body["starts"] = [asdict(s) for s in self.starts]
        if self.forgotten:
            body["forgotten"] = list(self.forgotten)
        if self.access is not None:
            body["access"] = self.access
        if self.schema_registry is not None:
            body["schema_registry"] = self.schema_registry
        if self.schema_ids:
            body["schema_ids"] = {str(i): n for i, n in sorted(self.schema_ids.items())}
        if self.last_records:
            body["last_records"] = {where: list(record) for where, record in self.last_records.items()}
        if keyring is not None:
            body["authenticated_from"] = self.authenticated_from or self.sequence
            body[AUTHENTICATION_FIELD] = authentication(_canonical(body), keyring.sealing)
        return json.dumps(body, sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str) -> "CommitRecord":
        """Parse a commit record, authenticated or not (read_commit checks that); a damaged one
        is a clear error naming its key."""
        body = _body(data, key)
        body.pop(AUTHENTICATION_FIELD, None)
        return cls._from_body(body, key)

    @classmethod
    def _from_body(cls, body: dict, key: str) -> "CommitRecord":
        try:
            if body.get("format_version") not in READABLE_FORMAT_VERSIONS:
                raise ValueError(f"unsupported format_version {body.get('format_version')} (written by a newer "
                                 "topicvault? upgrade to read it)")
            if body.get("kind", "backup") not in COMMIT_KINDS:
                raise ValueError(f"unknown kind {body.get('kind')!r}")
            return cls(
                sequence=int(body["sequence"]),
                created_ms=int(body["created_ms"]),
                topics=dict(body.get("topics", {})),
                ranges=tuple(PartitionRange(**r) for r in body["ranges"]),
                objects=tuple(ObjectEntry(**o) for o in body["objects"]),
                groups=body.get("groups"),
                stream=body.get("stream"),
                topic_ids=body.get("topic_ids"),
                lost=tuple(PartitionRange(**r) for r in body.get("lost", ())),
                group_topics=tuple(body["group_topics"]) if "group_topics" in body else None,
                kind=body.get("kind", "backup"),
                removed=tuple(RemovedObject(**r) for r in body.get("removed", ())),
                starts=tuple(PartitionStart(**r) for r in body.get("starts", ())),
                forgotten=tuple(str(k) for k in body.get("forgotten", ())),
                last_records={str(k): (int(v[0]), int(v[1])) for k, v in body["last_records"].items()}
                if "last_records" in body else None,
                authenticated_from=int(body.get("authenticated_from", 0)),
                access=check_access_json(body["access"]) if "access" in body else None,
                schema_registry=_registry_json(body["schema_registry"]) if "schema_registry" in body else None,
                schema_ids=_schema_ids_json(body["schema_ids"]) if "schema_ids" in body else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise TopicvaultError(f"commit record {key} is unreadable ({exc}): the backup state is damaged") from None


def _body(data: bytes, key: str) -> dict:
    try:
        body = json.loads(data)
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:
        raise TopicvaultError(f"commit record {key} is unreadable ({exc}): the backup state is damaged") from None
    return body


def read_commit(state: BackupState, data: bytes, key: str, keyring: Keyring | None) -> CommitRecord:
    """Parse the commit record `data` that follows `state`; with a keyring, refuse it (one line,
    Unauthenticated or KeyUnavailable) unless it is authenticated by one of its keys, or was
    written before the location's first authenticated commit (see the module doc)."""
    body = _body(data, key)
    auth = body.pop(AUTHENTICATION_FIELD, None)
    if keyring is not None and auth is not None:
        check_authentication(_canonical(body), auth, keyring, f"commit record {key}")
    record = CommitRecord._from_body(body, key)
    if keyring is not None:
        _check_authenticated_order(state, record, key, authenticated=auth is not None)
        if auth is None and record.access is not None:
            # Anyone who can write the bucket can write this block: it must never create ACLs
            # or users on a cluster (issue #50.1), even in a genuine pre-#39 commit.
            log.warning("warning: commit record %s is not authenticated: the ACLs and SCRAM users it saved are "
                        "ignored with keys given (restore --cluster-state restores none of them)", key)
            record = dataclasses.replace(record, access=None)
        if auth is None and record.schema_registry is not None:
            log.warning("warning: commit record %s is not authenticated: the schema registry it saved is ignored "
                        "with keys given", key)
            record = dataclasses.replace(record, schema_registry=None)
    return record


def _schema_ids_json(body: object) -> dict[int, int]:
    """A commit's schema id counts: {"id": count}, ids of 0..2^31-1, counts positive."""
    if not isinstance(body, dict):
        raise ValueError("schema_ids is not an object")
    counts = {int(i): n for i, n in body.items()}
    if any(not 0 <= i < 2**31 or not isinstance(n, int) or n < 1 for i, n in counts.items()):
        raise ValueError("schema_ids holds an id or a count out of range")
    return counts


def _registry_json(body: object) -> dict:
    """A saved schema registry as a commit record carries it: an object (its parts are checked
    by formats.saved_registry.check_saved where they are used)."""
    if not isinstance(body, dict):
        raise ValueError("schema_registry is not an object")
    return body


def _check_authenticated_order(state: BackupState, record: CommitRecord, key: str, authenticated: bool) -> None:
    """Records before the first authenticated one may lack authentication; none after it may."""
    first, said = state.authenticated_from, record.authenticated_from
    done = "; nothing was produced"
    if authenticated:
        if said == (first or record.sequence):
            return
        if not first and 0 < said < record.sequence:
            raise Unauthenticated(f"commit record {key} says the commits from {said} on are authenticated, but "
                                  f"commit {said} is not authenticated: someone without the key removed its "
                                  f"authentication (and may have changed it){done}")
        raise Unauthenticated(f"commit record {key} says the commits from {said} on are authenticated, but the "
                              f"first authenticated commit is {first or record.sequence}: the commit records were "
                              f"changed{done}")
    stripped = ("someone without the key removed its authentication (and may have changed it), or wrote it "
                f"without the key{done}")
    if first:
        raise Unauthenticated(f"commit record {key} is not authenticated, but commit {first} and later are "
                              f"(only commits written before topicvault authenticated them may lack it): {stripped}")
    if said:
        raise Unauthenticated(f"commit record {key} is not authenticated, but says the commits from {said} on "
                              f"are: {stripped}")


# Objects whose first bytes are read at once by check_written_before_authentication (each a round
# trip on S3; a location written before #39 may name thousands).
_CHECKING_THREADS = 16


def check_written_before_authentication(store: ObjectStore, state: BackupState, named_by: Mapping[str, str]) -> None:
    """Refuse (Unauthenticated, naming the commit) unless every encrypted object in `state` that an
    unauthenticated commit named (`named_by`: object key -> commit key) is sealed in container
    version 1, as topicvault sealed objects before it authenticated commits.

    Objects later commits removed are not checked (they may be deleted since); every other one
    is, so no decoy entry can hide a version 2 object (sealed only by a topicvault that
    authenticates every commit it writes), and a missing or unsealed one fails: one small read
    per object."""
    entries = [o for p in state.partitions.values() for o in p.objects if o.key_id and o.key in named_by]
    if not entries:
        return
    with ThreadPoolExecutor(min(_CHECKING_THREADS, len(entries)), thread_name_prefix="check") as pool:
        found = list(pool.map(lambda entry: _sealed_before_authentication(store, entry), entries))
    problems = sorted((named_by[entry.key], entry.key, problem) for entry, problem in zip(entries, found) if problem)
    if problems:
        key, object_key, problem = problems[0]
        raise Unauthenticated(f"commit record {key} is not authenticated, but names object {object_key}, which "
                              f"{problem}: someone without the key removed its authentication (and may have changed "
                              "it), or wrote it without the key; nothing was produced")


def _sealed_before_authentication(store: ObjectStore, entry: ObjectEntry) -> str | None:
    """Why `entry`'s object cannot have been written before authentication (None: it can)."""
    try:
        version = container_version(store.get_head(entry.key, len(MAGIC)))
    except ObjectNotFound:
        return "does not exist (a commit written before authentication names only objects that are there)"
    if version is None:
        return f"its entry says is encrypted (key {entry.key_id}) but is not an encrypted container"
    if version >= CONTAINER_V2:
        return ("is of container version 2, sealed only by a topicvault that authenticates every commit it "
                "writes")
    return None


def _canonical(body: dict) -> bytes:
    """The bytes a commit's authentication covers: its body without the authentication, as JSON
    parsed back would serialise (so writer and reader agree: an int dict key becomes a string,
    and sorts as one, only once parsed)."""
    return json.dumps(json.loads(json.dumps(body)), sort_keys=True, indent=1).encode()


@dataclass
class PartitionState:
    """A topic-partition as all commits together describe it."""

    topic: str
    partition: int
    start: int
    end: int
    objects: list[ObjectEntry] = field(default_factory=list)
    lost: list[PartitionRange] = field(default_factory=list)  # offsets deleted before they were backed up
    # When its offsets were committed, by the commits' own clock (not the records' timestamps, which
    # producers set): [end, first created_ms, last created_ms] per run of backup commits, in offset
    # order, each run spanning at most COMMIT_TIMES_STEP_MS; offsets before `end` and from the previous
    # run's end on were committed by then (see committed_ms). Dropped as the start moves past them.
    commit_times: list[tuple[int, int, int]] = field(default_factory=list)
    start_moved_ms: int = 0  # created_ms of the last commit that moved the start (an expire); 0: never moved

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)

    def add_commit_time(self, end: int, created_ms: int) -> None:
        """Record that a commit stamped `created_ms` covered offsets up to `end` (exclusive)."""
        if self.commit_times and created_ms - self.commit_times[-1][1] < COMMIT_TIMES_STEP_MS:
            _, first_ms, last_ms = self.commit_times[-1]
            self.commit_times[-1] = (end, first_ms, max(last_ms, created_ms))
        else:
            self.commit_times.append((end, created_ms, created_ms))

    def committed_ms(self, first_offset: int, last_offset: int) -> int | None:
        """When the last of offsets first..last was committed (at most COMMIT_TIMES_STEP_MS late;
        None: committed before commit times were kept)."""
        newest, begin = None, self.start
        for end, _, last_ms in self.commit_times:
            if end > first_offset and begin <= last_offset:
                newest = last_ms if newest is None else max(newest, last_ms)
            begin = end
        return newest

    def lost_notes(self) -> list[str]:
        """One line per lost range, as ls, verify and restore report it."""
        return [lost_note(r) for r in self.lost]


def lost_note(lost: PartitionRange) -> str:
    """The line naming offsets deleted by retention before any backup read them."""
    return (f"{lost.topic}[{lost.partition}]: offsets {lost.start}..{lost.end - 1} were deleted by retention on the "
            "cluster before any backup read them; the backup does not hold them")


@dataclass
class BackupState:
    """The fold of every commit record of a location."""

    last_sequence: int = 0
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    topics: dict[str, dict] = field(default_factory=dict)
    # Per group and topic, the offsets of the latest run that backed up that topic.
    groups: dict[str, dict] = field(default_factory=dict)  # {group: {"read_ms": ms, "offsets": {topic: {...}}}}
    # Per group, its snapshots over time, oldest first, each kept only when it changed (and
    # thinned past MAX_GROUP_SNAPSHOTS): [{"read_ms": ms, "offsets": {topic: {...}}}]; an empty
    # `offsets` means the group had no offsets on the backed-up topics from then on.
    group_history: dict[str, list[dict]] = field(default_factory=dict)
    last_stream: dict | None = None  # `stream` of the latest commit, if a followed backup wrote it
    topic_ids: dict[str, str] = field(default_factory=dict)  # topic -> Kafka topic ID the latest commit saw
    # Objects maintenance commits removed from the state, by key: created_ms of that commit. They
    # stay in the store for a grace period (a restore planned before may still read them).
    retired: dict[str, int] = field(default_factory=dict)
    # (offset, leader epoch) of the last record backed up of each partition, where known (CommitRecord.last_records).
    last_records: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # Sequence of the first commit record authenticated with a key (0: none); the records before
    # it were written by topicvault before it authenticated them (see read_commit).
    authenticated_from: int = 0
    # The latest saved ACL bindings and SCRAM users (CommitRecord.access, parts merged), and every
    # change of them: [{"read_ms": commit time, "access": {...}}], oldest first.
    access: dict = field(default_factory=dict)
    access_history: list[dict] = field(default_factory=list)
    # Every saved schema registry (CommitRecord.schema_registry), each as of its commit:
    # [{"read_ms": commit time, "registry": {...}}], oldest first; the last is the latest.
    registry_history: list[dict] = field(default_factory=list)
    # Schema id -> keys and values carrying it, over every backup commit (CommitRecord.schema_ids):
    # records once backed up, expired ones too.
    schema_ids: dict[int, int] = field(default_factory=dict)

    def end_offset(self, topic: str, partition: int) -> int | None:
        """The committed end (next offset to back up) of a topic-partition, if backed up before."""
        state = self.partitions.get((topic, partition))
        return state.end if state else None

    def apply(self, record: CommitRecord, key: str) -> None:
        """Add one commit record; ranges must continue exactly where the previous ones ended."""
        for r in record.ranges:
            state = self.partitions.get((r.topic, r.partition))
            if state is None:
                self.partitions[(r.topic, r.partition)] = PartitionState(r.topic, r.partition, r.start, r.end)
            elif r.start != state.end:
                raise TopicvaultError(
                    f"commit record {key} starts {r.topic}[{r.partition}] at offset {r.start} but the "
                    f"previous commits end at {state.end}: the backup state is inconsistent"
                )
            else:
                state.end = r.end
            if r.end > r.start:
                self.partitions[(r.topic, r.partition)].add_commit_time(r.end, record.created_ms)
            last = (record.last_records or {}).get(f"{r.topic}:{r.partition}")
            if last is not None:
                self.last_records[(r.topic, r.partition)] = last
            elif r.end > r.start:
                # Records after the one known (a DataFrame write or a micro-batch records none):
                # checking that one would mean reading them all again first.
                self.last_records.pop((r.topic, r.partition), None)
        for gone in record.forgotten:
            self.retired.pop(gone, None)
        self._remove(record, key)
        for entry in record.objects:
            state = self.partitions.get((entry.topic, entry.partition))
            if state is None:
                raise TopicvaultError(f"commit record {key} names object {entry.key} of {entry.topic}"
                                      f"[{entry.partition}], which no commit covers: the backup state is inconsistent")
            state.objects.append(entry)
        for lost in record.lost:
            self.partitions[(lost.topic, lost.partition)].lost.append(lost)
        self._move_starts(record, key)
        self.topic_ids.update(record.topic_ids or {})
        for topic, info in record.topics.items():
            self.topics[topic] = info
        if record.groups is not None:
            self._apply_groups(record)
        if record.access is not None:
            self._apply_access(record)
        if record.schema_registry is not None:
            self.registry_history.append({"read_ms": record.created_ms, "registry": record.schema_registry})
        for schema_id, count in (record.schema_ids or {}).items():
            self.schema_ids[schema_id] = self.schema_ids.get(schema_id, 0) + count
        if record.kind == "backup":  # compact and expire back nothing up: the follower's last batch stays
            self.last_stream = record.stream
        if record.authenticated_from and not self.authenticated_from:
            self.authenticated_from = record.authenticated_from
        self.last_sequence = record.sequence

    def _remove(self, record: CommitRecord, key: str) -> None:
        by_partition: dict[tuple[str, int], set[str]] = {}
        for removed in record.removed:
            by_partition.setdefault((removed.topic, removed.partition), set()).add(removed.key)
        for (topic, partition), keys in by_partition.items():
            state = self.partitions.get((topic, partition))
            kept = [o for o in state.objects if o.key not in keys] if state else []
            if state is None or len(state.objects) - len(kept) != len(keys):
                raise TopicvaultError(f"commit record {key} removes objects of {topic}[{partition}] that the "
                                      "commits before it do not hold: the backup state is inconsistent")
            state.objects = kept
            self.retired.update(dict.fromkeys(sorted(keys), record.created_ms))

    def _move_starts(self, record: CommitRecord, key: str) -> None:
        for moved in record.starts:
            state = self.partitions.get((moved.topic, moved.partition))
            if state is None or not state.start <= moved.start <= state.end or any(
                    o.first_offset < moved.start for o in state.objects):
                raise TopicvaultError(f"commit record {key} starts {moved.topic}[{moved.partition}] at offset "
                                      f"{moved.start}, which its objects or range contradict: the backup state "
                                      "is inconsistent")
            state.start = moved.start
            state.start_moved_ms = max(state.start_moved_ms, record.created_ms)
            state.commit_times = [t for t in state.commit_times if t[0] > moved.start]
            # Offsets before the start are gone from the archive, lost or not.
            state.lost = [PartitionRange(r.topic, r.partition, max(r.start, moved.start), r.end)
                          for r in state.lost if r.end > moved.start]

    def _apply_groups(self, record: CommitRecord) -> None:
        # A run that read the groups of a topic read every group's offsets on it: replace what older runs saw.
        read_topics = record.group_topics if record.group_topics is not None else tuple(record.topics)
        snapshots = record.groups or {}
        touched = set(snapshots)
        for group in list(self.groups):
            offsets = self.groups[group]["offsets"]
            for topic in read_topics:
                if offsets.pop(topic, None) is not None:
                    touched.add(group)
            if not offsets:
                del self.groups[group]
        for group, snapshot in snapshots.items():
            saved = self.groups.setdefault(group, {"read_ms": snapshot["read_ms"], "offsets": {}})
            saved["read_ms"] = max(saved["read_ms"], snapshot["read_ms"])
            saved["offsets"].update({t: dict(o) for t, o in snapshot["offsets"].items()})
        # A group gone from these topics was seen gone when the others were read.
        gone_ms = min((s["read_ms"] for s in snapshots.values()), default=record.created_ms)
        for group in sorted(touched):
            current = self.groups.get(group, {"offsets": {}})
            snapshot = snapshots.get(group, {"read_ms": gone_ms})
            self._remember(group, snapshot["read_ms"], current["offsets"], snapshot.get("uncertain_ms", 0))

    def _remember(self, group: str, read_ms: int, offsets: dict, uncertain_ms: int = 0) -> None:
        history = self.group_history.get(group, [])
        if (history[-1]["offsets"] if history else {}) == offsets:
            return  # unchanged, or a group never seen before that has no offsets
        history = self.group_history.setdefault(group, history)
        # uncertain_ms: how far off read_ms may be (cluster.group_offsets, cluster.with_clock_skew); kept when known.
        history.append({"read_ms": read_ms, "offsets": {t: dict(o) for t, o in offsets.items()},
                        **({"uncertain_ms": uncertain_ms} if uncertain_ms else {})})
        if len(history) > MAX_GROUP_SNAPSHOTS:
            half = len(history) // 2
            history[:half] = history[:half:2]

    def _apply_access(self, record: CommitRecord) -> None:
        merged = {**self.access, **(record.access or {})}
        if merged != self.access:
            self.access = merged
            self.access_history.append({"read_ms": record.created_ms, "access": merged})

    def access_at(self, at_ms: int | None) -> dict | None:
        """The saved access state as of `at_ms` (None: the latest); None when none was saved by then."""
        if at_ms is None:
            return self.access or None
        earlier = [h for h in self.access_history if h["read_ms"] <= at_ms]
        return earlier[-1]["access"] if earlier else None

    def registry_at(self, at_ms: int | None) -> dict | None:
        """The saved schema registry as of `at_ms` (None: the latest); None when none was saved by then."""
        earlier = [h for h in self.registry_history if at_ms is None or h["read_ms"] <= at_ms]
        return earlier[-1]["registry"] if earlier else None

    def group_offsets_on(self, topics: Iterable[str]) -> dict[tuple[str, str], dict]:
        """The latest saved offsets of every group on these topics, by (group, topic)."""
        wanted = set(topics)
        return {(g, t): offsets for g, snapshot in self.groups.items()
                for t, offsets in snapshot["offsets"].items() if t in wanted}

    def groups_at(self, at_ms: int | None) -> dict[str, dict]:
        """Each group's saved offsets as of `at_ms` (its latest snapshot read at or before then),
        in the form of `groups`; None: the latest. Groups with no offsets then are left out."""
        if at_ms is None:
            return self.groups
        found = {}
        for group, history in self.group_history.items():
            earlier = [s for s in history if s["read_ms"] <= at_ms]
            if earlier and earlier[-1]["offsets"]:
                found[group] = earlier[-1]
        return found

    def group_span(self, group: str) -> tuple[int, int, int]:
        """(first read_ms, last read_ms, snapshots) of a group's saved history."""
        history = self.group_history.get(group, [])
        return history[0]["read_ms"], history[-1]["read_ms"], len(history)


def check_topic_ids(saved: Mapping[str, str], live: Mapping[str, str], location: str) -> None:
    """Refuse a topic whose Kafka topic ID differs from the one the location's commits recorded.

    A changed ID means the topic was deleted and re-created: its offsets start again, so
    appending it to the old history would splice two topics. A topic without a saved ID
    (commits older than topic IDs) or without a live ID (a broker that reports none) is accepted.
    """
    for topic, now in sorted(live.items()):
        before = saved.get(topic)
        if before and now and before != now:
            raise TopicDeleted(
                f"topic {topic} was deleted and re-created since the last backup at {location} "
                f"(topic id {before}, now {now}): back up the new topic to a new location"
            )


def load_commits(store: ObjectStore) -> list[tuple[str, CommitRecord]]:
    """Every commit record of the location, in sequence order (authentication not checked)."""
    records = []
    for info in store.list(COMMITS_PREFIX):
        if info.key.endswith(".json"):
            records.append((info.key, CommitRecord.from_json(store.get(info.key), info.key)))
    records.sort(key=lambda pair: pair[1].sequence)
    for expected, (key, record) in enumerate(records, start=1):
        if record.sequence != expected:
            raise TopicvaultError(f"commit record {key} has sequence {record.sequence}, expected {expected}")
    return records


def fold_commits(store: ObjectStore, keyring: Keyring | None = None) -> BackupState:
    """Fold every commit record of the location into one state (no checkpoint used; with a
    keyring, each checked by read_commit)."""
    state = BackupState()
    fold_records(store, state, list(store.list(COMMITS_PREFIX)), keyring)
    return state


def fold_records(store: ObjectStore, state: BackupState, infos: list[ObjectInfo], keyring: Keyring | None,
                 on_commit: Callable[[CommitRecord], None] | None = None) -> None:
    """Fold the commit records listed in `infos` (those after `state`, in order) into `state`,
    each checked by read_commit with a keyring; `on_commit` sees each once folded. With a
    keyring, the records read without authentication are named in one warning (once per
    process and location: see warn_unauthenticated)."""
    expected, unauthenticated = state.last_sequence + 1, 0
    named_by: dict[str, str] = {}  # object key -> the unauthenticated commit that named it
    infos = [i for i in infos if i.key.endswith(".json")]
    for info in infos:
        record = read_commit(state, store.get(info.key), info.key, keyring)
        if record.sequence != expected:
            raise TopicvaultError(f"commit record {info.key} has sequence {record.sequence}, expected {expected}")
        state.apply(record, info.key)
        if not state.authenticated_from:
            unauthenticated += 1
            named_by.update((o.key, info.key) for o in record.objects)
        if on_commit is not None:
            on_commit(record)
        expected += 1
    if infos:
        for partition in state.partitions.values():
            partition.objects.sort(key=lambda o: o.first_offset)
    if keyring is not None and unauthenticated:
        check_written_before_authentication(store, state, named_by)
        warn_unauthenticated(store.uri, unauthenticated)


@functools.lru_cache(maxsize=None)
def warn_unauthenticated(uri: str, count: int) -> None:
    """Say (once per process, so once per command) that `count` commit records of `uri` were
    read, with keys, without authentication."""
    records = "1 commit record is" if count == 1 else f"{count} commit records are"
    log.warning("warning: %s: %s not authenticated (written by topicvault before it authenticated commits, and "
                "no authenticated commit comes before them): read as they are, their object lists cannot be "
                "checked against the key (each object still is: decrypted, bound to its name and, from container "
                "version 2 on, to its commit entry); see docs/threat-model-encryption.md", uri, records)


def write_commit(store: ObjectStore, record: CommitRecord, keyring: Keyring | None = None) -> str:
    """Write a commit record (authenticated with a keyring) only if no record with its sequence
    exists; return its key.

    Raises CommitConflict when another run's record holds the sequence, CommitOutcomeUnknown
    when the put failed and whether the record landed cannot be read back."""
    return write_commit_bytes(store, record, record.to_json(keyring))


def write_commit_bytes(store: ObjectStore, record: CommitRecord, data: bytes) -> str:
    """write_commit of `record` serialised as `data`."""
    key = commit_key(record.sequence)
    try:
        store.put(key, data, if_none_match=True)
    except PreconditionFailed:
        # A retried put can fail because its own first attempt landed (a reply lost after the write).
        if _held_record(store, key, data, "its conditional write was refused") == data:
            return key
        raise CommitConflict(
            f"another backup committed to {store.uri} at the same time ({key} exists): "
            "nothing of this run was committed; run the backup again to continue from its position"
        ) from None
    except TopicvaultError as failed:
        # The request may have landed all the same (the reply lost, every retry failed).
        if _held_record(store, key, data, f"the write failed ({failed})") == data:
            return key
        raise
    return key


class CommitOutcomeUnknown(TopicvaultError):
    """The commit record may or may not have landed, and reading it back failed."""


def _held_record(store: ObjectStore, key: str, data: bytes, what: str) -> bytes | None:
    """The bytes `key` holds now (None: absent), to tell whether a failed write landed; raises
    CommitOutcomeUnknown when they cannot be read."""
    try:
        return store.get(key)
    except ObjectNotFound:
        return None
    except TopicvaultError as exc:
        raise CommitOutcomeUnknown(
            f"whether commit {key} landed in {store.uri} is unknown: {what}, and reading it back failed "
            f"({exc}); a rerun is safe: it reads what was committed and continues from there (the "
            "objects of this run, committed or not, are never counted twice)"
        ) from None
