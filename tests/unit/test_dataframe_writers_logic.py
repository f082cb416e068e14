"""The pure-logic half of tests/integration/test_dataframe_writers.py (its docstring covers both halves):
The DataFrame writers are as safe as the CLI (issue #16 item 10).
"""

from __future__ import annotations

import pytest


def test_a_bad_allow_offset_gaps_value_is_a_one_line_error(tmp_path):
    from topicvault.core.errors import TopicvaultError
    from topicvault.sink.backup_datasource import ObjectBatchWriter

    with pytest.raises(TopicvaultError, match="allowOffsetGaps must be true or false"):
        ObjectBatchWriter({"path": str(tmp_path), "allowOffsetGaps": "maybe"})
    assert not any(tmp_path.iterdir())
