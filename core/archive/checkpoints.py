"""Checkpoints of the folded backup state, so state reads do not grow with history.

In the spirit of Delta Lake's `_delta_log` checkpoints. The commit records stay the only
truth; a checkpoint is derived from them, may be deleted at any time, and a reader that
ignores checkpoints (every older topicvault) still reads the same state from the commits.

- After commit record N with N a multiple of CHECKPOINT_INTERVAL, the committer writes
  `_topicvault/checkpoints/<N, 19 digits>.json` (only if absent) holding the state folded
  from commits 1..N, then overwrites the small pointer `_topicvault/_last_checkpoint`.
  Both writes are best effort: a failed one never fails the backup.
- A reader GETs the pointer (which may lag or be absent), lists checkpoints after it
  (StartAfter), reads the newest usable one and commit N (to check it belongs to this
  history), then lists the commits after N (StartAfter) and folds only those. That is five
  requests, plus one GET per commit since the last checkpoint (fewer than CHECKPOINT_INTERVAL).
- A checkpoint is used only if it is intact (checksum), was written by code with the same
  state shape (a fingerprint of BackupState's fields, so a new field invalidates older
  checkpoints by itself) and belongs to this history (commit N exists, with the SHA-256 the
  checkpoint recorded). Otherwise the reader tries the one before it (up to _CHECKPOINTS_TRIED
  in all), and folds every commit only when none of them is usable: correctness first.

Old readers: topicvault before checkpoints lists only `_topicvault/commits/` (and its peer
layouts skip `_topicvault/`), so it ignores checkpoints and still reads every commit. Old
writers do not write checkpoints: a reader then folds the commits after the newest checkpoint,
which is correct but slower, until a newer writer makes commit N*CHECKPOINT_INTERVAL.

The state is serialised generically from BackupState's type hints, so a field added to it
(or to PartitionState / ObjectEntry) is carried by checkpoints with no change here.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import types
import typing
from typing import Any, Callable, Iterator

from ..crypto import AUTHENTICATION_FIELD, Keyring, Unauthenticated, authentication, check_authentication
from ..errors import ObjectNotFound, TopicvaultError
from ..stores.store import ObjectInfo, ObjectStore
from .archive_keys import CHECKPOINTS_PREFIX, COMMITS_PREFIX, LAST_CHECKPOINT_KEY, checkpoint_key, commit_key
from .commits import BackupState, CommitRecord, fold_records

CHECKPOINT_INTERVAL = 50
# Bump when BackupState.apply changes meaning without a change of fields: older checkpoints
# are then ignored (the fields' fingerprint catches added, removed or retyped fields).
CHECKPOINT_VERSION = 1
# How many of the newest checkpoints a reader tries before folding every commit.
_CHECKPOINTS_TRIED = 2

log = logging.getLogger(__name__)


# --- the state as JSON, driven by type hints -------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _encode(value: Any, hint: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _encode(value, inner[0] if len(inner) == 1 else Any)
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return {f.name: _encode(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(hint)}
    if origin is dict:
        key_hint, value_hint = args or (Any, Any)
        if key_hint is str or key_hint is Any:
            return {k: _encode(v, value_hint) for k, v in value.items()}
        # Non-string keys (e.g. (topic, partition)): JSON objects cannot hold them, so pairs.
        return [[_encode(k, key_hint), _encode(v, value_hint)] for k, v in value.items()]
    if origin in (list, set, frozenset):
        return [_encode(v, args[0] if args else Any) for v in value]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return [_encode(v, args[0]) for v in value]
        return [_encode(v, a) for v, a in zip(value, args)] if args else list(value)
    return value  # str, int, float, bool and plain JSON (dict, list, Any)


def _decode(data: Any, hint: Any) -> Any:
    if data is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _decode(data, inner[0] if len(inner) == 1 else Any)
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return hint(**{f.name: _decode(data[f.name], hints[f.name]) for f in dataclasses.fields(hint)})
    if origin is dict:
        key_hint, value_hint = args or (Any, Any)
        if key_hint is str or key_hint is Any:
            return {k: _decode(v, value_hint) for k, v in data.items()}
        return {_decode(k, key_hint): _decode(v, value_hint) for k, v in data}
    if origin in (list, set, frozenset):
        return origin(_decode(v, args[0] if args else Any) for v in data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0]) for v in data)
        return tuple(_decode(v, a) for v, a in zip(data, args)) if args else tuple(data)
    if hint in (int, str, float, bool) and not isinstance(data, hint):
        raise TypeError(f"expected {hint.__name__}, found {type(data).__name__}")
    return data


def state_fingerprint(cls: type = BackupState) -> str:
    """A digest of the state's shape: every dataclass field reachable from `cls` and its type.

    Raises TypeError for a field type the JSON codec cannot carry, so a test catches it."""
    seen: dict[str, str] = {}

    def walk(hint: Any) -> None:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            if hint.__qualname__ in seen:
                return
            hints = _hints(hint)
            seen[hint.__qualname__] = ",".join(f"{f.name}:{hints[f.name]!r}" for f in dataclasses.fields(hint))
            for f in dataclasses.fields(hint):
                walk(hints[f.name])
        elif origin is not None:
            if origin not in (dict, list, set, frozenset, tuple, typing.Union, types.UnionType):
                raise TypeError(f"checkpoints cannot carry state fields of type {hint!r}")
            for arg in args:
                if arg is not Ellipsis:
                    walk(arg)
        elif hint not in (int, str, float, bool, dict, list, type(None), Any):
            raise TypeError(f"checkpoints cannot carry state fields of type {hint!r}")

    walk(cls)
    text = f"v{CHECKPOINT_VERSION};" + ";".join(f"{name}({fields})" for name, fields in sorted(seen.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_json(state: BackupState, commit_sha256: str, keyring: Keyring | None = None) -> bytes:
    """The checkpoint of `state`, folded up to its last_sequence, whose record's bytes have
    `commit_sha256`; with a keyring, authenticated by its sealing key."""
    body = _encode(state, BackupState)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    checkpoint = {
        "checkpoint_version": CHECKPOINT_VERSION,
        "fingerprint": state_fingerprint(),
        "sequence": state.last_sequence,
        "commit_sha256": commit_sha256,
        "state_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "state": body,
    }
    if keyring is not None:
        checkpoint[AUTHENTICATION_FIELD] = authentication(_checkpoint_canonical(checkpoint), keyring.sealing)
    return json.dumps(checkpoint, sort_keys=True, separators=(",", ":")).encode()


def _checkpoint_canonical(checkpoint: dict) -> bytes:
    """What a checkpoint's authentication covers (as parsed back: see commits._canonical)."""
    return json.dumps(json.loads(json.dumps(checkpoint)), sort_keys=True, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A parsed, intact checkpoint: the state after commit `sequence`, whose record's bytes have `commit_sha256`."""

    sequence: int
    commit_sha256: str
    state: BackupState


def parse_checkpoint(data: bytes, key: str, keyring: Keyring | None = None) -> Checkpoint:
    """Parse a checkpoint; raise TopicvaultError if it is damaged, of another state shape or (with
    a keyring) not authenticated by one of its keys."""
    try:
        body = json.loads(data)
        auth = body.pop(AUTHENTICATION_FIELD, None)
        if keyring is not None:
            # A checkpoint is derived data: one nothing vouches for (written by a run without
            # the key, or before checkpoints were authenticated) is never read with keys; the
            # commits are folded instead.
            if auth is None:
                raise ValueError("not authenticated")
            check_authentication(_checkpoint_canonical(body), auth, keyring, f"checkpoint {key}")
        if body.get("fingerprint") != state_fingerprint():
            raise ValueError("written for another shape of the state")
        canonical = json.dumps(body["state"], sort_keys=True, separators=(",", ":"))
        if hashlib.sha256(canonical.encode()).hexdigest() != body["state_sha256"]:
            raise ValueError("checksum mismatch")
        state = _decode(body["state"], BackupState)
        if state.last_sequence != body["sequence"] or key != checkpoint_key(body["sequence"]):
            raise ValueError("sequence does not match its key")
        return Checkpoint(int(body["sequence"]), str(body["commit_sha256"]), state)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TopicvaultError(f"checkpoint {key} is unusable ({exc})") from None


# --- writing ----------------------------------------------------------------------------


def write_checkpoint(store: ObjectStore, state: BackupState, record: CommitRecord,
                     keyring: Keyring | None = None, data: bytes | None = None) -> bool:
    """Checkpoint the state after `record` (stored as `data`, if given); never raises (the commit
    is the truth). True if written."""
    try:
        data = data if data is not None else record.to_json(keyring)
        after = copy.deepcopy(state)
        # Fold the record as a reader parses it, so the checkpoint equals the fold of the commits.
        after.apply(CommitRecord.from_json(data, commit_key(record.sequence)), commit_key(record.sequence))
        _sort_objects(after)
        try:
            store.put(checkpoint_key(record.sequence), checkpoint_json(after, _sha256(data), keyring),
                      if_none_match=True)
        except TopicvaultError as exc:
            if store.head(checkpoint_key(record.sequence)) is None:
                raise exc
        # The pointer may lag or be lost (a plain overwrite): readers list checkpoints after it.
        store.put(LAST_CHECKPOINT_KEY, json.dumps({"sequence": record.sequence}).encode())
        return True
    except Exception as exc:  # noqa: BLE001 — best effort: a checkpoint never fails a backup
        log.warning("checkpoint after commit %s not written (%s); readers fold the commits instead",
                    record.sequence, exc)
        return False


# --- reading ----------------------------------------------------------------------------


def load_state(store: ObjectStore, keyring: Keyring | None = None) -> BackupState:
    """The location's state: the newest usable checkpoint plus the commits after it, or the fold
    of every commit record where none of the newest _CHECKPOINTS_TRIED is usable. With a keyring,
    every commit read is checked (commits.read_commit: authenticated by one of its keys, or
    written before the location's first authenticated commit), and only authenticated
    checkpoints are used."""
    for checkpoint in _newest_checkpoints(store, keyring):
        try:
            return _read_forward(store, checkpoint.state, checkpoint.commit_sha256, keyring=keyring)
        except Unauthenticated:
            raise
        except TopicvaultError as exc:  # each checkpoint is parsed afresh: a half-folded one is dropped
            log.warning("%s; trying an older one, else every commit record", exc)
    return _read_forward(store, BackupState(), None, keyring=keyring)


def read_forward(store: ObjectStore, state: BackupState,
                 on_commit: Callable[[CommitRecord], None] | None = None,
                 keyring: Keyring | None = None) -> BackupState:
    """Fold the commits after `state.last_sequence` into `state` (in place) and return it:
    one listing, plus one GET per new commit. `on_commit` sees each new record once folded."""
    return _read_forward(store, state, None, on_commit, keyring)


def _read_forward(store: ObjectStore, state: BackupState, commit_sha256: str | None,
                  on_commit: Callable[[CommitRecord], None] | None = None,
                  keyring: Keyring | None = None) -> BackupState:
    """Fold the commits after `state`; with `commit_sha256`, first check that the last commit
    folded into `state` (a checkpoint's) is still the one the location holds."""
    known = state.last_sequence
    if commit_sha256 is not None:
        try:
            held = _sha256(store.get(commit_key(known)))
        except ObjectNotFound:
            held = None
        if held != commit_sha256:
            raise TopicvaultError(f"checkpoint {checkpoint_key(known)} does not match commit {commit_key(known)}")
    start_after = commit_key(known) if known else None
    fold_records(store, state, list(store.list(COMMITS_PREFIX, start_after=start_after)), keyring, on_commit)
    return state


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sort_objects(state: BackupState) -> None:
    for partition in state.partitions.values():
        partition.objects.sort(key=lambda o: o.first_offset)


def _newest_checkpoints(store: ObjectStore, keyring: Keyring | None = None) -> Iterator[Checkpoint]:
    """The intact checkpoints among the _CHECKPOINTS_TRIED newest, newest first, each read only
    when the caller asks for it (damaged ones skipped). The listing starts that many intervals
    before the pointer, so a pointer naming a checkpoint that fails still leaves the one before."""
    pointer = _pointer(store)
    first = pointer - (_CHECKPOINTS_TRIED - 1) * CHECKPOINT_INTERVAL if pointer else 0
    listed: list[ObjectInfo] = list(store.list(
        CHECKPOINTS_PREFIX, start_after=checkpoint_key(first - 1) if first > 0 else None))
    keys = [i.key for i in listed if i.key.endswith(".json")][-_CHECKPOINTS_TRIED:]
    for key in reversed(keys):
        try:
            checkpoint = parse_checkpoint(store.get(key), key, keyring)
        except ObjectNotFound:
            continue
        except TopicvaultError as exc:
            log.warning("%s; trying an older one, else every commit record", exc)
            continue
        yield checkpoint


def _pointer(store: ObjectStore) -> int | None:
    try:
        sequence = int(json.loads(store.get(LAST_CHECKPOINT_KEY))["sequence"])
        return sequence if sequence > 0 else None
    except ObjectNotFound:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s is unreadable (%s): listing every checkpoint", LAST_CHECKPOINT_KEY, exc)
        return None


def checkpoint_problems(store: ObjectStore, truth: BackupState, keyring: Keyring | None = None) -> list[str]:
    """Where what readers read (newest checkpoint plus later commits) differs from `truth`, the
    fold of every commit record: a wrong checkpoint would mislead every reader after it."""
    if load_state(store, keyring) == truth:
        return []
    return [
        f"the newest checkpoint under {CHECKPOINTS_PREFIX} disagrees with the commit records: delete "
        f"{CHECKPOINTS_PREFIX} and {LAST_CHECKPOINT_KEY} (derived data; the commits are the truth and "
        "the next backups write new checkpoints)"
    ]


def damaged_checkpoint_files(store: ObjectStore) -> list[str]:
    """Each checkpoint, and the pointer LAST_CHECKPOINT_KEY, that readers cannot use: what is
    wrong and what readers do instead (the data is whole: they fold the commit records)."""
    keys = [i.key for i in store.list(CHECKPOINTS_PREFIX) if i.key.endswith(".json")]
    damaged = []
    for key in keys:
        try:
            checkpoint = parse_checkpoint(store.get(key), key)
        except ObjectNotFound:
            continue  # deleted since listed: derived data, nothing lost
        except TopicvaultError as exc:
            damaged.append(f"{exc}: readers skip it and use an older checkpoint or fold every commit record; "
                           "delete it (derived data)")
            continue
        try:
            held = _sha256(store.get(commit_key(checkpoint.sequence)))
        except ObjectNotFound:
            held = None
        if held != checkpoint.commit_sha256:
            damaged.append(f"checkpoint {key} does not match commit {commit_key(checkpoint.sequence)}: readers skip "
                           "it and fold every commit record; delete it (derived data)")
    damaged.extend(_pointer_damage(store, keys))
    return damaged


def _pointer_damage(store: ObjectStore, checkpoint_keys: list[str]) -> list[str]:
    """What is wrong with LAST_CHECKPOINT_KEY, if anything (absent or lagging is not damage)."""
    try:
        data = store.get(LAST_CHECKPOINT_KEY)
    except ObjectNotFound:
        return []
    try:
        sequence = int(json.loads(data)["sequence"])
        if sequence <= 0:
            raise ValueError(f"sequence {sequence} is not positive")
    except (ValueError, KeyError, TypeError) as exc:
        return [f"{LAST_CHECKPOINT_KEY} is unreadable ({type(exc).__name__}: {exc}): readers list every "
                "checkpoint instead; the next checkpoint rewrites it"]
    if not any(key >= checkpoint_key(sequence) for key in checkpoint_keys):
        return [f"{LAST_CHECKPOINT_KEY} names checkpoint {checkpoint_key(sequence)}, which does not exist: readers "
                "find no checkpoint from there and fold every commit record; delete the pointer (derived data)"]
    return []
