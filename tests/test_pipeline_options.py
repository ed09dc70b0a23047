"""Beam's options as our jobs get them (``pipeline_options``): each view made once per options, with the values
Beam's own options would give."""

from __future__ import annotations

import copy
import pickle

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions, TypeOptions

from corpusforge.core import storage
from corpusforge.core.config import RunConfig
from corpusforge.pipeline.options import pipeline_options

RUN = RunConfig(runner="DaskRunner", beam_args=["--dask_client_address=127.0.0.1:1", "--no_pipeline_type_check"])


def test_a_graph_asks_beam_for_each_view_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam asks for a view at every transform applied; each was a fresh parse of every flag."""
    made: list[tuple[int, type]] = []  # (options, view class) of each view Beam made
    view_as = PipelineOptions.view_as
    monkeypatch.setattr(PipelineOptions, "view_as", lambda self, cls: made.append((id(self), cls)) or view_as(self, cls))
    pipeline = beam.Pipeline(options=pipeline_options(RUN))
    try:
        numbers = pipeline | beam.Create(range(10))
        for step in range(20):
            numbers = numbers | f"Step{step}" >> beam.Map(lambda x: x + 1)
        _ = numbers | beam.GroupBy(lambda x: x % 2)
    finally:
        storage.remove_tree(pipeline.local_tempdir)  # made for a run that never comes
    assert made and len(made) == len(set(made))  # 20+ transforms applied: no view of a class made twice


def test_views_read_and_write_the_same_values_as_beams_own() -> None:
    options = pipeline_options(RUN)
    assert options.view_as(TypeOptions).pipeline_type_check is False
    options.view_as(SetupOptions).save_main_session = True  # a value set through one view...
    assert options.view_as(SetupOptions).save_main_session is True  # ...is read through the next
    flags = ["--runner=corpusforge.pipeline.dask_runner.DaskRunner", *RUN.beam_args]
    beams = PipelineOptions(flags)
    beams.view_as(SetupOptions).save_main_session = True
    assert options.get_all_options() == beams.get_all_options()
    for again in (copy.deepcopy(options), pickle.loads(pickle.dumps(options))):  # a Pipeline deep-copies its options
        assert again.view_as(SetupOptions).save_main_session is True
        assert again.view_as(StandardOptions).runner == flags[0].split("=", 1)[1]
        assert again.get_all_options() == beams.get_all_options()
