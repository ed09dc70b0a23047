"""The in-process runner never tries Beam's Prism runner (a downloaded binary), in either running mode."""

from __future__ import annotations

import tempfile
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import StandardOptions

from corpusforge.core.config import RunConfig
from corpusforge.pipeline.local_runner import LocalRunner
from corpusforge.pipeline.options import pipeline_options


@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_the_direct_runner_is_ours_and_leaves_nothing_in_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Beam's DirectRunner left an empty beam-temp* folder per job from its failed Prism start (seen: 3 a build)."""
    scratch, out = tmp_path / "tmp", tmp_path / "out.txt"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    options = pipeline_options(RunConfig(direct_running_mode=mode, direct_num_workers=2))
    assert options.view_as(StandardOptions).runner == "corpusforge.pipeline.local_runner.LocalRunner"
    pipeline = beam.Pipeline(options=options)
    _ = (
        pipeline
        | beam.Create(range(20))
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.Map(lambda kv, path=str(out): open(f"{path}.{kv[0]}", "w").write(str(sorted(kv[1]))))
    )
    assert isinstance(pipeline.runner, LocalRunner)
    pipeline.run().wait_until_finish()
    assert sorted(p.name for p in tmp_path.glob("out.txt.*")) == ["out.txt.0", "out.txt.1", "out.txt.2"]
    assert [p.name for p in scratch.iterdir() if p.name.startswith("beam-temp")] == []
