"""A restore's own records: its state and, once finished, its offset map.

The state holds, per target partition, the end offset found when the restore first started.
The target partition then is its own progress record: everything after that offset was written
by this restore, in source order, so a resumed task counts it and continues after it.

Restore never writes into the archive it reads (it may be read-only, immutable, or a peer
sink's). Its records live in a state store: `--state URI` (any store URI), else
$TOPICVAULT_STATE_DIR, else $XDG_STATE_HOME/topicvault or ~/.local/state/topicvault, under
`restores/<archive hash>/<restore id>/`.

Nothing of a restore's own is ever read from the archive: whoever can write the bucket could
plant a state there (start offsets that skip the non-empty check, configs for any topic).
Restores started by older versions kept theirs in the archive under `_topicvault/restores/<id>/`;
the user imports one by naming it (`import_restore_records`, restore --import-state), once.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ..core.archive.archive_keys import LEGACY_RESTORES_PREFIX, legacy_restore_prefix
from ..core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from ..core.store import ObjectStore

STATE_DIR_ENV = "TOPICVAULT_STATE_DIR"
# In the archive: never read, only imported by name (the name kept for source.restore).
STATE_NAME = "state.json"
# Any one record of a restore, as stored or unpacked, is at most this large: a peer archive of a
# million objects saves a list of about 100 MB; a record past this is damaged or hostile.
MAX_STATE_BYTES = 256 * 2**20
_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")


def default_state_uri() -> str:
    """Where restore records go without --state: $TOPICVAULT_STATE_DIR, else the XDG state directory."""
    if os.environ.get(STATE_DIR_ENV):
        return os.environ[STATE_DIR_ENV]
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "topicvault")


def archive_identity(archive: ObjectStore) -> str:
    """The archive's URI in one spelling, whatever form the user gave (path, file://, s3a://, slashes)."""
    root = getattr(archive, "root", None)
    if root is not None:  # a local directory: symlinks and relative paths resolved
        return "file://" + str(Path(root).resolve())
    bucket = getattr(archive, "bucket", None)
    if bucket is not None:  # the endpoint is left out: bucket names are global on AWS
        return f"s3://{bucket}/{getattr(archive, 'prefix', '')}".rstrip("/")
    return archive.uri


def check_restore_id(restore_id: str) -> str:
    """`restore_id` if it can name a directory and an object key, else a TopicvaultError."""
    if not _ID_PATTERN.fullmatch(restore_id):
        raise TopicvaultError(f"bad --restore-id {restore_id!r}: use letters, digits, '.', '_' or '-'")
    return restore_id


@dataclass(frozen=True)
class RestoreRecords:
    """The records of the restores of one archive, kept in `state` (the archive is only named)."""

    state: ObjectStore
    archive: ObjectStore

    @property
    def prefix(self) -> str:
        """Key prefix of this archive's restores in the state store."""
        return f"restores/{hashlib.sha256(archive_identity(self.archive).encode()).hexdigest()[:16]}/"

    def key(self, restore_id: str, name: str) -> str:
        """Key of one record of a restore in the state store."""
        return f"{self.prefix}{check_restore_id(restore_id)}/{name}"

    def read(self, restore_id: str, name: str) -> bytes | None:
        """A record of the restore from the state store; None if absent (never from the archive)."""
        try:
            return self.state.get(self.key(restore_id, name))
        except ObjectNotFound:
            return None

    def planted_in_archive(self, restore_id: str) -> bool:
        """Whether the archive holds a state for this id where older versions kept theirs (it is not read)."""
        key = legacy_restore_prefix(check_restore_id(restore_id)) + STATE_NAME
        return any(info.key == key for info in self.archive.list(key))

    def write(self, restore_id: str, name: str, body: bytes, *, only_new: bool = False) -> str:
        """Write a record to the state store (never the archive); returns its key."""
        key = self.key(restore_id, name)
        try:
            self.state.put(key, body, if_none_match=only_new)
        except PreconditionFailed:
            raise
        except TopicvaultError as exc:
            raise TopicvaultError(
                f"cannot save restore state in {self.state.uri} ({exc}): pass --state URI, a directory or s3:// "
                f"location the restore can write (or set {STATE_DIR_ENV}); the archive itself is only read"
            ) from None
        return key

    def states(self) -> list[dict]:
        """The bodies of every saved state of this archive's restores in the state store."""
        bodies = []
        for info in self.state.list(self.prefix):
            if not info.key.endswith("/" + STATE_NAME):
                continue
            try:
                bodies.append(json.loads(self.state.get(info.key)))
            except (ObjectNotFound, ValueError):
                continue  # gone or unreadable: it names nothing a user could resume
        return bodies


@dataclass(frozen=True)
class RestoreState:
    """Where each target partition stood when restore `restore_id` first started."""

    restore_id: str
    target_bootstrap: str
    topic_map: dict[str, str]  # source topic -> target topic
    start_offsets: dict[str, int]  # "target-topic:partition" -> offset
    selection: dict = field(default_factory=dict)  # Selection.to_json(): which records it restores
    topic_configs: dict = field(default_factory=dict)  # configs of the topics it created, set once data is in
    # "source-topic:partition" -> where the archive started when the restore first planned the partition
    # (topicvault archives; None: a state older than this field, nothing known). A partition that came
    # later is added before anything of it is produced (add_source_starts). An expire moving the start
    # later drops records a resumed restore may not have written (restore.check_not_expired).
    source_starts: dict[str, int] | None = field(default_factory=dict)
    created_ms: int | None = None  # when the restore first started, as saved (None: not saved, or not yet)
    # Target topic -> its Kafka topic id, for each topic whose CreateTopics this restore saw succeed (not
    # TOPIC_ALREADY_EXISTS), added once created (add_created_topics). Configs are set only on those, while
    # their id is the same: a state without this key (older) names none, and none get configs.
    created_topics: dict[str, str] = field(default_factory=dict)

    def start_offset(self, topic: str, partition: int) -> int:
        return self.start_offsets[f"{topic}:{partition}"]

    def to_json(self, archive: str) -> bytes:
        """The stored form; `archive` (the identity of the archive restored from) is for people reading it."""
        return json.dumps(
            {
                "restore_id": self.restore_id,
                "archive": archive,
                "target_bootstrap": self.target_bootstrap,
                "topic_map": self.topic_map,
                "start_offsets": self.start_offsets,
                "selection": self.selection,
                "topic_configs": self.topic_configs,
                "source_starts": self.source_starts,
                "created_ms": int(time.time() * 1000),
                "created_topics": self.created_topics,
            },
            sort_keys=True,
            indent=1,
        ).encode()


def load_restore_state(records: RestoreRecords, restore_id: str) -> RestoreState | None:
    """The saved state of a restore, or None if it never started."""
    raw = records.read(restore_id, STATE_NAME)
    if raw is None:
        return None
    try:
        return _state_of(json.loads(raw))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TopicvaultError(f"the saved state of restore {restore_id!r} in {records.state.uri} is damaged "
                              f"({type(exc).__name__}: {exc}): restore with a new --restore-id") from None



def damaged_restore_states(archive: ObjectStore, state: ObjectStore | None) -> list[str]:
    """Each saved restore state of this archive that cannot be read: those in the state store
    (a restore resuming one refuses to continue) and those older versions left in the archive
    (never read; an import of one is refused)."""
    damaged = []
    places = [(archive, LEGACY_RESTORES_PREFIX, "restore never reads it (only --import-state would, and refuses it); delete it")]
    if state is not None:
        places.insert(0, (state, RestoreRecords(state, archive).prefix, "restore --restore-id {id} refuses to continue it: restore with a new "
                                        "--restore-id, then delete it"))
    for store, prefix, instead in places:
        for info in store.list(prefix):
            if not info.key.endswith("/" + STATE_NAME):
                continue
            restore_id = info.key[:-len(STATE_NAME) - 1].rsplit("/", 1)[-1]
            try:
                _state_of(json.loads(store.get(info.key)))
            except ObjectNotFound:
                continue
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                damaged.append(f"the saved state of restore {restore_id!r} ({store.uri} {info.key}) is unreadable "
                               f"({type(exc).__name__}: {exc}): {instead.format(id=restore_id)}")
    return damaged

def _state_of(body: dict) -> RestoreState:
    return RestoreState(
        restore_id=str(body["restore_id"]),
        target_bootstrap=str(body["target_bootstrap"]),
        topic_map={str(k): str(v) for k, v in body["topic_map"].items()},
        start_offsets={str(k): int(v) for k, v in body["start_offsets"].items()},
        selection=dict(body.get("selection", {})),
        topic_configs={str(t): {str(k): str(v) for k, v in c.items()} for t, c in body.get("topic_configs", {}).items()},
        source_starts={k: int(v) for k, v in body["source_starts"].items()} if "source_starts" in body else None,
        created_ms=int(body["created_ms"]) if "created_ms" in body else None,
        created_topics={str(t): str(i) for t, i in body.get("created_topics", {}).items()},
    )


# What a restore keeps in its state store, and so what an import takes (see import_restore_records).
_IMPORTED_NAMES = re.compile(r"(state\.json|offset-map\.json|peer-objects\.json\.gz|holes/[A-Za-z0-9._-]+\.json)")


def import_restore_records(records: RestoreRecords, restore_id: str, source: ObjectStore) -> list[str]:
    """Copy the records of restore `restore_id` from `source` (a location the user named, e.g. the
    `_topicvault/restores/<id>/` an older version wrote in the archive) into the state store, once.

    Only the names a restore writes are taken, each at most MAX_STATE_BYTES; the state goes last,
    so an import cut short leaves no state and can be run again. Returns the names imported.
    """
    if records.read(restore_id, STATE_NAME) is not None:
        raise TopicvaultError(f"restore {restore_id!r} already has a state in {records.state.uri}: resume it "
                              "without --import-state (an import is done once)")
    found = {info.key: info.size for info in source.list() if _IMPORTED_NAMES.fullmatch(info.key)}
    if STATE_NAME not in found:
        raise TopicvaultError(f"no {STATE_NAME} at {source.uri}: --import-state names the folder holding a "
                              f"restore's records (e.g. <archive>/{legacy_restore_prefix(restore_id)})")
    for name, size in sorted(found.items()):
        if size > MAX_STATE_BYTES:
            raise TopicvaultError(f"{source.uri}/{name} is {size} bytes, more than a restore record can be "
                                  f"({MAX_STATE_BYTES}): not imported")
    try:
        saved_id = json.loads(source.get(STATE_NAME)).get("restore_id")
    except (ValueError, AttributeError):
        saved_id = None
    if saved_id != restore_id:
        raise TopicvaultError(f"{source.uri}/{STATE_NAME} is not the state of restore {restore_id!r} "
                              f"(it names {saved_id!r}): check --import-state and --restore-id")
    for name in sorted(found, key=lambda n: n == STATE_NAME):  # the state last
        records.write(restore_id, name, source.get(name), only_new=name == STATE_NAME)
    return sorted(found)


def add_source_starts(records: RestoreRecords, restore_id: str, starts: dict[str, int]) -> None:
    """Save where the archive started for partitions a resumed restore plans for the first time.

    Called before anything of them is produced: a run killed after producing some of them must
    find their start, or an expire in between would go unnoticed and the restart would count
    what the target holds against a sequence that now starts later (a splice).
    """
    body = json.loads(records.read(restore_id, STATE_NAME) or b"{}")
    if not starts or "source_starts" not in body:
        return  # nothing new, or a state older than source_starts (no check there)
    body["source_starts"] = {**starts, **body["source_starts"]}  # a saved start is never moved
    records.write(restore_id, STATE_NAME, json.dumps(body, sort_keys=True, indent=1).encode())


def add_created_topics(records: RestoreRecords, restore_id: str, topic_ids: dict[str, str]) -> None:
    """Save the topics this restore created (CreateTopics answered success) with their topic ids.

    Called right after they are created, before anything is produced or configured: only a topic
    named here, whose id is still this one, ever gets configs from the restore (see
    restore_plan._configs_of_created).
    """
    if not topic_ids:
        return
    body = json.loads(records.read(restore_id, STATE_NAME) or b"{}")
    body["created_topics"] = {**body.get("created_topics", {}), **topic_ids}
    records.write(restore_id, STATE_NAME, json.dumps(body, sort_keys=True, indent=1).encode())


def restores_into(records: RestoreRecords, target_bootstrap: str, topic: str) -> list[str]:
    """Ids of the restores from this archive that wrote into `topic` on that cluster, oldest first."""
    found = {
        (int(body.get("created_ms", 0)), body["restore_id"])
        for body in records.states()
        if body.get("target_bootstrap") == target_bootstrap and topic in body.get("topic_map", {}).values()
    }
    return [restore_id for _, restore_id in sorted(found)]


def save_restore_state(records: RestoreRecords, state: RestoreState) -> None:
    """Save a new restore's state; fails if a restore with that id already started."""
    try:
        records.write(state.restore_id, STATE_NAME, state.to_json(archive_identity(records.archive)), only_new=True)
    except PreconditionFailed:
        raise TopicvaultError(
            f"restore id {state.restore_id!r} was started at the same time by another run: run again to resume it"
        ) from None


def check_same_restore(saved: RestoreState, target_bootstrap: str, topic_map: dict[str, str], selection: dict) -> None:
    """A resumed restore must restore the same records of the same topics to the same cluster."""
    if saved.topic_map != topic_map or saved.target_bootstrap != target_bootstrap:
        raise TopicvaultError(
            f"restore id {saved.restore_id!r} was used for a different restore "
            f"(topics {saved.topic_map} to {saved.target_bootstrap}): pick a new --restore-id"
        )
    if saved.selection != selection:
        raise TopicvaultError(
            f"restore id {saved.restore_id!r} selected other records ({saved.selection}): resume it with the same "
            "--until/--until-mode/--from-offset/--to-offset, or pick a new --restore-id"
        )


PEER_OBJECTS_NAME = "peer-objects.json.gz"


def save_peer_objects_seen(records: RestoreRecords, restore_id: str, seen: set[tuple[str, int]],
                           left_out: list[dict]) -> None:
    """Save the peer archive's objects, (key, size), whose records a standby's finished round
    restored up to where it got: a restarted standby then tells an object written (again) while it
    was down from one it read (see restore.plan_restore's peer_objects_seen). `left_out`: the records
    earlier rounds found they can no longer restore (source.follow.LateRecords fields), so a restarted
    standby names them again instead of calling itself complete."""
    body = json.dumps({"objects": sorted(seen), "left_out": left_out}, separators=(",", ":"), sort_keys=True)
    records.write(restore_id, PEER_OBJECTS_NAME, gzip.compress(body.encode(), mtime=0))


def load_peer_objects_seen(records: RestoreRecords, restore_id: str) -> tuple[set[tuple[str, int]] | None, list[dict]]:
    """The peer objects the last finished round of this standby had seen (None: none saved), and the
    records it left out (see save_peer_objects_seen)."""
    raw = records.read(restore_id, PEER_OBJECTS_NAME)
    if raw is None:
        return None, []
    try:
        body = json.loads(bounded_gunzip(raw, MAX_STATE_BYTES))
        if isinstance(body, list):  # saved by a version that kept only the objects
            body = {"objects": body}
        return {(str(key), int(size)) for key, size in body["objects"]}, [dict(x) for x in body.get("left_out", [])]
    except (OSError, EOFError, ValueError, TypeError, KeyError) as exc:
        raise TopicvaultError(f"the saved peer objects of restore {restore_id!r} are damaged ({exc}): "
                              "restore with a new --restore-id") from None


def bounded_gunzip(data: bytes, limit: int) -> bytes:
    """`data` un-gzipped, refused (ValueError) as soon as it would unpack to more than `limit` bytes."""
    unpacker = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    parts, size, pending = [], 0, data
    while pending and not unpacker.eof:  # in pieces: memory stays near `limit`, never what a bomb claims
        part = unpacker.decompress(pending, 2**20)
        size += len(part)
        if size > limit:
            raise ValueError(f"it unpacks to more than {limit} bytes")
        parts.append(part)
        pending = unpacker.unconsumed_tail
    if not unpacker.eof:
        raise EOFError("compressed data ended before the end-of-stream marker")
    return b"".join(parts)
