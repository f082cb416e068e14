"""Self-checking JSON records: what topicvault writes outside the commit log and later trusts.

A record (a JSON object) carries CHECKSUM_FIELD, the SHA-256 of its canonical body, and, when
written with a keyring, AUTHENTICATION_FIELD over the same bytes: the MAC commit records and
checkpoints carry (core.crypto.authentication), so only a holder of the key can write one a
keyed reader accepts. Read with a keyring, a record must carry that authentication.

A record with neither field was written by topicvault before records carried a check: it is
read (`checked` is False, so verify can say so), unless it holds a top-level field its writer
never wrote, which is what damage to the check field's own name looks like, or unless it is read
with a keyring: whoever can write the records' store could otherwise drop the check and the MAC
and have a keyed reader trust what they wrote (only an import, an explicit act naming the
records, takes such a record with a keyring: `unchecked_ok`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection

from .crypto import AUTHENTICATION_FIELD, Keyring, Unauthenticated, authentication, check_authentication
from .errors import TopicvaultError

CHECKSUM_FIELD = "sha256"


class Damaged(TopicvaultError):
    """A record whose bytes are not what its writer wrote (the message says why, not what to do)."""


def _canonical(body: dict) -> bytes:
    """The bytes a record's check covers: its body without the check, as JSON parsed back would
    serialise (an int dict key becomes a string only once parsed), whatever the file's layout."""
    return json.dumps(json.loads(json.dumps(body)), sort_keys=True, separators=(",", ":")).encode()


def sealed(body: dict, keyring: Keyring | None) -> dict:
    """`body` with its check: the SHA-256 of its canonical bytes and, with a keyring, their
    authentication by its sealing key."""
    plain = {k: v for k, v in body.items() if k not in (CHECKSUM_FIELD, AUTHENTICATION_FIELD)}
    canonical = _canonical(plain)
    result = {**plain, CHECKSUM_FIELD: hashlib.sha256(canonical).hexdigest()}
    if keyring is not None:
        result[AUTHENTICATION_FIELD] = authentication(canonical, keyring.sealing)
    return result


def opened(body: object, keyring: Keyring | None, what: str, legacy_fields: Collection[str],
           unchecked_ok: bool = False) -> tuple[object, bool]:
    """`body` (a parsed record) without its check, and whether it carried one; raise Damaged when
    the check fails, Unauthenticated/KeyUnavailable when a keyring is given and the record is not
    authenticated by one of its keys (one with no check at all too, unless `unchecked_ok`).
    `legacy_fields`: every top-level field the record's writer put in it before records carried a
    check (a non-object body counts as such a record)."""
    if not isinstance(body, dict):  # an older peer list (a bare JSON list): an unchecked record
        _check_unchecked_allowed(keyring, unchecked_ok, what)
        return body, False
    body = dict(body)
    checksum, auth = body.pop(CHECKSUM_FIELD, None), body.pop(AUTHENTICATION_FIELD, None)
    if checksum is None and auth is None:
        unknown = sorted(set(body) - set(legacy_fields))
        if unknown:
            raise Damaged(f"it carries no check, and field(s) {', '.join(map(repr, unknown))} no topicvault writes")
        _check_unchecked_allowed(keyring, unchecked_ok, what)
        return body, False  # written before records carried a check: the caller says it is unchecked
    canonical = _canonical(body)
    if checksum != hashlib.sha256(canonical).hexdigest():
        raise Damaged("its checksum does not match its content")
    if keyring is not None:
        check_authentication(canonical, auth, keyring, what)
    return body, True


def _check_unchecked_allowed(keyring: Keyring | None, unchecked_ok: bool, what: str) -> None:
    """Refuse a record with no check when read with a keyring (see the module doc), unless `unchecked_ok`."""
    if keyring is not None and not unchecked_ok:
        raise Unauthenticated(f"{what} carries no authentication (written before restore records carried "
                              "a check, or by someone without the key), and a keyed restore trusts only what "
                              "the key vouches for")
