"""Restore guards of issue #16: renames, targets safe while data goes in, speculation, re-runs."""

from __future__ import annotations

import re

import pytest
from clitools import run_cli
from kafkatools import consume_all, produce_records, topic_exists
from nasty import nasty_records
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore import parse_renames


def error_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.fixture
def two_topic_backup(bootstrap, spark, topic_factory, tmp_path):
    topics = [topic_factory(2, prefix="guards") for _ in range(2)]
    for topic in topics:
        produce_records(bootstrap, topic, nasty_records(topic, 2, 20, big_values=0))
    location = tmp_path / "backup"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topics[0], "-t", topics[1])
    return topics, location


def test_one_topic_renamed_twice_is_refused():
    with pytest.raises(TopicvaultError, match=r"--rename names 'a' twice \(a=x, a=y\)"):
        parse_renames(["a=x", "a=y"])
    assert parse_renames(["a=x", "a=x", "b=y"]) == {"a": "x", "b": "y"}  # the same pair twice is harmless


def test_two_topics_renamed_onto_one_target_are_refused_before_anything_is_created(bootstrap, two_topic_backup):
    (a, b), location = two_topic_backup
    out = run_cli("restore", "--from", str(location), "-b", bootstrap,
                  "--rename", f"{a}={a}-x", "--rename", f"{b}={a}-x", expect_exit=1)
    line = error_line(out)
    assert f"{a}-x" in line and a in line and b in line and "--rename" in line
    assert not topic_exists(bootstrap, f"{a}-x")


def test_rename_onto_a_topic_that_is_also_restored_is_refused(bootstrap, two_topic_backup):
    (a, b), location = two_topic_backup
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{a}={b}", "--allow-nonempty",
                  expect_exit=1)
    line = error_line(out)
    assert b in line and a in line
    assert not (location / "_topicvault" / "restores").exists()


def test_rerun_without_restore_id_names_the_earlier_restore(bootstrap, two_topic_backup):
    (a, _), location = two_topic_backup
    args = ["restore", "--from", str(location), "-b", bootstrap, "-t", a, "--rename", f"{a}={a}-again"]
    first = run_cli(*args)
    restore_id = re.search(r"restore id (\S+):", first).group(1)

    line = error_line(run_cli(*args, expect_exit=1))
    assert f"--restore-id {restore_id}" in line and "--allow-nonempty" in line and "second copy" in line
    # Following the advice resumes that restore: nothing is written twice.
    assert "0 records" in run_cli(*args, "--restore-id", restore_id)
    assert sum(map(len, consume_all(bootstrap, f"{a}-again").values())) == 40
