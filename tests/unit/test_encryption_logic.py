"""The pure-logic half of tests/integration/test_encryption.py (its docstring covers both halves):
Client-side encryption end to end (issue #22): real broker, local directory and the S3 server, KMS through moto's KMS on the same endpoint.
"""

from __future__ import annotations

from clitools import run_cli


def test_keygen_cli_writes_a_usable_key(tmp_path):
    out = run_cli("keygen", str(tmp_path / "k"))
    assert f"--encryption-key file://{tmp_path / 'k'}" in out and "wrote key file:" in out
    assert "never overwrites" in run_cli("keygen", str(tmp_path / "k"), expect_exit=1)
