"""The pure-logic half of tests/integration/test_restore_readonly.py (its docstring covers both halves):
Issue #19 item 1: restore from an archive it may only read; its state lives elsewhere.
"""

from __future__ import annotations

from topicvault.core.stores.locations import open_store
from topicvault.source.restore.restore_state import archive_identity


def test_archive_identity_is_one_spelling_of_the_uri(tmp_path):
    spellings = [str(tmp_path / "a"), f"file://{tmp_path}/a", f"{tmp_path}/a/", f"{tmp_path}/x/../a"]
    assert len({archive_identity(open_store(s)) for s in spellings}) == 1
    s3 = {archive_identity(open_store(u)) for u in ("s3://b/p/q", "s3a://b/p/q/", "s3://b//p/q")}
    assert s3 == {"s3://b/p/q"}
    assert archive_identity(open_store("s3://b")) == "s3://b"
