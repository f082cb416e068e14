"""Client-side envelope encryption of stored objects (issue #22).

An encrypted object is the format's finished bytes (compressed by the format, Parquet footer
and column statistics included) sealed whole with AES-256-GCM under a fresh data key per
object. The data key is wrapped by a key-encryption key — a local key file or an AWS KMS key
— and travels with the object in a small self-describing container:

    MAGIC (8 bytes: b"TVENC\\x00\\x00\\x02", last byte = container version)
    header length (4 bytes, big-endian)
    header (JSON: alg, key_id, wrapped data key, nonce; no record data)
    ciphertext + 16-byte GCM tag

The associated data is the magic and header bytes, the object's key (relative to the
location, so the location can be copied elsewhere) and, from container version 2 on, what
its commit entry says it holds (topic, partition, first and last offset, record count: an
ObjectBinding): an object's bytes moved under another key, named by a commit entry of another
topic, partition or range, or a header edited, fail authentication. Version 1 containers
(written before) bind the key only; they are still read (and their records' topic and
partition checked against the entry by source.object_reader).

A key id names the key-encryption key without revealing it: `file:<16 hex of sha256>` for a key
file, `kms:<key ARN>` for KMS. Commit records note it per object, so a restore can refuse a
missing key before it produces anything.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from .errors import CLI_WORDING, CorruptObject, TopicvaultError, Wording

MAGIC_PREFIX = b"TVENC\x00\x00"
CONTAINER_V1, CONTAINER_V2 = 1, 2
MAGIC = MAGIC_PREFIX + bytes([CONTAINER_V2])  # what new objects are sealed with
ALGORITHM = "AES-256-GCM"
KEY_BYTES = 32
NONCE_BYTES = 12
_HEADER_LENGTH = struct.Struct(">I")
_WRAP_AAD = b"topicvault data key v1"
KEY_SPEC_HELP = "use file:///path/to/keyfile (made by `topicvault keygen PATH`) or kms://KEY_ID_OR_ALIAS"


class KeyUnavailable(TopicvaultError):
    """An encrypted object needs a key that was not given (or cannot be used)."""


class KeyProvider(Protocol):
    """A key-encryption key: wraps fresh data keys and unwraps stored ones."""

    key_id: str

    def new_data_key(self) -> tuple[bytes, bytes]:
        """A fresh data key: (plaintext, wrapped form to store with the object)."""

    def unwrap(self, wrapped: bytes) -> bytes:
        """The plaintext of a data key this provider wrapped."""


def file_key_id(key: bytes) -> str:
    """The public name of a key file's key: a fingerprint, never the key."""
    return "file:" + hashlib.sha256(b"topicvault key id\x00" + key).hexdigest()[:16]


@dataclass(frozen=True)
class FileKey:
    """A 32-byte key read from a base64 file; data keys are wrapped with AES-256-GCM under it."""

    path: str
    key: bytes
    key_id: str

    def __repr__(self) -> str:  # the key must never reach a log line
        return f"FileKey({self.key_id}, {self.path})"

    def new_data_key(self) -> tuple[bytes, bytes]:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        data_key, nonce = os.urandom(KEY_BYTES), os.urandom(NONCE_BYTES)
        return data_key, nonce + AESGCM(self.key).encrypt(nonce, data_key, _WRAP_AAD)

    def unwrap(self, wrapped: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            return AESGCM(self.key).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _WRAP_AAD)
        except (InvalidTag, ValueError):
            raise CorruptObject("its wrapped data key does not open with the key of the same id: "
                                "the object was changed or damaged") from None


@dataclass(frozen=True)
class KmsKey:
    """An AWS KMS key (id, ARN or alias); boto3's credential chain and AWS_ENDPOINT_URL apply."""

    spec: str  # as given after kms://
    key_id: str  # kms:<key ARN>, as KMS reports it

    @property
    def arn(self) -> str:
        return self.key_id[len("kms:"):]

    def new_data_key(self) -> tuple[bytes, bytes]:
        answer = _kms_call(self.spec, "GenerateDataKey", KeyId=self.arn, KeySpec="AES_256")
        return answer["Plaintext"], answer["CiphertextBlob"]

    def unwrap(self, wrapped: bytes) -> bytes:
        return _kms_call(self.spec, "Decrypt", KeyId=self.arn, CiphertextBlob=wrapped)["Plaintext"]


@functools.lru_cache(maxsize=None)
def _kms_client():
    import boto3

    # boto3 itself honours AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_KMS, the region and the credential chain.
    return boto3.session.Session().client("kms")


def _kms_call(spec: str, operation: str, **arguments) -> dict:
    from botocore.exceptions import BotoCoreError, ClientError

    method = {"GenerateDataKey": "generate_data_key", "Decrypt": "decrypt", "DescribeKey": "describe_key"}[operation]
    try:
        return getattr(_kms_client(), method)(**arguments)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in ("InvalidCiphertextException", "IncorrectKeyException"):
            raise CorruptObject(f"KMS key {spec} cannot decrypt its data key: the object was changed or damaged, "
                                "or was wrapped by another key") from None
        raise KeyUnavailable(f"KMS {operation} with key {spec} failed: {error.get('Code')}: "
                             f"{' '.join(str(error.get('Message', '')).split())}; check the key id, its key "
                             "policy and the AWS credentials") from None
    except BotoCoreError as exc:
        raise KeyUnavailable(f"KMS {operation} with key {spec} failed: {exc}; check AWS_ENDPOINT_URL, "
                             "the region and the AWS credentials") from None


def read_key_file(path: str) -> bytes:
    """The 32 key bytes of a key file written by `keygen` (base64, one line)."""
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise KeyUnavailable(f"encryption key file {path} cannot be read ({exc.strerror}): "
                             "check the path (`topicvault keygen PATH` writes one)") from None
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyUnavailable(f"encryption key file {path} does not hold base64 of {KEY_BYTES} bytes: "
                             "write one with `topicvault keygen PATH`")
    return key


def write_key_file(path: str) -> str:
    """Write a new random key as base64 to `path` (owner-only, never over an existing file); return its id."""
    key = os.urandom(KEY_BYTES)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise TopicvaultError(f"{path} exists: keygen never overwrites a key (objects wrapped by it would be "
                              "lost); choose a new path") from None
    except OSError as exc:
        raise TopicvaultError(f"cannot create key file {path}: {exc.strerror}") from None
    with os.fdopen(descriptor, "w") as out:
        out.write(base64.b64encode(key).decode() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return file_key_id(key)


def key_provider(spec: str, wording: Wording = CLI_WORDING) -> KeyProvider:
    """The key named by `spec`: file:///path or kms://KEY_ID_OR_ALIAS (checked: readable / known to KMS)."""
    setting = wording.setting("--encryption-key", "encryptionKey")
    if spec.startswith("file://"):
        path = spec[len("file://"):]
        key = read_key_file(path)
        return FileKey(path, key, file_key_id(key))
    if spec.startswith("kms://"):
        name = spec[len("kms://"):]
        if not name:
            raise TopicvaultError(f"bad {setting} {spec!r}: {KEY_SPEC_HELP}")
        arn = _kms_call(name, "DescribeKey", KeyId=name)["KeyMetadata"]["Arn"]
        return KmsKey(name, "kms:" + arn)
    raise TopicvaultError(f"bad {setting} {spec!r}: {KEY_SPEC_HELP}")


@dataclass(frozen=True)
class Keyring:
    """The keys a command was given; the first one seals new objects."""

    providers: tuple[KeyProvider, ...]

    @property
    def sealing(self) -> KeyProvider:
        return self.providers[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(p.key_id for p in self.providers)

    def provider(self, key_id: str, object_key: str) -> KeyProvider:
        """The provider with `key_id`; a one-line error naming the object when it was not given."""
        for candidate in self.providers:
            if candidate.key_id == key_id:
                return candidate
        raise KeyUnavailable(missing_key_message(object_key, key_id, self.key_ids))


@functools.lru_cache(maxsize=32)
def keyring_of(specs: tuple[str, ...], wording: Wording = CLI_WORDING) -> Keyring | None:
    """The keyring for these key specs (None without any); cached per process (Spark workers)."""
    if not specs:
        return None
    providers = tuple(key_provider(spec, wording) for spec in specs)
    return Keyring(providers)


def missing_key_message(object_key: str, key_id: str, given: Sequence[str], wording: Wording = CLI_WORDING) -> str:
    """One line: which object needs which key, and what was given instead."""
    setting = wording.setting("--encryption-key", "encryptionKey")
    offered = f"the keys given are {', '.join(given)}" if given else f"no {setting} was given"
    how = f"{setting} (comma-separated keys)" if wording.dataframe else f"{setting} (repeatable)"
    return (f"object {object_key} is encrypted with key {key_id}, but {offered}: pass that key with "
            f"{how}; nothing was produced or written")


@dataclass(frozen=True)
class ObjectBinding:
    """What a commit entry says an object holds; sealed into its associated data (container v2)."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int

    @classmethod
    def of(cls, entry) -> "ObjectBinding":
        """The binding of a commit entry (core.commits.ObjectEntry)."""
        return cls(entry.topic, entry.partition, entry.first_offset, entry.last_offset, entry.records)

    def encode(self) -> bytes:
        return json.dumps([self.topic, self.partition, self.first_offset, self.last_offset, self.records]).encode()


def is_sealed(data: bytes) -> bool:
    """Whether `data` is an encrypted object container (any version)."""
    return data[:len(MAGIC_PREFIX)] == MAGIC_PREFIX


def container_version(head: bytes) -> int | None:
    """The container version of an object whose first bytes are `head` (at least len(MAGIC));
    None: not an encrypted object."""
    return head[len(MAGIC_PREFIX)] if is_sealed(head) and len(head) > len(MAGIC_PREFIX) else None


def _aad(prefix: bytes, object_key: str, binding: ObjectBinding | None) -> bytes:
    aad = prefix + b"\x00" + object_key.encode()
    if prefix[len(MAGIC_PREFIX)] == CONTAINER_V1:
        return aad
    if binding is None:
        raise CorruptObject(f"object {object_key} is bound to the commit entry that names it, and none was given: "
                            "read it through the commit records (inspect --topic, restore)")
    return aad + b"\x00" + binding.encode()


def seal(data: bytes, object_key: str, provider: KeyProvider, binding: ObjectBinding) -> bytes:
    """`data` encrypted under a fresh data key wrapped by `provider`, bound to `object_key` and
    to what its commit entry will say it holds (`binding`)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key, wrapped = provider.new_data_key()
    nonce = os.urandom(NONCE_BYTES)
    header = json.dumps({"alg": ALGORITHM, "key_id": provider.key_id,
                         "wrapped_key": base64.b64encode(wrapped).decode(),
                         "nonce": base64.b64encode(nonce).decode()}, sort_keys=True).encode()
    prefix = MAGIC + _HEADER_LENGTH.pack(len(header)) + header
    return prefix + AESGCM(data_key).encrypt(nonce, data, _aad(prefix, object_key, binding))


def _header(data: bytes, object_key: str) -> tuple[dict, bytes, bytes]:
    try:
        if data[len(MAGIC_PREFIX)] not in (CONTAINER_V1, CONTAINER_V2):
            raise ValueError(f"container version {data[len(MAGIC_PREFIX)]}, written by a newer topicvault?")
        (length,) = _HEADER_LENGTH.unpack_from(data, len(MAGIC))
        end = len(MAGIC) + _HEADER_LENGTH.size + length
        header = json.loads(data[len(MAGIC) + _HEADER_LENGTH.size:end])
        if header.get("alg") != ALGORITHM or not isinstance(header.get("key_id"), str):
            raise ValueError(f"algorithm {header.get('alg')!r}")
        return header, data[:end], data[end:]
    except (struct.error, ValueError, AttributeError, IndexError) as exc:
        raise CorruptObject(f"object {object_key} has a damaged encryption header ({exc})") from None


def unseal(data: bytes, object_key: str, keyring: Keyring | None, binding: ObjectBinding | None) -> bytes:
    """The format bytes of a sealed object that its commit entry says holds `binding` (checked
    from container v2 on); one-line errors name the object (missing key, damage, another entry's)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    header, prefix, ciphertext = _header(data, object_key)
    if keyring is None:
        raise KeyUnavailable(missing_key_message(object_key, header["key_id"], ()))
    provider = keyring.provider(header["key_id"], object_key)
    try:
        data_key = provider.unwrap(base64.b64decode(header["wrapped_key"]))
    except CorruptObject as exc:
        raise CorruptObject(f"object {object_key}: {exc}") from None
    aad = _aad(prefix, object_key, binding)
    try:
        return AESGCM(data_key).decrypt(base64.b64decode(header["nonce"]), ciphertext, aad)
    except (InvalidTag, ValueError):
        raise CorruptObject(f"object {object_key} fails decryption with key {header['key_id']}: it was changed, "
                            "damaged, moved from another key or named by a commit entry of other records "
                            "(another topic, partition or offsets)") from None


def open_data_key(data: bytes, object_key: str, keyring: Keyring | None) -> None:
    """Unwrap a sealed object's data key only: proves the key (and for KMS the Decrypt permission)
    works, without decrypting the records."""
    header = _header(data, object_key)[0]
    if keyring is None:
        raise KeyUnavailable(missing_key_message(object_key, header["key_id"], ()))
    try:
        keyring.provider(header["key_id"], object_key).unwrap(base64.b64decode(header["wrapped_key"]))
    except CorruptObject as exc:
        raise CorruptObject(f"object {object_key}: {exc}") from None
    except KeyUnavailable as exc:
        raise KeyUnavailable(f"object {object_key}: {exc}") from None


class PlaintextRefused(TopicvaultError):
    """An unencrypted object where keys were given: anyone who can write the bucket can make one."""


def refuse_plaintext(object_key: str) -> None:
    """Raise PlaintextRefused for `object_key`, with what to do."""
    raise PlaintextRefused(
        f"object {object_key} is not encrypted, but --encryption-key was given: with keys only encrypted "
        "objects are read, as anyone who can write the bucket can put an unencrypted one in; if the location "
        "was backed up without a key before, encrypt those objects with `topicvault compact --encryption-key "
        "...`, or read it without --encryption-key")


def require_keys(entries, keyring: Keyring | None, allow_plaintext: bool = False,
                 wording: Wording = CLI_WORDING) -> None:
    """Refuse, before anything is produced, objects whose commit names a key that was not given,
    and (with keys, unless `allow_plaintext`) objects committed unencrypted."""
    given = keyring.key_ids if keyring else ()
    for entry in entries:
        if entry.key_id and entry.key_id not in given:
            raise KeyUnavailable(missing_key_message(entry.key, entry.key_id, given, wording))
        if keyring is not None and not entry.key_id and not allow_plaintext:
            refuse_plaintext(entry.key)


# --- authenticated state (commit records, checkpoints) -------------------------------------
#
# restic's model: whoever holds the key can write state, nobody else. Each record carries a
# fresh data key wrapped by the sealing key (as an object does: a key file and KMS alike) and an
# HMAC-SHA256 of its canonical bytes under a key derived from that data key with HKDF; checking
# it unwraps the data key (a key file: local AES; KMS: one Decrypt, cached per process).

AUTHENTICATION_FIELD = "authentication"
_MAC_INFO = b"topicvault state mac v1"


class Unauthenticated(TopicvaultError):
    """State (a commit record, a checkpoint) read with keys that no key given vouches for."""


def _mac(data_key: bytes, body: bytes) -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    mac_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_MAC_INFO).derive(data_key)
    return hmac.new(mac_key, body, hashlib.sha256).hexdigest()


def authentication(body: bytes, provider: KeyProvider) -> dict:
    """What vouches for `body` (canonical bytes of a record): key id, wrapped MAC data key, MAC."""
    data_key, wrapped = provider.new_data_key()
    return {"key_id": provider.key_id, "wrapped_key": base64.b64encode(wrapped).decode(), "mac": _mac(data_key, body)}


@functools.lru_cache(maxsize=4096)
def _unwrapped(provider: KeyProvider, wrapped: bytes) -> bytes:
    return provider.unwrap(wrapped)


def check_authentication(body: bytes, auth: object, keyring: Keyring, what: str) -> None:
    """Raise Unauthenticated (one line naming `what`) unless `auth` is a valid authentication of
    `body` under a key of `keyring` (KeyUnavailable when its key was not given)."""
    if auth is None:
        raise Unauthenticated(f"{what} is not authenticated, but --encryption-key was given: it was written "
                              "without the key; nothing was produced")
    key_id = str(auth.get("key_id")) if isinstance(auth, dict) else "?"
    if key_id not in keyring.key_ids:
        raise KeyUnavailable(f"{what} is authenticated with key {key_id}, but the keys given are "
                             f"{', '.join(keyring.key_ids)}: pass that key with --encryption-key (repeatable); "
                             "nothing was produced or written")
    try:
        data_key = _unwrapped(keyring.provider(key_id, what), base64.b64decode(auth["wrapped_key"]))
        good = hmac.compare_digest(_mac(data_key, body), str(auth["mac"]))
    except (CorruptObject, KeyError, TypeError, ValueError):
        good = False
    if not good:
        raise Unauthenticated(f"{what} fails authentication with key {key_id}: it was changed by someone "
                              "without the key; nothing was produced")
