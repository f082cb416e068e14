"""Every key topicvault keeps under `_topicvault/` in an archive, named in one place.

The layout of an archive's own state (restic's backend/layout is the model): every module takes
the keys it reads or writes from here, and KEY_KINDS lists each kind with the pattern of its
keys, so a test can check that nothing else is written there.

| kind               | key                                     | written by                              |
|--------------------|-----------------------------------------|-----------------------------------------|
| commit             | commits/<sequence, 19 digits>.json      | core.commit_log.append (write-if-absent)|
| checkpoint         | checkpoints/<sequence, 19 digits>.json  | core.checkpoints.write_checkpoint       |
| checkpoint pointer | _last_checkpoint                        | core.checkpoints.write_checkpoint       |
| lease              | leases/<run id>                         | core.leases.RunLease                    |
| conditional writes | conditional-writes.json                 | core.conditional_writes (the probe)     |
| probe              | probes/<12 hex>-<upload kind>           | core.conditional_writes (scratch)       |
| commit turn        | commit-turns/c<12 hex>                  | core.conditional_writes.CommitTurn      |
| legacy restore     | restores/<restore id>/<record>          | nobody now: older versions' restore     |
|                    |                                         | state, only imported by name            |

A restore's own records (state, offset map, holes, the peer objects a standby has seen) are
kept in its state store, never in the archive (source.restore.restore_state). Objects of the backup
itself are named by keys/ and never start with STATE_PREFIX.
"""

from __future__ import annotations

import re

STATE_PREFIX = "_topicvault/"

COMMITS_PREFIX = STATE_PREFIX + "commits/"
CHECKPOINTS_PREFIX = STATE_PREFIX + "checkpoints/"
LAST_CHECKPOINT_KEY = STATE_PREFIX + "_last_checkpoint"
LEASES_PREFIX = STATE_PREFIX + "leases/"
# Whether the store honours conditional writes, probed once per location (core.conditional_writes);
# the probe's own scratch objects, and the turns committers take where the condition does not hold.
CONDITIONAL_WRITES_KEY = STATE_PREFIX + "conditional-writes.json"
PROBES_PREFIX = STATE_PREFIX + "probes/"
COMMIT_TURNS_PREFIX = STATE_PREFIX + "commit-turns/"
# Where restores started by older versions kept their state, in the archive: never read, only
# imported by name (restore --import-state).
LEGACY_RESTORES_PREFIX = STATE_PREFIX + "restores/"


def commit_key(sequence: int) -> str:
    """Object key of the commit record with this sequence number."""
    return f"{COMMITS_PREFIX}{sequence:019d}.json"


def checkpoint_key(sequence: int) -> str:
    """Object key of the checkpoint of the state after commit `sequence`."""
    return f"{CHECKPOINTS_PREFIX}{sequence:019d}.json"


def lease_key(run_id: str) -> str:
    """The key of a run's lease."""
    return LEASES_PREFIX + run_id


def probe_key(token: str, upload_kind: str) -> str:
    """A scratch key of the conditional-writes probe through one upload path."""
    return f"{PROBES_PREFIX}{token}-{upload_kind}"


def commit_turn_key(token: str) -> str:
    """The object by which one committer asks for the commit turn."""
    return f"{COMMIT_TURNS_PREFIX}c{token}"


def legacy_restore_prefix(restore_id: str) -> str:
    """Where an older version kept restore `restore_id`'s state in the archive."""
    return f"{LEGACY_RESTORES_PREFIX}{restore_id}/"


_HEX = "[0-9a-f]+"
_SEQUENCE = "[0-9]{19}"
# Each kind of key under STATE_PREFIX and the whole key's pattern.
KEY_KINDS: dict[str, re.Pattern[str]] = {
    "commit": re.compile(re.escape(COMMITS_PREFIX) + _SEQUENCE + r"\.json"),
    "checkpoint": re.compile(re.escape(CHECKPOINTS_PREFIX) + _SEQUENCE + r"\.json"),
    "checkpoint pointer": re.compile(re.escape(LAST_CHECKPOINT_KEY)),
    "lease": re.compile(re.escape(LEASES_PREFIX) + "[A-Za-z0-9._-]+"),
    "conditional writes": re.compile(re.escape(CONDITIONAL_WRITES_KEY)),
    "probe": re.compile(re.escape(PROBES_PREFIX) + _HEX + "-[a-z]+"),
    "commit turn": re.compile(re.escape(COMMIT_TURNS_PREFIX) + "c" + _HEX),
    "legacy restore": re.compile(re.escape(LEGACY_RESTORES_PREFIX) + "[A-Za-z0-9._-]+/.+"),
}


def kind_of(key: str) -> str | None:
    """The kind (a KEY_KINDS name) of a key under STATE_PREFIX; None for any other key."""
    return next((kind for kind, pattern in KEY_KINDS.items() if pattern.fullmatch(key)), None)
