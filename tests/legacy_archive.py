"""Encrypted archives as topicvault wrote them before issue #39 item 4: objects in container
version 1 (bound to their name only), commit records without authentication, no checkpoint
written with a key. Made from a location the current code wrote, so tests need no old release."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

from topicvault.core.crypto import FileKey, Keyring, ObjectBinding, keyring_of, unseal
from topicvault.core.stores.local_store import LocalStore

COMMITS = "_topicvault/commits"


def seal_v1(data: bytes, object_key: str, key: FileKey) -> bytes:
    """A container as topicvault wrote it before version 2: bound to the object key only."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key, wrapped = key.new_data_key()
    nonce = os.urandom(12)
    header = json.dumps({"alg": "AES-256-GCM", "key_id": key.key_id, "wrapped_key": base64.b64encode(wrapped).decode(),
                         "nonce": base64.b64encode(nonce).decode()}, sort_keys=True).encode()
    prefix = b"TVENC\x00\x00\x01" + struct.pack(">I", len(header)) + header
    return prefix + AESGCM(data_key).encrypt(nonce, data, prefix + b"\x00" + object_key.encode())


def strip_authentication(path: Path) -> dict:
    """Remove what authenticates the commit record at `path` (as before #39); return its body."""
    body = json.loads(path.read_bytes())
    body.pop("authentication", None)
    body.pop("authenticated_from", None)
    path.write_text(json.dumps(body, sort_keys=True, indent=1))
    return body


def as_written_before_authentication(location: Path, spec: str, up_to: int | None = None) -> None:
    """Rewrite the commit records of `location` (all, or those up to sequence `up_to`) and the
    objects they name as topicvault wrote them before #39; drop the checkpoints."""
    keyring: Keyring = keyring_of((spec,))
    store = LocalStore(str(location))
    for path in sorted((location / COMMITS).glob("*.json")):
        if up_to is not None and int(path.stem) > up_to:
            break
        body = strip_authentication(path)
        for entry in body["objects"]:
            if entry.get("key_id"):
                binding = ObjectBinding(entry["topic"], entry["partition"], entry["first_offset"],
                                        entry["last_offset"], entry["records"])
                old = seal_v1(unseal(store.get(entry["key"]), entry["key"], keyring, binding), entry["key"],
                              keyring.sealing)
                (location / entry["key"]).write_bytes(old)
                entry["sha256"] = hashlib.sha256(old).hexdigest()
        path.write_text(json.dumps(body, sort_keys=True, indent=1))
    shutil.rmtree(location / "_topicvault" / "checkpoints", ignore_errors=True)
    (location / "_topicvault" / "_last_checkpoint").unlink(missing_ok=True)


def downgrade_with_decoys(location: Path) -> None:
    """Issue #50.1's downgrade of an archive authenticated from its first commit: authentication
    stripped from every commit record, a decoy entry (a real key id, an object that does not
    exist) put first in each, an unauthenticated expire commit appended that removes the decoys,
    the checkpoints deleted. What is left reads like an archive from before #39 whose commit
    records can be edited at will (edit_commit)."""
    paths = sorted((location / COMMITS).glob("*.json"))
    removed = []
    for path in paths:
        body = strip_authentication(path)
        real = next(o for o in body["objects"] if o.get("key_id"))
        decoy = dict(real, key=f"{real['key'].rsplit('/', 1)[0]}/decoy-{path.stem}.parquet")
        body["objects"].insert(0, decoy)
        removed.append({"topic": decoy["topic"], "partition": decoy["partition"], "key": decoy["key"]})
        path.write_text(json.dumps(body, sort_keys=True, indent=1))
    last = json.loads(paths[-1].read_bytes())
    expire = {"format_version": 2, "kind": "expire", "sequence": last["sequence"] + 1,
              "created_ms": last["created_ms"] + 1, "topics": {}, "ranges": [], "objects": [], "removed": removed}
    (location / COMMITS / f"{last['sequence'] + 1:019d}.json").write_text(json.dumps(expire, sort_keys=True, indent=1))
    shutil.rmtree(location / "_topicvault" / "checkpoints", ignore_errors=True)
    (location / "_topicvault" / "_last_checkpoint").unlink(missing_ok=True)


def edit_commit(location: Path, sequence: int, change) -> None:
    """Apply `change` to the parsed body of commit record `sequence` and write it back."""
    path = location / COMMITS / f"{sequence:019d}.json"
    body = json.loads(path.read_bytes())
    change(body)
    path.write_text(json.dumps(body, sort_keys=True, indent=1))


# An ACL a bucket writer would like a --cluster-state restore to create.
MALLORY_ACL = {"resource_type": "BROKER", "name": "kafka-cluster", "pattern_type": "LITERAL",
               "principal": "User:mallory", "host": "*", "operation": "ALL", "permission": "ALLOW"}
