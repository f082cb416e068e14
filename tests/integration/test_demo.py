"""`topicvault demo`: the embedded broker, a backup, a restore under a new name, all identical."""

from __future__ import annotations

from topicvault.source.demo import run_demo


def test_demo_reports_identical_round_trip(spark, tmp_path):
    lines: list[str] = []
    assert run_demo(3_000, str(tmp_path / "demo"), None, lines.append)
    report = "\n".join(lines)
    assert "backup: 3,000 records" in report
    assert "restore: 3,000 records" in report
    assert report.count("identical") >= 3 and "DIFFERENT" not in report
