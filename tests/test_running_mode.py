"""The auto running mode: a small job runs in this process, a large one on a worker process per core,
and an explicit mode is kept whatever the size. Every mode writes the same bytes (test_build_job,
test_near_dedup, test_bert_examples); this is only about which one a stage gets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import DirectOptions

from corpusforge.core.config import Config, RunConfig
from corpusforge.markers import describe_inputs
from corpusforge.pipeline.options import COMPRESSED_TEXT_RATIO, pipeline_options
from corpusforge.stages import _documents_inputs
from corpusforge.stages import _source_text_bytes as described_text_bytes

MB = 1 << 20


def direct(run: RunConfig, text_bytes: int | None) -> tuple[str, int]:
    options = pipeline_options(run, text_bytes).view_as(DirectOptions)
    return options.direct_running_mode, options.direct_num_workers


def test_auto_runs_small_jobs_here_and_large_ones_on_a_worker_per_core() -> None:
    run = RunConfig()
    assert run.direct_running_mode == "auto"
    cores = os.cpu_count() or 1
    assert direct(run, 0) == ("in_memory", 1)
    assert direct(run, run.in_process_bytes - 1) == ("in_memory", 1)
    assert direct(run, run.in_process_bytes) == ("multi_processing", cores)
    assert direct(run, None) == ("multi_processing", cores)  # unknown (pages fetched online): the workers
    assert direct(RunConfig(in_process_bytes=0), 1) == ("multi_processing", cores)
    assert direct(RunConfig(direct_num_workers=3), 64 * MB) == ("multi_processing", 3)


@pytest.mark.parametrize("mode", ["in_memory", "multi_threading", "multi_processing"])
def test_an_explicit_mode_is_kept_at_any_size(mode: str) -> None:
    for size in (1, 10 * 1024 * MB, None):
        assert direct(RunConfig(direct_running_mode=mode), size)[0] == mode


def _source_text_bytes(cfg: Config, parts: list[str]) -> int | None:
    """What the documents stage goes by, from its inputs as the build's plan describes them."""
    return described_text_bytes(cfg, parts, describe_inputs(_documents_inputs(cfg, parts), []))


def test_the_documents_stage_sizes_its_inputs_compressed_ones_at_their_text(tmp_path: Path) -> None:
    book = tmp_path / "book.txt"
    book.write_bytes(b"x" * 1000)
    dump = tmp_path / "enwiki.xml.bz2"
    dump.write_bytes(b"y" * 300)
    cfg = Config.model_validate({"books": {"paths": [str(tmp_path)]}, "wikipedia": {"paths": [str(dump)]}})
    assert _source_text_bytes(cfg, ["books"]) == 1000  # the folder's .txt files
    assert _source_text_bytes(cfg, ["wikipedia"]) == 300 * COMPRESSED_TEXT_RATIO
    assert _source_text_bytes(cfg, ["books", "wikipedia", "clean"]) == 1000 + 300 * COMPRESSED_TEXT_RATIO
    online = Config.model_validate({"webtext": {"dumps": [str(dump)]}})
    assert _source_text_bytes(online, ["webtext"]) is None  # the fetch, not the dump, sets the time
    offline = Config.model_validate({"webtext": {"dumps": [str(dump)], "offline": True, "warc_dir": str(tmp_path / "warc")}})
    assert _source_text_bytes(offline, ["webtext"]) == 300 * COMPRESSED_TEXT_RATIO
