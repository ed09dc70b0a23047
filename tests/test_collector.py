"""The build's garbage-collector thresholds: relaxed in workers for good, in the launcher only while it builds."""

from __future__ import annotations

import gc

from corpusforge.pipeline import collector


def test_relaxed_restores_the_processs_own_thresholds() -> None:
    before = gc.get_threshold()
    with collector.relaxed():
        assert gc.get_threshold() == collector.THRESHOLDS
    assert gc.get_threshold() == before


def test_relax_keeps_a_higher_threshold_its_owner_set() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(10 * collector.THRESHOLDS[0], 5, 5)
        collector.relax()
        assert gc.get_threshold() == (10 * collector.THRESHOLDS[0], 5, 5)
        gc.set_threshold(700, 10, 10)
        collector.relax()
        assert gc.get_threshold() == collector.THRESHOLDS
    finally:
        gc.set_threshold(*before)
