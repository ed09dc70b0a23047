"""FileGroupByKey / FileCoGroupByKey group exactly as Beam's GroupByKey / CoGroupByKey, through files."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from corpusforge.pipeline import file_shuffle
from corpusforge.pipeline.file_shuffle import FileCoGroupByKey, FileFlatten, FileGroupByKey, bucket_of
from corpusforge.pipeline.options import LOCAL_RUNNER

PAIRS = [(f"k{i % 37}", (i, "v" * (i % 5))) for i in range(1_000)] + [(b"\x00bytes", 1), (7, "int key")]


def _sorted_groups(item):
    key, values = item
    return key, sorted(values, key=repr)


def _run(graph) -> None:
    """In this process (in_memory), so a patched flush size reaches the DoFn."""
    with beam.Pipeline(options=PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")) as p:
        graph(p)


def test_file_group_by_key_groups_like_beam(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(file_shuffle, "FLUSH_ELEMENTS", 50)  # many files per bucket
    expected = {}
    for key, value in PAIRS:
        expected.setdefault(key, []).append(value)

    def graph(p):
        pairs = p | beam.Create(PAIRS)
        ours = pairs | "Files" >> FileGroupByKey(str(tmp_path / "shuffle"), buckets=8) | "SortOurs" >> beam.Map(_sorted_groups)
        assert_that(ours, equal_to([_sorted_groups(item) for item in expected.items()]))

    _run(graph)
    files = list((tmp_path / "shuffle").rglob("*.pickle"))
    assert len(PAIRS) // 50 <= len(files) <= len(PAIRS) // 50 + 2  # a file per flush (of 50 pairs), not per bucket
    assert all(f.parent.parent == tmp_path / "shuffle" for f in files)


def test_file_co_group_by_key_groups_like_beam(tmp_path: Path) -> None:
    left = [(f"id{i}", i) for i in range(100)]
    right = [(f"id{i}", f"r{i}") for i in range(50, 150)] + [("id60", "again")]

    def graph(p):
        inputs = {"left": p | "L" >> beam.Create(left), "right": p | "R" >> beam.Create(right)}
        ours = inputs | "Files" >> FileCoGroupByKey(str(tmp_path / "shuffle"), buckets=4)
        theirs = inputs | "Beam" >> beam.CoGroupByKey()
        normal = lambda kv: (kv[0], {name: sorted(values, key=repr) for name, values in kv[1].items()})  # noqa: E731
        joined = ({"ours": ours | "N1" >> beam.Map(normal), "theirs": theirs | "N2" >> beam.Map(normal)}) | "Both" >> beam.CoGroupByKey()
        assert_that(
            joined | "Same" >> beam.Map(lambda kv: kv[1]["ours"] == kv[1]["theirs"] and len(kv[1]["ours"]) == 1), equal_to([True] * 150)
        )

    _run(graph)


def test_without_a_folder_it_is_beams_own(tmp_path: Path) -> None:
    def graph(p):
        grouped = p | beam.Create(PAIRS[:10]) | FileGroupByKey(None) | beam.Map(_sorted_groups)
        assert_that(grouped | beam.Map(lambda kv: kv[0]), equal_to(sorted({k for k, _ in PAIRS[:10]})))

    _run(graph)
    assert not (tmp_path / "shuffle").exists()


def test_buckets_are_the_same_in_every_process() -> None:
    assert bucket_of("abc") == bucket_of("abc") and 0 <= bucket_of(b"x", 8) < 8
    assert len({bucket_of(f"k{i}") for i in range(1_000)}) == file_shuffle.BUCKETS


def test_flushes_by_bytes_and_groups_big_buckets_in_passes(tmp_path: Path, monkeypatch) -> None:
    """A worker writes out past ``FLUSH_BYTES`` of pairs, and a bucket past ``GROUP_BYTES`` is grouped in
    several passes, each key once with all its values: memory bounded by those, not by the shuffle's size."""
    monkeypatch.setattr(file_shuffle, "FLUSH_BYTES", 2_000)
    monkeypatch.setattr(file_shuffle, "GROUP_BYTES", 1_500)
    expected = {}
    for key, value in PAIRS:
        expected.setdefault(key, []).append(value)

    def graph(p):
        ours = p | beam.Create(PAIRS) | "Files" >> FileGroupByKey(str(tmp_path / "shuffle"), buckets=2) | beam.Map(_sorted_groups)
        assert_that(ours, equal_to([_sorted_groups(item) for item in expected.items()]))

    _run(graph)
    assert len(list((tmp_path / "shuffle").rglob("*.pickle"))) >= 5  # one file per flush: a single one by count alone


MANY = [((f"k{i % 11}", f"k{i % 7 + 20}", f"only{i}"), i) for i in range(200)] + [
    ((), "no key"),
    (("k3",), "one more"),
    (("two",), 1),
    (("two",), 2),
]


def _expected_many(least: int) -> list:
    groups: dict = {}
    for keys, value in MANY:
        for key in keys:
            groups.setdefault(key, []).append(value)
    return sorted(_sorted_groups(item) for item in groups.items() if len(item[1]) >= least)


def test_many_keys_and_min_values_group_as_the_pairs_would(tmp_path: Path, monkeypatch) -> None:
    """(keys, value) elements group as their (key, value) pairs; keys with fewer than ``min_values`` values are left
    out, through files (in several flushes and grouping passes) as through Beam's own GroupByKey."""
    monkeypatch.setattr(file_shuffle, "FLUSH_ELEMENTS", 40)
    monkeypatch.setattr(file_shuffle, "GROUP_BYTES", 300)

    def graph(p):
        elements = p | beam.Create(MANY)
        for name, folder in (("files", str(tmp_path / "shuffle")), ("beam", None)):
            for least in (1, 2):
                grouped = elements | f"{name}{least}" >> FileGroupByKey(folder, buckets=4, many_keys=True, min_values=least)
                got = grouped | f"sort{name}{least}" >> beam.Map(_sorted_groups)
                assert_that(got, equal_to(_expected_many(least)), label=f"check{name}{least}")

    _run(graph)
    assert len(_expected_many(1)) == 200 + 19 and len(_expected_many(2)) == 19  # each "only" key has one value, "two" two
    assert len(list((tmp_path / "shuffle").rglob("*.pickle"))) > 2


def test_several_inputs_are_written_where_produced_and_grouped_as_one(tmp_path: Path) -> None:
    """A tuple of PCollections: FileGroupByKey and each name of FileCoGroupByKey group them as their Flatten
    would; FileFlatten gives every element of every input once, each through its own files."""
    a = [(f"k{i % 7}", i) for i in range(300)]
    b = [(f"k{i % 11}", -i) for i in range(1, 200)]
    grouped = {}
    for key, value in a + b:
        grouped.setdefault(key, []).append(value)
    expected = [(key, sorted(values)) for key, values in grouped.items()]
    co_expected = [(key, {"x": sorted(values), "y": [1] if key == "k1" else []}) for key, values in grouped.items()]
    for folder in (None, str(tmp_path / "shuffle")):
        with beam.Pipeline(options=PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")) as p:
            inputs = (p | "A" >> beam.Create(a), p | "B" >> beam.Create(b))
            groups = inputs | FileGroupByKey(folder) | "Sorted" >> beam.Map(lambda kv: (kv[0], sorted(kv[1])))
            assert_that(groups, equal_to(expected), label="Groups")
            co = {"x": inputs, "y": p | "Y" >> beam.Create([("k1", 1)])} | FileCoGroupByKey(folder)
            co = co | "CoSorted" >> beam.Map(lambda kv: (kv[0], {n: sorted(v) for n, v in kv[1].items()}))
            assert_that(co, equal_to(co_expected), label="CoGroups")
            assert_that(inputs | FileFlatten(folder), equal_to(a + b), label="Flattened")
    written = list((tmp_path / "shuffle").rglob("*.pickle"))
    assert len({f.parent for f in written}) == 3 and len(written) >= 7  # a folder per transform, a file per input at least
