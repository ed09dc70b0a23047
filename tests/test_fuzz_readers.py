"""Fuzzing every reader with adversarial input (cases in fuzz_cases.py): no exception escapes, inputs stay
accounted for, and no case takes longer than 1 s per 100 kB (plus slack). Budgets are fixed example counts;
under CI the conftest profile also makes the sequence deterministic."""

from __future__ import annotations

import time
from collections.abc import Callable

from fuzz_cases import TARGETS, time_bound
from hypothesis import HealthCheck, given, settings


def fuzz(name: str, examples: int) -> Callable[[], None]:
    strategy, target = TARGETS[name]

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def test(case: object) -> None:
        started = time.perf_counter()
        size = target(case)
        elapsed = time.perf_counter() - started
        assert elapsed < time_bound(size), f"{name}: {elapsed:.2f} s for {size} bytes"

    return test


test_fuzz_reddit_line = fuzz("reddit line", 300)
test_fuzz_reddit_dump = fuzz("reddit dump", 80)
test_fuzz_wikipedia_xml = fuzz("wikipedia xml", 80)
test_fuzz_wikitext = fuzz("wikitext", 200)
test_fuzz_gutenberg = fuzz("gutenberg", 150)
test_fuzz_book_decode = fuzz("book decode", 150)
test_fuzz_url = fuzz("url", 400)
test_fuzz_warc = fuzz("warc", 60)
test_fuzz_decode_page = fuzz("decode_page", 150)
