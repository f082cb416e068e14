"""ObjectStore contract against a real directory and a real (moto) S3 server."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
from harness_s3 import free_port, moto_server
from topicvault.core.errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from topicvault.core.local_store import TEMP_PREFIX, LocalStore
from topicvault.core.locations import open_store
from topicvault.core.s3_store import S3Store
from topicvault.core.store import ObjectInfo, ObjectStore, ReadBuffer

MiB = 1024 * 1024


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _boto(endpoint: str):
    return boto3.session.Session().client("s3", endpoint_url=endpoint)


@pytest.fixture
def store(store_uri: str) -> ObjectStore:
    return open_store(store_uri)


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


@pytest.mark.parametrize("options, message", [
    ({"endpoint": "x"}, "unknown store option"),
    ({"max_attempts": "many"}, "max_attempts=many: expected a whole number"),
    ({"max_attempts": "0"}, "max_attempts=0: must be positive"),
    ({"multipart_threshold": "-5"}, "multipart_threshold=-5: must be positive"),
    ({"connect_timeout": "soon"}, "connect_timeout=soon: expected seconds"),
    ({"read_timeout": "0"}, "read_timeout=0: must be positive"),
    ({"path_style": "maybe"}, "path_style=maybe"),
    ({"sse": "rot13"}, "sse=rot13"),
    ({"sse_kms_key_id": "k"}, "needs sse=aws:kms"),
])
def test_bad_s3_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(TopicvaultError, match=message):
        open_store("s3://bucket/p", options)


def test_local_rejects_options_and_unknown_schemes(tmp_path: Path) -> None:
    with pytest.raises(TopicvaultError, match="s3:// locations only"):
        open_store(str(tmp_path), {"region": "eu-west-1"})
    with pytest.raises(TopicvaultError, match="unsupported location"):
        open_store("gs://bucket/p")


def test_missing_bucket_names_it(s3_endpoint: str) -> None:
    bucket = f"tv-missing-{uuid.uuid4().hex[:8]}"
    store = open_store(f"s3://{bucket}/p")
    attempts = (lambda: store.put("k", b"x"), lambda: store.get("k"), lambda: list(store.list()))
    for attempt in attempts:
        with pytest.raises(TopicvaultError) as caught:
            attempt()
        assert not isinstance(caught.value, ObjectNotFound)
        assert f"bucket {bucket} does not exist (NoSuchBucket): create it" in str(caught.value)


def test_unreachable_endpoint_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Credentials present, as they are once the S3 fixture ran: without them the store stops
    # earlier with "no AWS credentials", and the test would depend on the order tests run in.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    store = open_store("s3://bucket/p", {"endpoint_url": endpoint, "max_attempts": "1",
                                         "connect_timeout": "2"})
    started = time.monotonic()
    with pytest.raises(TopicvaultError, match=f"cannot reach S3 endpoint {endpoint}"):
        store.get("k")
    assert time.monotonic() - started < 30


@pytest.fixture(scope="module")
def s3_with_auth(tmp_path_factory: pytest.TempPathFactory):
    """A second moto server that, unlike the default, checks access keys."""
    # moto authenticates nothing unless told to from the first request on.
    enforce = {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    with moto_server(tmp_path_factory.mktemp("moto-auth"), enforce) as url:
        yield url


def test_wrong_credentials(s3_with_auth: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = open_store("s3://some-bucket/p", {"endpoint_url": s3_with_auth, "max_attempts": "1"})
    with pytest.raises(TopicvaultError, match=r"\(InvalidAccessKeyId\): check credentials"):
        store.put("k", b"x")


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


def _temp_files(root: Path) -> list[str]:
    return [name for _, _, files in os.walk(root) for name in files if name.startswith(TEMP_PREFIX)]


def test_local_writes_leave_no_temp_files(local_uri: str) -> None:
    store = open_store(local_uri)
    store.put("a/b", b"1")
    store.put("a/b", b"2")
    etag = store.head("a/b").etag
    with pytest.raises(PreconditionFailed):
        store.put("a/b", b"3", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("a/b", b"3", if_match="0" * 32)
    store.put("a/b", b"4", if_match=etag)
    root = Path(local_uri)
    assert _temp_files(root) == []
    assert oct((root / "a" / "b").stat().st_mode & 0o777) == oct(0o644)

    (root / "a" / f"{TEMP_PREFIX}crashed").write_bytes(b"half")  # left by a killed writer
    assert [info.key for info in store.list()] == ["a/b"]
    store.delete("a/b")
    assert [info.key for info in store.list()] == []


def test_local_delete_prunes_empty_directories(local_uri: str) -> None:
    store = open_store(local_uri)
    store.put("x/y/z", b"1")
    store.delete("x/y/z")
    store.put("x", b"now a file")  # possible only because x/ was removed
    assert store.get("x") == b"now a file"


def _race(uri: str, mode: str, number: int, etag: str | None, barrier) -> None:
    """Exit 0 if this writer's conditional put won, 3 if it lost."""
    store = open_store(uri)
    barrier.wait()
    try:
        if mode == "create":
            store.put("commits/0001.json", f"writer {number}".encode(), if_none_match=True)
        else:
            store.put("commits/0001.json", f"writer {number}".encode(), if_match=etag)
    except PreconditionFailed:
        os._exit(3)
    os._exit(0)


@pytest.mark.parametrize("mode", ["create", "update"])
def test_local_conditional_race_has_one_winner(local_uri: str, mode: str) -> None:
    store = open_store(local_uri)
    etag = None
    if mode == "update":
        store.put("commits/0001.json", b"original")
        etag = store.head("commits/0001.json").etag
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(8)
    writers = [
        context.Process(target=_race, args=(local_uri, mode, n, etag, barrier)) for n in range(8)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    codes = [writer.exitcode for writer in writers]
    assert sorted(codes) == [0] + [3] * 7, codes
    assert store.get("commits/0001.json") == f"writer {codes.index(0)}".encode()
    assert _temp_files(Path(local_uri)) == []


def test_local_put_fsyncs_every_directory_it_creates(tmp_path: Path, monkeypatch) -> None:
    # A new directory is durable only once its parent is fsynced: after a crash the object
    # would otherwise be gone although put returned. The real fsync still runs; we only note
    # which directories it was given.
    synced: list[Path] = []
    real_fsync = os.fsync

    def noting_fsync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    store = LocalStore(str(tmp_path / "root"))
    monkeypatch.setattr(os, "fsync", noting_fsync)
    store.put("a/b/c/object", b"data")
    root = tmp_path / "root"
    expected = {tmp_path, root, root / "a", root / "a" / "b", root / "a" / "b" / "c"}
    assert expected <= set(synced), sorted(map(str, synced))
    synced.clear()
    store.put("a/b/c/other", b"data")  # nothing new to create: only the object's own directory
    assert {p for p in synced if p.is_dir()} == {root / "a" / "b" / "c"}


@pytest.fixture
def store_with_links(tmp_path: Path) -> tuple[LocalStore, Path]:
    """A local store whose root holds links that lead out of it (planted by whoever can write
    the directory), and a directory outside it holding a file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not the store's")
    root = tmp_path / "root"
    root.mkdir()
    (root / "topic=t").symlink_to(outside, target_is_directory=True)
    (root / "object").symlink_to(outside / "secret")
    store = LocalStore(str(root))
    store.put("real/object", b"inside")
    return store, outside


def test_local_reads_stay_inside_the_root(store_with_links) -> None:
    store, _ = store_with_links
    for key in ("topic=t/secret", "object"):
        with pytest.raises(TopicvaultError, match=rf"^object {key} in .* leads out of the store's root"):
            store.get(key)
        with pytest.raises(TopicvaultError, match="leads out of the store's root"):
            store.get_into(key, ReadBuffer())
        assert store.head(key) is None
    assert store.missing(["topic=t/secret", "object", "real/object"]) == ["object", "topic=t/secret"]
    assert store.get("real/object") == b"inside"


def test_local_listing_skips_links_out_of_the_root(store_with_links, caplog) -> None:
    store, _ = store_with_links
    assert [info.key for info in store.list()] == ["real/object"]
    assert "symbolic link" in caplog.text


def test_local_deletes_never_reach_out_of_the_root(store_with_links) -> None:
    store, outside = store_with_links
    store.delete("topic=t/secret")
    store.delete("object")
    assert (outside / "secret").read_bytes() == b"not the store's"
    with pytest.raises(TopicvaultError, match="leads out of the store's root"):
        store.put("topic=t/new", b"x")
    assert not (outside / "new").exists()


def test_local_objects_honour_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        store = LocalStore(str(tmp_path))
        store.put("a/b", b"1")
        store.put("a/c", b"1", if_none_match=True)
    finally:
        os.umask(previous)
    assert oct((tmp_path / "a" / "b").stat().st_mode & 0o777) == oct(0o600)
    assert oct((tmp_path / "a" / "c").stat().st_mode & 0o777) == oct(0o600)


def test_local_listing_survives_a_link_loop(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put("a/b", b"1")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    assert [info.key for info in store.list()] == ["a/b"]
