"""The pure-logic half of tests/integration/test_store.py (its docstring covers both halves):
ObjectStore contract against a real directory and a real (moto) S3 server.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from harness_s3 import free_port, moto_server
from observetools import audited
from topicvault.core.errors import PreconditionFailed, TopicvaultError
from topicvault.core.stores.local_store import TEMP_PREFIX, LocalStore
from topicvault.core.stores.locations import open_store
from topicvault.core.stores.store import ReadBuffer


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


def test_unreachable_endpoint_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Credentials present, as they are once the S3 fixture ran: without them the store stops
    # earlier with "no AWS credentials", and the test would depend on the order tests run in.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"  # nothing listens there
    store = open_store("s3://bucket/p", {"endpoint_url": endpoint, "max_attempts": "1",
                                         "connect_timeout": "2"})
    with audited("socket.connect") as connects, \
            pytest.raises(TopicvaultError, match=f"cannot reach S3 endpoint {endpoint}"):
        store.get("k")
    # Given up after the attempts it was given (one), not retried on: the error comes when it is due.
    assert [args[1] for args in connects if args[1][1:2] == (port,)] == [("127.0.0.1", port)]


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
