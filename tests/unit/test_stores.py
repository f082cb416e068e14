"""The test stores (tests/stores.py) keep the ObjectStore contract the real ones keep, so a test
run on them shows what a real store would do."""

import pytest
from stores import CountingStore, FaultyStore, MemoryStore
from topicvault.core.errors import ObjectNotFound, PreconditionFailed
from topicvault.core.stores.local_store import LocalStore


@pytest.fixture(params=["memory", "local", "counted local"])
def store(request, tmp_path):
    local = LocalStore(str(tmp_path / "loc"))
    return {"memory": MemoryStore(), "local": local, "counted local": CountingStore(local)}[request.param]


def test_conditional_writes_and_listing_as_a_real_store_keeps_them(store):
    store.put("a/1", b"one", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("a/1", b"again", if_none_match=True)
    etag = store.head("a/1").etag
    with pytest.raises(PreconditionFailed):
        store.put("a/1", b"other", if_match="0" * 32)
    store.put("a/1", b"two", if_match=etag)
    store.put("a/2", b"x")
    store.put("b/1", b"y")
    assert store.get("a/1") == b"two"
    assert [i.key for i in store.list("a/")] == ["a/1", "a/2"]
    assert [i.key for i in store.list("a/", start_after="a/1")] == ["a/2"]
    store.delete("a/1")
    store.delete("a/1")  # absent is fine
    assert store.head("a/1") is None and store.missing(["a/1", "a/2"]) == ["a/1"]
    with pytest.raises(ObjectNotFound):
        store.get("a/1")


def test_a_faulty_store_that_drops_conditions_replaces_objects(tmp_path):
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), drop_conditions=True)
    store.put("k", b"1", if_none_match=True)
    store.put("k", b"2", if_none_match=True)
    assert store.get("k") == b"2" and store.puts == ["k", "k"]


def test_a_counting_store_counts_what_callers_read(tmp_path):
    store = CountingStore(LocalStore(str(tmp_path / "loc")))
    for key in ("a", "b", "c"):
        store.put(key, b"x")
    next(iter(store.list()))
    assert store.calls["put"] == ["a", "b", "c"] and store.calls["list"] == [("", None)] and store.listed == ["a"]
