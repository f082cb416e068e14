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

from ...core.archive.archive_keys import LEGACY_RESTORES_PREFIX, legacy_restore_prefix
from ...core.crypto import Keyring, KeyUnavailable, Unauthenticated
from ...core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from ...core.integrity import Damaged, opened, sealed
from ...core.stores.locations import open_store_beside
from ...core.stores.store import ObjectStore

STATE_DIR_ENV = "TOPICVAULT_STATE_DIR"
# In the archive: never read, only imported by name (the name kept for source.restore.restore_job).
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


# Every top-level field each record had before records carried a check (core.integrity): one
# without a check is read as written by an older version only if it has no other field.
_LEGACY_FIELDS = {
    "state": ("restore_id", "archive", "target_bootstrap", "topic_map", "start_offsets", "selection",
              "topic_configs", "source_starts", "created_ms"),
    "offset-map": ("restore_id", "partitions"),
    "hole": ("key", "topic", "partition", "first_offset", "last_offset", "records", "reason"),
    "peer-objects": ("objects", "left_out"),
    "schema-ids": (),  # restore --schema-ids remap (source.cluster_restore.registry_restore): always written with a check
    "registry-restore": (),  # restore --schema-registry (the same): always written with a check
}
# Why a resume refuses a record that fails its check, and what to do.
RESUME_ADVICE = "this restore cannot be resumed from it: restore with a new --restore-id"

# Which record a record is ("<restore id>/<name>"), written into its body so its check and MAC
# cover it: an authentic record of another restore, or under another name, put in this one's place
# by whoever can write the state store, is refused rather than trusted. Records written before
# this field (it is absent) are read as before.
RECORD_FIELD = "record"


def _record_id(restore_id: str, name: str) -> str:
    return f"{restore_id}/{name}"


def check_record_id(body: object, restore_id: str, name: str, what: str, advice: str = RESUME_ADVICE) -> object:
    """`body` without its RECORD_FIELD, which must name record `name` of restore `restore_id` when
    present; a one-line TopicvaultError naming `what`, the record it is, then `advice`, when not."""
    if not isinstance(body, dict) or RECORD_FIELD not in body:
        return body
    body = dict(body)
    found = body.pop(RECORD_FIELD)
    if found != _record_id(restore_id, name):
        it_is = str(found).partition("/")
        raise TopicvaultError(f"{what} is the saved {it_is[2]!r} of restore {it_is[0]!r}, moved here: {advice}")
    return body


def _kind(name: str) -> str:
    """Which record `name` (a restore's own name for it) is, as _LEGACY_FIELDS knows them."""
    if name.startswith("holes/"):
        return "hole"
    return name.split(".", 1)[0]


@dataclass(frozen=True)
class RestoreRecords:
    """The records of the restores of one archive, kept in `state` (the archive is only named).

    Each record carries its own check (core.integrity), authenticated by `keyring` when the
    restore was given keys: whoever can write the state store without the key cannot make a
    resume trust a record it did not write."""

    state: ObjectStore
    archive: ObjectStore
    keyring: Keyring | None = None

    @property
    def prefix(self) -> str:
        """Key prefix of this archive's restores in the state store."""
        return f"restores/{hashlib.sha256(archive_identity(self.archive).encode()).hexdigest()[:16]}/"

    def key(self, restore_id: str, name: str) -> str:
        """Key of one record of a restore in the state store."""
        return f"{self.prefix}{check_restore_id(restore_id)}/{name}"

    def read(self, restore_id: str, name: str) -> object | None:
        """A record of the restore from the state store (never from the archive), its check
        verified and removed; None if absent. A record that fails its check is a one-line error."""
        found = self.read_checked(restore_id, name)
        return None if found is None else found[0]

    def read_checked(self, restore_id: str, name: str) -> tuple[object, bool] | None:
        """As read, with whether the record carried a check (False: written by an older version)."""
        key = self.key(restore_id, name)
        try:
            data = self.state.get(key)
        except ObjectNotFound:
            return None
        what = self.describe(restore_id, name)
        body, checked = open_record(data, name, self.keyring, what)
        return check_record_id(body, restore_id, name, what), checked

    def describe(self, restore_id: str, name: str) -> str:
        """How messages name record `name` of restore `restore_id`."""
        return f"the saved {name} of restore {restore_id!r} ({self.state.uri} {self.key(restore_id, name)})"

    def planted_in_archive(self, restore_id: str) -> bool:
        """Whether the archive holds a state for this id where older versions kept theirs (it is not read)."""
        key = legacy_restore_prefix(check_restore_id(restore_id)) + STATE_NAME
        return any(info.key == key for info in self.archive.list(key))

    def write(self, restore_id: str, name: str, body: dict, *, only_new: bool = False) -> str:
        """Write a record, with its check, to the state store (never the archive); returns its key."""
        key = self.key(restore_id, name)
        try:
            body = {**body, RECORD_FIELD: _record_id(restore_id, name)}
            self.state.put(key, record_bytes(body, name, self.keyring), if_none_match=only_new)
        except PreconditionFailed:
            raise
        except TopicvaultError as exc:
            raise TopicvaultError(
                f"cannot save restore state in {self.state.uri} ({exc}): pass --state URI, a directory or s3:// "
                f"location the restore can write (or set {STATE_DIR_ENV}); the archive itself is only read"
            ) from None
        return key

    def names(self, restore_id: str) -> list[str]:
        """The names of the records restore `restore_id` holds in the state store."""
        start = self.key(restore_id, "")
        return [info.key[len(start):] for info in self.state.list(start)]

    def states(self) -> list[dict]:
        """The bodies of every saved state of this archive's restores in the state store."""
        bodies = []
        for info in self.state.list(self.prefix):
            if not info.key.endswith("/" + STATE_NAME):
                continue
            try:
                body = self.read(info.key[len(self.prefix):-len(STATE_NAME) - 1], STATE_NAME)
            except TopicvaultError:
                continue  # unreadable: it names nothing a user could resume
            if isinstance(body, dict):
                bodies.append(body)
        return bodies


def record_bytes(body: dict, name: str, keyring: Keyring | None) -> bytes:
    """The stored form of record `name`: JSON with its check (core.integrity.sealed), gzip-packed
    when the name ends in .gz."""
    if name.endswith(".gz"):  # a peer archive's object list: compact, packed
        return gzip.compress(json.dumps(sealed(body, keyring), sort_keys=True, separators=(",", ":")).encode(), mtime=0)
    return json.dumps(sealed(body, keyring), sort_keys=True, indent=1).encode()


def open_record(data: bytes, name: str, keyring: Keyring | None, what: str,
                advice: str = RESUME_ADVICE, unchecked_ok: bool = False) -> tuple[object, bool]:
    """Record `name` parsed from its stored bytes, its check verified and removed, and whether it
    carried one; a one-line TopicvaultError naming `what`, then `advice`, when it is damaged."""
    try:
        text = bounded_gunzip(data, MAX_STATE_BYTES) if name.endswith(".gz") else data
        if len(text) > MAX_STATE_BYTES:
            raise ValueError(f"it is larger than {MAX_STATE_BYTES} bytes")
        return opened(json.loads(text), keyring, what, _LEGACY_FIELDS[_kind(name)], unchecked_ok)
    except Unauthenticated as exc:
        raise Unauthenticated(f"{exc}: {advice}") from None
    except KeyUnavailable:
        raise
    except (Damaged, OSError, EOFError, zlib.error, ValueError, RecursionError) as exc:
        raise TopicvaultError(f"{what} is damaged ({exc}): {advice}") from None


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

    def to_json(self, archive: str) -> dict:
        """The stored form; `archive` (the identity of the archive restored from) is for people reading it."""
        return {
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
        }


def load_restore_state(records: RestoreRecords, restore_id: str) -> RestoreState | None:
    """The saved state of a restore, or None if it never started."""
    body = records.read(restore_id, STATE_NAME)
    return None if body is None else parse_restore_state(body, records.describe(restore_id, STATE_NAME))


def parse_restore_state(body: object, what: str, advice: str = RESUME_ADVICE) -> RestoreState:
    """A restore's state from its parsed record; a one-line TopicvaultError naming `what`, then
    `advice`, if it is not one."""
    try:
        return _state_of(body)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TopicvaultError(f"{what} is damaged ({type(exc).__name__}: {exc}): {advice}") from None


def damaged_restore_states(archive: ObjectStore, state: ObjectStore | None,
                           keyring: Keyring | None = None) -> tuple[list[str], list[str]]:
    """Each record of this archive's restores that cannot be trusted, and each that carries no check.

    Damaged: those in the state store that fail their check or cannot be read (a resume refuses
    them), and the states older versions left in the archive that cannot be read (never read; an
    import refuses them). Unchecked: records in the state store written before records carried a
    check (read, with nothing to tell damage in a value)."""
    damaged, unchecked = [], []
    if state is not None:
        records = RestoreRecords(state, archive, keyring)
        for restore_id in sorted({info.key[len(records.prefix):].split("/", 1)[0]
                                  for info in state.list(records.prefix)}):
            for name in filter(_VERIFIED_NAMES.fullmatch, records.names(restore_id)):
                try:
                    found = records.read_checked(restore_id, name)
                    if found is not None and not found[1]:
                        unchecked.append(f"{records.describe(restore_id, name)} carries no check (written by "
                                         "topicvault before restore records did): damage in a value would go unseen")
                    if name == STATE_NAME and found is not None:
                        parse_restore_state(found[0], records.describe(restore_id, name))
                except TopicvaultError as exc:
                    damaged.append(str(exc))
    for info in archive.list(LEGACY_RESTORES_PREFIX):
        if not info.key.endswith("/" + STATE_NAME):
            continue
        restore_id = info.key[:-len(STATE_NAME) - 1].rsplit("/", 1)[-1]
        what = f"the saved state of restore {restore_id!r} ({archive.uri} {info.key})"
        instead = "restore never reads it (only --import-state would, and refuses it); delete it"
        try:
            parse_restore_state(open_record(archive.get(info.key), STATE_NAME, None, what, instead)[0], what, instead)
        except ObjectNotFound:
            continue
        except TopicvaultError as exc:
            damaged.append(str(exc))
    return damaged, unchecked

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
# verify checks those and the registry restore's (source.cluster_restore.registry_restore).
_VERIFIED_NAMES = re.compile(rf"{_IMPORTED_NAMES.pattern}|schema-ids\.json|registry-restore\.json")


def import_state(records: RestoreRecords, state_uri: str, restore_id: str | None, uri: str,
                 store_options: dict[str, str], dry_run: bool = False) -> str:
    """restore --import-state URI: import_restore_records from the folder at `uri` (opened with
    `store_options`) into the state store at `state_uri`; returns the line saying what was (with
    `dry_run`: would be) imported."""
    if not restore_id:
        raise TopicvaultError("--import-state works with --restore-id: give the id of the restore it holds")
    names = ", ".join(import_restore_records(records, restore_id, open_store_beside(uri, store_options), dry_run))
    if dry_run:
        return (f"dry run: would import restore {restore_id}'s records from {uri} into {state_uri}: {names} "
                "(checked; nothing was written). Its plan shows once they are imported: run without --dry-run")
    return f"imported restore {restore_id}'s records from {uri} into {state_uri}: {names}"


def import_restore_records(records: RestoreRecords, restore_id: str, source: ObjectStore,
                           dry_run: bool = False) -> list[str]:
    """Copy the records of restore `restore_id` from `source` (a location the user named, e.g. the
    `_topicvault/restores/<id>/` an older version wrote in the archive) into the state store, once.

    Only the names a restore writes are taken, each at most MAX_STATE_BYTES, each checked as a
    resume checks it (its check, if it carries one; the state read as a state) before any is
    written; each is written with its check. The state goes last, so an import cut short leaves
    no state and can be run again. `dry_run`: check, write nothing. Returns the names imported.
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
    bodies = {}
    for name in found:
        what = f"{source.uri}/{name}"
        try:
            # An import is the operator's act naming these records: one an older version wrote
            # without a check is taken even with a key (and written with its check from now on).
            advice = "nothing was imported: import an intact copy, or restore with a new --restore-id"
            body = open_record(source.get(name), name, records.keyring, what, advice, unchecked_ok=True)[0]
            body = check_record_id(body, restore_id, name, what, advice)
        except ObjectNotFound:
            raise TopicvaultError(f"{what} was listed but is gone: run the import again") from None
        bodies[name] = {"objects": body} if isinstance(body, list) else body  # a peer list of an older version
    saved_id = bodies[STATE_NAME].get("restore_id") if isinstance(bodies[STATE_NAME], dict) else None
    if saved_id != restore_id:
        raise TopicvaultError(f"{source.uri}/{STATE_NAME} is not the state of restore {restore_id!r} "
                              f"(it names {saved_id!r}): check --import-state and --restore-id")
    try:
        _state_of(bodies[STATE_NAME])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TopicvaultError(f"{source.uri}/{STATE_NAME} is not a readable restore state ({type(exc).__name__}: "
                              f"{exc}): nothing was imported") from None
    # Which topics the restore created is known only to the run that created them (#50.2): an
    # imported list (from an archive a bucket writer can edit) would let the restore set configs
    # on topics it never created. An imported restore configures none.
    bodies[STATE_NAME].pop("created_topics", None)
    if not dry_run:
        for name in sorted(bodies, key=lambda n: n == STATE_NAME):  # the state last
            records.write(restore_id, name, bodies[name], only_new=name == STATE_NAME)
    return sorted(found)


def add_source_starts(records: RestoreRecords, restore_id: str, starts: dict[str, int]) -> None:
    """Save where the archive started for partitions a resumed restore plans for the first time.

    Called before anything of them is produced: a run killed after producing some of them must
    find their start, or an expire in between would go unnoticed and the restart would count
    what the target holds against a sequence that now starts later (a splice).
    """
    body = records.read(restore_id, STATE_NAME) or {}
    if not starts or "source_starts" not in body:
        return  # nothing new, or a state older than source_starts (no check there)
    body["source_starts"] = {**starts, **body["source_starts"]}  # a saved start is never moved
    records.write(restore_id, STATE_NAME, body)


def add_created_topics(records: RestoreRecords, restore_id: str, topic_ids: dict[str, str]) -> None:
    """Save the topics this restore created (CreateTopics answered success) with their topic ids.

    Called right after they are created, before anything is produced or configured: only a topic
    named here, whose id is still this one, ever gets configs from the restore (see
    restore_plan._configs_of_created).
    """
    if not topic_ids:
        return
    body = records.read(restore_id, STATE_NAME) or {}
    body["created_topics"] = {**body.get("created_topics", {}), **topic_ids}
    records.write(restore_id, STATE_NAME, body)


def same_servers(saved: object, given: str) -> bool:
    """Whether a saved bootstrap list names the servers `given` does: the same host:port entries,
    in any order and letter case, spaces aside (-b "b:9092,a:9092" is the cluster -b "a:9092,b:9092" was)."""
    def servers(bootstrap: str) -> frozenset[str]:
        return frozenset(entry.strip().lower() for entry in bootstrap.split(",") if entry.strip())

    return isinstance(saved, str) and servers(saved) == servers(given)


def restores_into(records: RestoreRecords, target_bootstrap: str, topic: str) -> list[str]:
    """Ids of the restores from this archive that wrote into `topic` on that cluster, oldest first."""
    found = {
        (int(body.get("created_ms", 0)), body["restore_id"])
        for body in records.states()
        if same_servers(body.get("target_bootstrap"), target_bootstrap) and topic in body.get("topic_map", {}).values()
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
    if saved.topic_map != topic_map or not same_servers(saved.target_bootstrap, target_bootstrap):
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
    earlier rounds found they can no longer restore (source.restore.standby.LateRecords fields), so a restarted
    standby names them again instead of calling itself complete."""
    records.write(restore_id, PEER_OBJECTS_NAME, {"objects": sorted(seen), "left_out": left_out})


def load_peer_objects_seen(records: RestoreRecords, restore_id: str) -> tuple[set[tuple[str, int]] | None, list[dict]]:
    """The peer objects the last finished round of this standby had seen (None: none saved), and the
    records it left out (see save_peer_objects_seen)."""
    body = records.read(restore_id, PEER_OBJECTS_NAME)
    if body is None:
        return None, []
    try:
        if isinstance(body, list):  # saved by a version that kept only the objects
            body = {"objects": body}
        return {(str(key), int(size)) for key, size in body["objects"]}, [dict(x) for x in body.get("left_out", [])]
    except (ValueError, TypeError, KeyError) as exc:
        raise TopicvaultError(f"{records.describe(restore_id, PEER_OBJECTS_NAME)} is damaged ({exc}): "
                              f"{RESUME_ADVICE}") from None


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
