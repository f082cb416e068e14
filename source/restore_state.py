"""A restore's own record, kept in the backup location under `_topicvault/restores/<id>/`.

It holds, per target partition, the end offset found when the restore first started. The
target partition then is its own progress record: everything after that offset was written
by this restore, in source order, so a resumed task counts it and continues after it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from ..core.commits import STATE_PREFIX
from ..core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from ..core.store import ObjectStore

RESTORES_PREFIX = STATE_PREFIX + "restores/"
_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class RestoreState:
    """Where each target partition stood when restore `restore_id` first started."""

    restore_id: str
    target_bootstrap: str
    topic_map: dict[str, str]  # source topic -> target topic
    start_offsets: dict[str, int]  # "target-topic:partition" -> offset
    selection: dict = field(default_factory=dict)  # Selection.to_json(): which records it restores
    topic_configs: dict = field(default_factory=dict)  # configs of the topics it created, set once data is in

    def start_offset(self, topic: str, partition: int) -> int:
        return self.start_offsets[f"{topic}:{partition}"]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "restore_id": self.restore_id,
                "target_bootstrap": self.target_bootstrap,
                "topic_map": self.topic_map,
                "start_offsets": self.start_offsets,
                "selection": self.selection,
                "topic_configs": self.topic_configs,
                "created_ms": int(time.time() * 1000),
            },
            sort_keys=True,
            indent=1,
        ).encode()


def state_key(restore_id: str) -> str:
    """Object key of a restore's state record."""
    if not _ID_PATTERN.fullmatch(restore_id):
        raise TopicvaultError(f"bad --restore-id {restore_id!r}: use letters, digits, '.', '_' or '-'")
    return f"{RESTORES_PREFIX}{restore_id}/state.json"


def load_restore_state(store: ObjectStore, restore_id: str) -> RestoreState | None:
    """The saved state of a restore, or None if it never started."""
    key = state_key(restore_id)
    try:
        body = json.loads(store.get(key))
    except ObjectNotFound:
        return None
    return RestoreState(
        restore_id=body["restore_id"],
        target_bootstrap=body["target_bootstrap"],
        topic_map=dict(body["topic_map"]),
        start_offsets={k: int(v) for k, v in body["start_offsets"].items()},
        selection=body.get("selection", {}),
        topic_configs=body.get("topic_configs", {}),
    )


def restores_into(store: ObjectStore, target_bootstrap: str, topic: str) -> list[str]:
    """Ids of the restores saved in this location that wrote into `topic` on that cluster, oldest first."""
    found: list[tuple[int, str]] = []
    for info in store.list(RESTORES_PREFIX):
        if not info.key.endswith("/state.json"):
            continue
        try:
            body = json.loads(store.get(info.key))
        except (ObjectNotFound, ValueError):
            continue  # gone or unreadable: it names nothing a user could resume
        if body.get("target_bootstrap") == target_bootstrap and topic in body.get("topic_map", {}).values():
            found.append((int(body.get("created_ms", 0)), body["restore_id"]))
    return [restore_id for _, restore_id in sorted(found)]


def save_restore_state(store: ObjectStore, state: RestoreState) -> None:
    """Save a new restore's state; fails if a restore with that id already started."""
    try:
        store.put(state_key(state.restore_id), state.to_json(), if_none_match=True)
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
