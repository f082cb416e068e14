"""Run leases: a run that is writing objects it has not committed yet says so in the location.

A backup or a compact stores its objects first and commits them at its end, so until then they
look like orphans (named by no commit). Garbage collection (source.maintenance.garbage) deletes orphans older
than its --grace; without a lease, a run longer than the grace lost its objects to a daily
compact or expire and could never finish (a first backup of a big topic can run for days).

The run's driver holds a lease, a small object `_topicvault/leases/<run id>`, from before its
first object until after its commit: put first (a location that cannot be written fails the run
there), renewed every RENEW_EVERY_S by a thread whatever the tasks are doing (waiting for
executors, uploading; a failed renewal is logged once, and so is the next one that gets
through), deleted at the end. While a lease was written less than LEASE_TTL_MS ago,
a collection leaves every object of that run alone, whatever the grace. A killed run's lease
stays and expires: its objects are orphans again, deleted after the grace; the lease itself once
expired for longer than the grace. A live run whose lease lapsed (its renewals failed for that
long, or the process stood still) is back where every run was without leases: it commits only if
every object it names is still there (check_objects_held, before each attempt of
core.commit_log.append). The lease's age is the store's modification time against the
collecting machine's clock: those must agree to well within LEASE_TTL_MS.

A DataFrame write or a follower's micro-batch holds no lease (its driver-side code runs in
short-lived processes): the grace must outlast it (a first `--follow` micro-batch takes the
whole topic unless --max-records-per-trigger bounds it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable

from ..errors import ObjectNotFound, TopicvaultError
from ..stores.store import ObjectInfo, ObjectStore
from .archive_keys import LEASES_PREFIX, lease_key
from .commits import CommitRecord

log = logging.getLogger(__name__)

# A lease older than this is a dead run's: ten renewals missed.
LEASE_TTL_MS = 10 * 60_000
RENEW_EVERY_S = 60.0


class RenewedObject:
    """A small object a run holds in `store` while it works: put, renewed every `renew_every_s` by a
    thread of its own whatever the run is doing, removed at the end; whoever lists the store takes
    one not renewed for long as a dead run's. Run leases (RunLease) and commit turns
    (conditional_writes.CommitTurn) are this one mechanism. A failed renewal is logged once per
    streak of failures (renewal_failed says what it risks), and so is the next one that gets through."""

    def __init__(self, store: ObjectStore, key: str, renew_every_s: float, thread_name: str,
                 logger: logging.Logger = log) -> None:
        self.store, self.key, self._renew_every_s, self._log = store, key, renew_every_s, logger
        self.renewed = 0.0  # monotonic time the last successful put began
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name=thread_name, daemon=True)

    @property
    def renew_every_s(self) -> float:
        """Seconds between renewals."""
        return self._renew_every_s

    def put(self) -> None:
        """Write the object now (raises when the store cannot be written)."""
        # The start, not the end: the object may have landed (and a reader's clock started) as soon
        # as the request was sent.
        began = time.monotonic()
        self.store.put(self.key, json.dumps({"renewed_ms": int(time.time() * 1000)}).encode())
        self.renewed = max(self.renewed, began)

    def start_renewing(self) -> None:
        """Renew the object on a thread until remove()."""
        self._renewer.start()

    def remove(self) -> None:
        """Stop renewing and delete the object."""
        self._stop.set()
        if self._renewer.ident is not None:
            # Not waiting out a renewal stuck in a slow put (S3 retries take minutes): a late one
            # only brings back an object that expires by itself.
            self._renewer.join(timeout=5)
        self.delete()

    def delete(self) -> None:
        """Delete the object; left behind when that fails, it expires and is removed by whoever lists it."""
        try:
            self.store.delete(self.key)
        except Exception:  # noqa: BLE001 - see the docstring
            pass

    def renewal_failed(self, error: Exception) -> str:
        """The one line logged when a streak of failed renewals begins."""
        return f"{self.key} not renewed ({error}): trying again every {self.renew_every_s:.0f} s"

    def _renew(self) -> None:
        failing = False
        while not self._stop.wait(self.renew_every_s):
            try:
                self.put()
            except Exception as exc:  # noqa: BLE001 - the next renewal may get through
                if not failing:  # one line per streak of failures, not one per renewal
                    self._log.warning("%s", self.renewal_failed(exc))
                failing = True
            else:
                if failing:
                    self._log.warning("%s renewed again", self.key)
                failing = False


class RunLease(RenewedObject):
    """Holds `run_id`'s lease in `store` while a `with` block runs (see the module doc)."""

    def __init__(self, store: ObjectStore, run_id: str, renew_every_s: float = RENEW_EVERY_S) -> None:
        super().__init__(store, lease_key(run_id), renew_every_s, f"lease-{run_id}")

    def __enter__(self) -> "RunLease":
        self.put()  # before anything of the run is written; raises if the location cannot be written
        self.start_renewing()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()  # committed, or failed: either way nothing more to protect

    def renewal_failed(self, error: Exception) -> str:
        """The lease lapsing risks the run's objects: say so, once per streak (LEASE_TTL_MS allows ten)."""
        return (f"lease {self.key} not renewed ({error}): trying again every {self.renew_every_s:.0f} s; if it "
                f"lapses ({LEASE_TTL_MS // 60_000} min), a compact or expire with a shorter --grace than this run may "
                "delete its objects, and its commit then fails naming them")


def live_runs(listing: Iterable[ObjectInfo], now_ms: int) -> set[str]:
    """The run ids whose lease (in `listing`, a listing of the location) is not yet expired."""
    return {info.key[len(LEASES_PREFIX):] for info in listing
            if info.key.startswith(LEASES_PREFIX) and _age_ms(info, now_ms) < LEASE_TTL_MS}


def expired_leases(listing: Iterable[ObjectInfo], now_ms: int, grace_ms: int) -> list[str]:
    """Keys of leases expired for longer than `grace_ms`: killed runs' leftovers."""
    return [info.key for info in listing
            if info.key.startswith(LEASES_PREFIX) and _age_ms(info, now_ms) >= LEASE_TTL_MS + grace_ms]


def _age_ms(info: ObjectInfo, now_ms: int) -> int:
    # A listing without modification times (none of ours) cannot show a lease as live.
    return now_ms - info.modified_ms if info.modified_ms is not None else LEASE_TTL_MS


def damaged_leases(store: ObjectStore) -> list[str]:
    """Each lease whose body is not one a run writes: collections go by its modification time
    only, so it still guards its run's objects until it expires."""
    damaged = []
    for info in store.list(LEASES_PREFIX):
        try:
            body = json.loads(store.get(info.key))
            int(body["renewed_ms"])
        except ObjectNotFound:
            continue  # its run ended meanwhile
        except (ValueError, KeyError, TypeError) as exc:
            damaged.append(f"lease {info.key} is unreadable ({type(exc).__name__}: {exc}): compact and expire go by "
                           "its modification time only, so it still guards its run until it expires")
    return damaged


def check_objects_held(store: ObjectStore, record: CommitRecord) -> None:
    """Raise (one line) unless the store holds every object `record` adds.

    A run writes its objects first and commits them last; a compact or expire deletes them as
    orphans meanwhile if the run's lease lapsed (see the module doc, source.maintenance.garbage). Committing them
    anyway would name a hole that every restore then stops at; a compact would also retire the
    originals of the missing merged objects. Checked right before each commit attempt: one
    listing per folder of new objects, or a stat per object in a directory (ObjectStore.missing)."""
    missing = store.missing(o.key for o in record.objects)
    if missing:
        raise TopicvaultError(
            f"{len(missing)} object(s) this {record.kind} wrote are gone from {store.uri} (first: {missing[0]}): "
            "they were deleted by a garbage collection (compact or expire) while it ran (a DataFrame write or "
            f"micro-batch longer than the --grace, or a lease not renewed for {LEASE_TTL_MS // 60_000} minutes), so "
            "nothing was committed; run it again, with a --grace longer than your longest DataFrame write or "
            "micro-batch (bound a first --follow batch with --max-records-per-trigger)"
        )
