"""The pure-logic half of test_dataframe_writers (no broker, S3 server or Spark).

The DataFrame writers are as safe as the CLI (issue #16 item 10).

- `topicvault` writer: commits only offsets it really wrote, contiguous from the committed end;
  a filtered DataFrame is refused, not committed as a complete backup.
- Both writers refuse mode("overwrite") instead of silently appending.
- `topicvault-kafka` writer: a retried task never produces again (see the subprocess test).
"""

from __future__ import annotations

import pytest


def test_a_bad_allow_offset_gaps_value_is_a_one_line_error(tmp_path):
    from topicvault.core.errors import TopicvaultError
    from topicvault.sink.datasource import ObjectBatchWriter

    with pytest.raises(TopicvaultError, match="allowOffsetGaps must be true or false"):
        ObjectBatchWriter({"path": str(tmp_path), "allowOffsetGaps": "maybe"})
    assert not any(tmp_path.iterdir())
