"""Client-side envelope encryption of stored objects (issue #22).

An encrypted object is the format's finished bytes (compressed by the format, Parquet footer
and column statistics included) sealed whole with AES-256-GCM under a fresh data key per
object. The data key is wrapped by a key-encryption key — a local key file or an AWS KMS key
— and travels with the object in a small self-describing container:

    MAGIC (8 bytes: b"TVENC\\x00\\x00\\x01", last byte = container version)
    header length (4 bytes, big-endian)
    header (JSON: alg, key_id, wrapped data key, nonce; no record data)
    ciphertext + 16-byte GCM tag

The associated data is the magic and header bytes plus the object's key (relative to the
location, so the location can be copied elsewhere): an object's bytes moved under another
key, or a header edited, fail authentication.

A key id names the key-encryption key without revealing it: `file:<16 hex of sha256>` for a key
file, `kms:<key ARN>` for KMS. Commit records note it per object, so a restore can refuse a
missing key before it produces anything.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from .errors import CLI_WORDING, CorruptObject, TopicvaultError, Wording

MAGIC = b"TVENC\x00\x00\x01"
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


def is_sealed(data: bytes) -> bool:
    """Whether `data` is an encrypted object container."""
    return data[:len(MAGIC)] == MAGIC


def _aad(prefix: bytes, object_key: str) -> bytes:
    return prefix + b"\x00" + object_key.encode()


def seal(data: bytes, object_key: str, provider: KeyProvider) -> bytes:
    """`data` encrypted under a fresh data key wrapped by `provider`, bound to `object_key`."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key, wrapped = provider.new_data_key()
    nonce = os.urandom(NONCE_BYTES)
    header = json.dumps({"alg": ALGORITHM, "key_id": provider.key_id,
                         "wrapped_key": base64.b64encode(wrapped).decode(),
                         "nonce": base64.b64encode(nonce).decode()}, sort_keys=True).encode()
    prefix = MAGIC + _HEADER_LENGTH.pack(len(header)) + header
    return prefix + AESGCM(data_key).encrypt(nonce, data, _aad(prefix, object_key))


def _header(data: bytes, object_key: str) -> tuple[dict, bytes, bytes]:
    try:
        (length,) = _HEADER_LENGTH.unpack_from(data, len(MAGIC))
        end = len(MAGIC) + _HEADER_LENGTH.size + length
        header = json.loads(data[len(MAGIC) + _HEADER_LENGTH.size:end])
        if header.get("alg") != ALGORITHM or not isinstance(header.get("key_id"), str):
            raise ValueError(f"algorithm {header.get('alg')!r}")
        return header, data[:end], data[end:]
    except (struct.error, ValueError, AttributeError) as exc:
        raise CorruptObject(f"object {object_key} has a damaged encryption header ({exc})") from None


def unseal(data: bytes, object_key: str, keyring: Keyring | None) -> bytes:
    """The format bytes of a sealed object; one-line errors name the object (missing key, damage)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    header, prefix, ciphertext = _header(data, object_key)
    if keyring is None:
        raise KeyUnavailable(missing_key_message(object_key, header["key_id"], ()))
    provider = keyring.provider(header["key_id"], object_key)
    try:
        data_key = provider.unwrap(base64.b64decode(header["wrapped_key"]))
        return AESGCM(data_key).decrypt(base64.b64decode(header["nonce"]), ciphertext, _aad(prefix, object_key))
    except CorruptObject as exc:
        raise CorruptObject(f"object {object_key}: {exc}") from None
    except (InvalidTag, ValueError):
        raise CorruptObject(f"object {object_key} fails decryption with key {header['key_id']}: it was changed, "
                            "damaged or moved from another key") from None


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


def require_keys(entries, keyring: Keyring | None, wording: Wording = CLI_WORDING) -> None:
    """Refuse, before anything is produced, objects whose commit names a key that was not given."""
    given = keyring.key_ids if keyring else ()
    for entry in entries:
        if entry.key_id and entry.key_id not in given:
            raise KeyUnavailable(missing_key_message(entry.key, entry.key_id, given, wording))
