"""The pure-logic half of tests/integration/test_hotloop.py (its docstring covers both halves):
Backup and restore tasks run their per-record loops with the cyclic collector running rarely (issue #20).
"""

from __future__ import annotations

import gc

from topicvault.core.hotloop import HOT_LOOP_THRESHOLDS, rare_cyclic_gc


def test_the_collector_runs_rarely_inside_and_as_before_after_even_on_error():
    before = gc.get_threshold()
    assert before != HOT_LOOP_THRESHOLDS
    with rare_cyclic_gc():
        assert gc.get_threshold() == HOT_LOOP_THRESHOLDS and gc.isenabled()
    assert gc.get_threshold() == before
    try:
        with rare_cyclic_gc():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.get_threshold() == before
