"""Whether a location's store honours conditional writes, and commits in turns where it does not.

Every commit record is written only if absent (`If-None-Match: *`), so of two runs that read the
same state only one can commit (core.commits). Older MinIO and Ceph releases and some
S3-compatible services ignore that header on PutObject, some only on CompleteMultipartUpload:
there the second record silently replaced the first (a compact that had read the state before a
follower's micro-batch erased the batch from the archive, and the follower's next batch was then
committed across the hole).

Probe: once per location, the first committer writes a scratch key twice through each upload
path the store has (ObjectStore.upload_kinds), the second time only if absent: it must be
refused. The answer is remembered in CONDITIONAL_WRITES_KEY with the store it is true of
(ObjectStore.identity: endpoint and bucket, or the resolved directory); a location copied to
another store (a mirror, `aws s3 sync`) carries an answer about the first one, so a committer
that finds another store named there probes again (issue #50.8). Delete that object to probe
again on the same store (after upgrading it, say).

Turns: where a path ignores the condition, every committer (backup, `backup --follow`
micro-batches, DataFrame writes, compact, expire: all commit through
core.commit_log.append) takes an exclusive turn made of plain writes and one listing: it
puts its own object under COMMIT_TURNS_PREFIX, then lists them, and holds the turn only if no
other is there; else it removes its own and tries again after a pause. Two committers cannot both
hold it: whichever listed last saw the other's object, as long as a listing shows what was
written before it began (S3, MinIO and Ceph list with that consistency). Holding the turn, a
committer reads the commits forward, builds its record on the latest state and writes it.

A held turn is renewed every TURN_RENEW_S. A turn object seen unchanged for TURN_TTL_S by a
waiter's own clock (so machines' clocks need not agree) is a killed committer's, and is removed.
A holder whose last renewal began over half of that ago gives up before writing its commit, and
writes it through a store that gives up every request (retries included) by three quarters of the
TTL after that renewal began (`CommitTurn.store`, ObjectStore.within): no attempt of the commit is
sent, or waited on, once the turn may have lapsed, and the last quarter (30 s) is the margin for a
request already on the wire. Before that bound, botocore's retries (10 attempts of up to 60 s
each) could land a commit minutes later, over the commit of a waiter that had removed the
stale turn (issue #50.9).
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from ..stores.store import ObjectStore
from ..text import iso
from .archive_keys import COMMIT_TURNS_PREFIX, CONDITIONAL_WRITES_KEY, commit_turn_key, probe_key
from .leases import RenewedObject

log = logging.getLogger(__name__)

# A turn object unchanged for this long (seen by a waiter) is a killed committer's.
TURN_TTL_S = 120.0
TURN_RENEW_S = 15.0
# How long a committer waits for its turn before it gives up, committing nothing.
TURN_WAIT_S = 600.0
_UPLOADS = {"put": "writes in one request (PutObject)", "multipart": "multipart uploads (CompleteMultipartUpload)"}


@dataclass(frozen=True)
class ConditionalWrites:
    """What a probe found: whether a write-if-absent is refused when the key exists, per upload path."""

    put: bool
    multipart: bool | None  # None: the store has no multipart uploads
    probed_ms: int
    store: str = ""  # ObjectStore.identity of the store probed ("": remembered before it was named)

    @property
    def holds(self) -> bool:
        """True when every path a commit record can take honours the condition."""
        return self.put and self.multipart is not False

    def behaviour(self) -> str:
        """What the store does with a write-if-absent, in words."""
        ignored = [_UPLOADS[kind] for kind, held in (("put", self.put), ("multipart", self.multipart)) if held is False]
        if not ignored:
            return "the store honours If-None-Match"
        return (f"the store ignores If-None-Match on {' and '.join(ignored)} (a second write of one key "
                "replaced the first when probed)")

    def to_json(self) -> bytes:
        """As remembered in CONDITIONAL_WRITES_KEY."""
        return json.dumps({"put": self.put, "multipart": self.multipart, "probed_ms": self.probed_ms,
                           "store": self.store}).encode()

    @staticmethod
    def from_json(data: bytes) -> ConditionalWrites:
        """Parse a remembered answer; ValueError when it is not one."""
        try:
            body = json.loads(data)
            found = ConditionalWrites(body["put"], body["multipart"], int(body["probed_ms"]), body.get("store", ""))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(found.put, bool) or found.multipart not in (True, False, None):
            raise ValueError("put and multipart must be true or false")
        if not isinstance(found.store, str):
            raise ValueError("store must be a string")
        return found


def conditional_writes_damage(store: ObjectStore) -> list[str]:
    """CONDITIONAL_WRITES_KEY when it is there but unreadable, with what committers do instead."""
    try:
        ConditionalWrites.from_json(store.get(CONDITIONAL_WRITES_KEY))
    except ObjectNotFound:
        return []
    except ValueError as exc:
        return [f"{CONDITIONAL_WRITES_KEY} is unreadable ({exc}): the next backup, compact or expire probes the "
                "store again and rewrites it"]
    return []


def remembered_conditional_writes(store: ObjectStore) -> str | None:
    """What the location remembers of conditional writes, in words, and whether it is true of
    `store` (None: nothing remembered). Reads only: `ls` says it."""
    try:
        found = ConditionalWrites.from_json(store.get(CONDITIONAL_WRITES_KEY))
    except ObjectNotFound:
        return None
    except ValueError as exc:
        return f"{CONDITIONAL_WRITES_KEY} is unreadable ({exc}): the next committer probes the store again"
    when = iso(found.probed_ms)
    if found.store == store.identity():
        return f"{found.behaviour()} (probed on this store at {when})"
    return (f"{found.behaviour()} was probed on another store ({found.store or 'not named'}) at {when}, not on this "
            f"one ({store.identity()}): the next backup, compact or expire probes this one again")


def conditional_writes(store: ObjectStore) -> ConditionalWrites:
    """Whether `store` honours conditional writes: remembered in the location when probed on this
    very store, else probed now (and remembered)."""
    try:
        found = ConditionalWrites.from_json(store.get(CONDITIONAL_WRITES_KEY))
        if found.store == store.identity():
            return found
        log.warning("%s was probed on another store (%s), not %s (a copied location?): probing this one",
                    CONDITIONAL_WRITES_KEY, found.store or "not named", store.identity())
    except ObjectNotFound:
        pass
    except ValueError as exc:
        log.warning("%s is unreadable (%s): probing the store again", CONDITIONAL_WRITES_KEY, exc)
    found = probe(store)
    store.put(CONDITIONAL_WRITES_KEY, found.to_json())  # two probes racing write the same answer
    if not found.holds:
        log.warning("%s: %s; committers there take turns (see docs/failure-semantics.md)", store.uri,
                    found.behaviour())
    return found


def probe(store: ObjectStore) -> ConditionalWrites:
    """Write a scratch key twice through each of the store's upload paths, the second time only if
    absent, and see whether the store refuses it."""
    held = {kind: _refuses_a_second_write(store, kind) for kind in store.upload_kinds}
    return ConditionalWrites(held["put"], held.get("multipart"), int(time.time() * 1000), store.identity())


def _refuses_a_second_write(store: ObjectStore, kind: str) -> bool:
    key = probe_key(secrets.token_hex(6), kind)
    try:
        try:
            store.put_through(kind, key, b"first", if_none_match=True)
        except PreconditionFailed:
            pass  # a fresh key: the retry of a first attempt that landed
        try:
            store.put_through(kind, key, b"second", if_none_match=True)
        except PreconditionFailed:
            return store.get(key) == b"first"
        return False
    finally:
        try:
            store.delete(key)
        except TopicvaultError:
            pass  # a scratch object left behind harms nothing


class CommitTurn(RenewedObject):
    """The exclusive turn to commit to `store`, held while a `with` block runs (see the module doc).
    `found` (the probe's answer) names the store's behaviour when waiting fails."""

    def __init__(self, store: ObjectStore, found: ConditionalWrites | None = None) -> None:
        super().__init__(store, commit_turn_key(secrets.token_hex(6)), TURN_RENEW_S, "commit-turn", log)
        self.found = found

    @property
    def renew_every_s(self) -> float:
        """TURN_RENEW_S, read when each renewal is due."""
        return TURN_RENEW_S

    def __enter__(self) -> CommitTurn:
        deadline = time.monotonic() + TURN_WAIT_S
        seen: dict[str, tuple[tuple, float]] = {}  # another turn object: (its version, first seen at)
        pause = 0.05
        while True:
            self.put()
            others = self._others(seen)
            if not others:
                break
            self.delete()  # give the turn back
            if time.monotonic() + pause > deadline:
                raise TopicvaultError(self._refusal(others[0]))
            time.sleep(pause * random.uniform(0.5, 1.5))  # apart, so two contenders stop meeting
            pause = min(pause * 2, 2.0)
        self.start_renewing()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()  # left behind, it is removed once seen unchanged for TURN_TTL_S

    def check_held(self) -> None:
        """Raise unless the turn was renewed recently enough to write a commit under it."""
        since = time.monotonic() - self.renewed
        if since > TURN_TTL_S / 2:
            raise TopicvaultError(
                f"the turn to commit to {self.store.uri} was last renewed {since:.0f} s ago (the store could not be "
                "written), so another run may hold it now: nothing was committed; run it again"
            )

    def bounded_store(self) -> ObjectStore:
        """The store to write the commit through: every request given up by TURN_TTL_S * 3/4 after
        the last renewal began (see the module doc), so none lands once a waiter may take the turn."""
        self.check_held()
        return self.store.within(self.renewed + TURN_TTL_S * 3 / 4 - time.monotonic())

    def renewal_failed(self, error: Exception) -> str:
        """check_held refuses to commit once the turn lapses."""
        return f"turn {self.key} not renewed ({error})"

    def _others(self, seen: dict[str, tuple[tuple, float]]) -> list[str]:
        """The other turn objects that may be live; those seen unchanged for TURN_TTL_S are removed."""
        now = time.monotonic()
        live = []
        for info in self.store.list(COMMIT_TURNS_PREFIX):
            if info.key == self.key:
                continue
            version = (info.size, info.etag, info.modified_ms)
            first = seen.get(info.key)
            if first is None or first[0] != version:
                seen[info.key] = (version, now)
                live.append(info.key)
            elif now - first[1] >= TURN_TTL_S:
                log.warning("removing %s: unchanged for %.0f s, a killed committer's turn", info.key, now - first[1])
                self.store.delete(info.key)
            else:
                live.append(info.key)
        return live

    def _refusal(self, other: str) -> str:
        behaviour = self.found.behaviour() if self.found else "the store ignores conditional writes"
        return (f"cannot commit to {self.store.uri}: {behaviour}, so committers there take turns, and another run "
                f"held the turn ({other}) for the {TURN_WAIT_S:.0f} s this one waited: nothing was committed; run it "
                f"again (a killed run's turn is removed once seen unchanged for {TURN_TTL_S:.0f} s)")


@contextmanager
def commit_turn(store: ObjectStore) -> Iterator[CommitTurn | None]:
    """The exclusive turn to commit where `store` ignores conditional writes; None where it honours
    them (the commit's own write-if-absent then decides who wins)."""
    found = conditional_writes(store)
    if found.holds:
        yield None
        return
    with CommitTurn(store, found) as turn:
        yield turn
