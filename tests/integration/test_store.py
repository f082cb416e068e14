"""ObjectStore contract against a real directory and a real (moto) S3 server."""
from __future__ import annotations

import hashlib
import os
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
from topicvault.core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from topicvault.core.stores.local_store import LocalStore
from topicvault.core.stores.locations import open_store
from topicvault.core.stores.s3_store import S3Store
from topicvault.core.stores.store import ObjectInfo, ObjectStore

MiB = 1024 * 1024


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _boto(endpoint: str):
    return boto3.session.Session().client("s3", endpoint_url=endpoint)


def test_put_get_head_delete(store: ObjectStore) -> None:
    assert store.put("dir/sub/object.bin", b"\x00hello\xff") is None
    etag = store.head("dir/sub/object.bin").etag
    assert etag == _md5(b"\x00hello\xff")
    assert store.get("dir/sub/object.bin") == b"\x00hello\xff"
    assert store.head("dir/sub/object.bin") == ObjectInfo("dir/sub/object.bin", 7, etag)

    store.put("dir/sub/object.bin", b"")  # overwrite, empty object
    assert store.head("dir/sub/object.bin").etag == _md5(b"")
    assert store.get("dir/sub/object.bin") == b""

    store.delete("dir/sub/object.bin")
    assert store.head("dir/sub/object.bin") is None
    assert list(store.list()) == []
    store.delete("dir/sub/object.bin")  # absent is fine


def test_get_head_reads_the_first_bytes(store: ObjectStore) -> None:
    store.put("o", b"TVENC\x00\x00\x02rest")
    assert store.get_head("o", 8) == b"TVENC\x00\x00\x02"
    store.put("o", b"ab")
    assert store.get_head("o", 8) == b"ab"
    store.put("o", b"")
    assert store.get_head("o", 8) == b""
    with pytest.raises(ObjectNotFound):
        store.get_head("absent", 8)


def test_missing_object(store: ObjectStore) -> None:
    store.put("present", b"x")
    with pytest.raises(ObjectNotFound, match="absent"):
        store.get("absent")
    with pytest.raises(ObjectNotFound):
        store.get("present/below")
    assert store.head("absent") is None


def test_if_none_match_writes_once(store: ObjectStore) -> None:
    store.put("commits/1.json", b"first", if_none_match=True)
    assert store.head("commits/1.json").etag == _md5(b"first")
    with pytest.raises(PreconditionFailed):
        store.put("commits/1.json", b"second", if_none_match=True)
    assert store.get("commits/1.json") == b"first"


def test_if_match(store: ObjectStore) -> None:
    store.put("state.json", b"v1")
    etag = store.head("state.json").etag
    store.put("state.json", b"v2", if_match=etag)
    newer = store.head("state.json").etag
    assert newer == _md5(b"v2")
    assert store.get("state.json") == b"v2"

    with pytest.raises(PreconditionFailed):
        store.put("state.json", b"v3", if_match=etag)  # stale
    assert store.get("state.json") == b"v2"
    with pytest.raises(PreconditionFailed):
        store.put("never-written.json", b"v1", if_match=etag)
    assert store.head("never-written.json") is None


def _tricky_keys() -> list[str]:
    """1,204 keys whose string order differs from any directory-walk order.

    '-' < '.' < '/' < '0': the file p-xNNN sorts before directory p.x/, which sorts before
    directory p/; inside p/, file x-NNN sorts before directory x/, which sorts before file x0NNN.
    """
    keys = []
    for i in range(172):
        n = f"{i:03d}"
        keys += [f"p/x/{n}", f"p.x/{n}", f"p-x{n}", f"p/x.{n}", f"p0/{n}", f"p/x-{n}", f"p/x0{n}"]
    return keys


def test_list_is_lexicographic_paginated_prefix_and_start_after(
    store: ObjectStore, store_uri: str
) -> None:
    keys = _tricky_keys()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, k.encode()), keys))
    expected = sorted(keys)
    if isinstance(store, LocalStore):
        walked = [
            os.path.relpath(os.path.join(d, f), store.root).replace(os.sep, "/")
            for d, dirs, files in os.walk(store.root)
            if not dirs.sort() and not files.sort()
            for f in files
        ]
        assert walked != expected  # the keys really do defeat a naive walk

    listed = list(store.list())
    assert [info.key for info in listed] == expected
    assert all(i.size == len(i.key) and i.etag in (None, _md5(i.key.encode())) for i in listed)
    assert all(store.head(i.key).etag == _md5(i.key.encode()) for i in listed[:5])

    cases = [
        ("p", None), ("p/", None), ("p/x", None), ("p/x/", None), ("p.", None), ("p0/0", None),
        ("nothing", None), ("", "p/x"), ("", "p/x/100"), ("", "p.x/050"), ("", "p-x171"),
        ("", "p/x0"), ("", "p/x/"), ("", "zzz"), ("p/", "p/x-100"), ("p/x", "p/x.171"),
        ("p0/", "a"), ("", ""),
    ]
    for prefix, start_after in cases:
        want = [
            k for k in expected
            if k.startswith(prefix) and (start_after is None or k > start_after)
        ]
        got = [info.key for info in store.list(prefix, start_after=start_after)]
        assert got == want, (prefix, start_after)


def test_list_is_lazy(s3_endpoint: str) -> None:
    listing = open_store(f"s3://tv-missing-{uuid.uuid4().hex[:8]}/p").list()
    with pytest.raises(TopicvaultError, match="NoSuchBucket"):
        next(listing)  # the request happens on iteration, not on the call


def test_keys_are_relative_to_the_root(s3_uri: str, s3_endpoint: str, tmp_path: Path) -> None:
    open_store(s3_uri).put("a/b", b"s3")
    bucket, prefix = s3_uri[len("s3://"):].split("/", 1)
    assert _boto(s3_endpoint).get_object(Bucket=bucket, Key=f"{prefix}/a/b")["Body"].read() == b"s3"
    assert [i.key for i in open_store(f"s3://{bucket}").list()] == [f"{prefix}/a/b"]

    open_store((tmp_path / "root").as_uri()).put("a/b", b"file")
    assert (tmp_path / "root" / "a" / "b").read_bytes() == b"file"
    assert open_store(str(tmp_path / "root")).get("a/b") == b"file"


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../up", "a/./b", "a/"])
def test_bad_keys_are_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(TopicvaultError, match="bad object key"):
        store.put(key, b"x")


def test_multipart_upload_round_trips(s3_uri: str, s3_endpoint: str) -> None:
    store = open_store(s3_uri, {"multipart_threshold": str(5 * MiB)})
    data = os.urandom(11 * MiB + 3)
    store.put("big.bin", data, if_none_match=True)
    etag = store.head("big.bin").etag
    assert etag.endswith("-3")  # three parts: 5 MiB, 5 MiB and the rest
    assert store.get("big.bin") == data
    assert store.head("big.bin") == ObjectInfo("big.bin", len(data), etag)
    with pytest.raises(PreconditionFailed):
        store.put("big.bin", data[::-1], if_none_match=True)
    assert store.get("big.bin") == data
    bucket = s3_uri[len("s3://"):].split("/", 1)[0]
    assert _boto(s3_endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_s3_options(s3_uri: str, s3_endpoint: str) -> None:
    store = open_store(s3_uri, {"sse": "AES256", "path_style": "true", "max_attempts": "3",
                                "connect_timeout": "5", "read_timeout": "30", "region": "us-east-1",
                                "endpoint_url": s3_endpoint})
    store.put("encrypted", b"secret")
    bucket, prefix = s3_uri[len("s3://"):].split("/", 1)
    head = _boto(s3_endpoint).head_object(Bucket=bucket, Key=f"{prefix}/encrypted")
    assert head["ServerSideEncryption"] == "AES256"
    config = store.client.meta.config
    assert config.retries == {"total_max_attempts": 3, "mode": "adaptive"}
    assert config.s3["addressing_style"] == "path"


def test_missing_bucket_names_it(s3_endpoint: str) -> None:
    bucket = f"tv-missing-{uuid.uuid4().hex[:8]}"
    store = open_store(f"s3://{bucket}/p")
    attempts = (lambda: store.put("k", b"x"), lambda: store.get("k"), lambda: list(store.list()))
    for attempt in attempts:
        with pytest.raises(TopicvaultError) as caught:
            attempt()
        assert not isinstance(caught.value, ObjectNotFound)
        assert f"bucket {bucket} does not exist (NoSuchBucket): create it" in str(caught.value)


def test_stores_pickle_cheaply_and_work_after(store: ObjectStore) -> None:
    store.put("before", b"1")  # creates the S3 client, which must not be pickled
    blob = pickle.dumps(store)
    assert len(blob) < 1024
    clone = pickle.loads(blob)
    assert type(clone) is type(store) and clone.uri == store.uri
    assert clone.get("before") == b"1"
    clone.put("after", b"2")
    assert store.get("after") == b"2"
    if isinstance(clone, S3Store):
        assert pickle.loads(pickle.dumps(clone))._client is None
