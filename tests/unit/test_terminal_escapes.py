"""What topicvault prints of an archive is escaped for the terminal (issue #39 item 7): topic
names and object keys come from commit records, which whoever can write the bucket chooses, and
an escape sequence in them must not reach the terminal as one."""

from __future__ import annotations

from clitools import run_cli
from topicvault.core.archive.commits import CommitRecord, PartitionRange, write_commit
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.inspect import text_line

EVIL = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m"


def printable(output: str) -> bool:
    return all(line.isprintable() for line in output.splitlines())


def test_inspect_escapes_the_topic_name():
    line = text_line(Record(EVIL, 0, 1, b"k", b"v", 0))
    assert line.isprintable(), repr(line)
    assert line.startswith(r"evil\x1b]0;pwned\x07\x1b[2J\x9b31m[0]@1 ")


def test_error_lines_escape_what_they_name(tmp_path):
    out = run_cli("inspect", str(tmp_path), "--object", EVIL + ".parquet", expect_exit=1)
    assert out.startswith("error: ") and printable(out), repr(out)
    assert r"evil\x1b]0;pwned\x07" in out


def test_listings_escape_topic_names_from_the_commit_records(tmp_path):
    store = LocalStore(str(tmp_path))
    write_commit(store, CommitRecord(1, 0, (PartitionRange(EVIL, 0, 0, 0),), (), {}))
    out = run_cli("ls", str(tmp_path))
    assert printable(out), repr(out)
    assert r"evil\x1b]0;pwned" in out
