"""The load generator runs without full garbage collections (`loadgen.quietgc`)."""

from __future__ import annotations

import gc

from loadgen.quietgc import young_collections_only


def test_no_full_collection_runs_while_load_is_driven_and_the_settings_come_back() -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    with young_collections_only():
        assert gc.get_freeze_count() > 0  # the heap from before is not walked again
        full_before = gc.get_stats()[2]["collections"]
        young_before = gc.get_stats()[0]["collections"]
        kept = [[k] for k in range(300_000)]  # records a run keeps: promoted, never walked
        assert gc.get_stats()[2]["collections"] == full_before
        assert gc.get_stats()[0]["collections"] > young_before  # young ones go on
    assert len(kept) == 300_000
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen
