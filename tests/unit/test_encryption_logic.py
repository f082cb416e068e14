"""The pure-logic half of test_encryption (no broker, S3 server or Spark).

Client-side encryption end to end (issue #22): real broker, local directory and the S3
server, KMS through moto's KMS on the same endpoint. Nothing of a record's key, value or
headers may appear in the stored bytes; with the key a restore is byte-exact; without it (or
with a wrong one) restore stops with one line naming the object before anything is produced.
"""

from __future__ import annotations

from clitools import run_cli


def test_keygen_cli_writes_a_usable_key(tmp_path):
    out = run_cli("keygen", str(tmp_path / "k"))
    assert f"--encryption-key file://{tmp_path / 'k'}" in out and "wrote key file:" in out
    assert "never overwrites" in run_cli("keygen", str(tmp_path / "k"), expect_exit=1)
