"""Resumable builds on the bundled demo: kill -9 at several points then a re-run gives the uninterrupted
build's bytes; a finished build is reused; a changed key reruns exactly the stages that read it;
missing or stale prerequisites fail in one line before anything changes; no stale manifest, no leftovers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corpusforge.build import run_build
from corpusforge.cli import app
from corpusforge.core.config import load_config
from corpusforge.core.storage import sha256 as sha256_file
from corpusforge.shards.verify import verify

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.toml"
CLI = Path(sys.executable).parent / "corpusforge"
# in-process runner (one process to kill); small shards so that shard writing takes several files
FAST = ['run.direct_running_mode="in_memory"', "shards.target_bytes=32768"]
ALL = ["documents", "vocab", "bert", "gpt"]
runner = CliRunner()


def _sets(out: Path, *overrides: str) -> list[str]:
    return [f"run.output_dir={json.dumps(str(out))}", *FAST, *overrides]


def _build(out: Path, *overrides: str, force: bool = False):
    return run_build(load_config(DEMO, _sets(out, *overrides)), force=force)


def _files(out: Path, *folders: str) -> dict[str, str]:
    """sha256 of every file under ``folders`` (shard manifests aside: they name their absolute input paths)."""
    found = {}
    for folder in folders:
        for path in sorted((out / folder).rglob("*")):
            if path.is_file() and path.name != "manifest.json":
                found[path.relative_to(out).as_posix()] = sha256_file(path)
    return found


def _comparable(out: Path) -> dict[str, str]:
    """Everything byte-reproducible across processes; BERT shards and the WordPiece files only when the
    WordPiece vocabulary came out identical (HF tokenizers orders its ``##`` ids by hash-map order)."""
    return _files(out, "documents", "rejects", "vocab/bpe", "shards/gpt")


def _same_wordpiece(a: Path, b: Path) -> bool:
    return sha256_file(a / "vocab" / "wordpiece" / "vocab.txt") == sha256_file(b / "vocab" / "wordpiece" / "vocab.txt")


def _no_leftovers(out: Path) -> None:
    assert not (out / ".work").exists()
    assert not list(out.glob("shards/*/.sort-*"))
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def _manifest_agrees(out: Path) -> None:
    """The run manifest, when there is one, names exactly the files there with their checksums; every
    shard manifest there verifies."""
    if (out / "manifest.json").is_file():
        manifest = json.loads((out / "manifest.json").read_text())
        listed = {entry["path"]: entry["sha256"] for entry in manifest["outputs"]}
        assert listed == _files(out, "documents", "rejects")
    for folder in out.glob("shards/*"):
        if (folder / "manifest.json").is_file():
            assert [p for p in verify(folder) if ".sort-" not in p and ".work" not in p] == []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted build of every stage up to the shards."""
    out = tmp_path_factory.mktemp("reference") / "out"
    result = _build(out)
    assert set(result.ran) == set(ALL)
    return out


@pytest.fixture()
def finished(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(reference, out)  # keeps sizes and mtimes: the markers still match
    return out


def _start(out: Path, *overrides: str) -> subprocess.Popen:
    args = [str(CLI), "build", str(DEMO), *[x for o in _sets(out, *overrides) for x in ("--set", o)]]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _kill_when(process: subprocess.Popen, appeared, timeout: float = 120) -> None:
    """kill -9 the build as soon as ``appeared()`` is true; fails if the build ended first."""
    deadline = time.monotonic() + timeout
    while not appeared():
        assert process.poll() is None, f"the build ended before the kill point:\n{process.stdout.read()}"
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL


def _run_to_end(out: Path) -> str:
    process = _start(out)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 0, output
    return output


@pytest.mark.slow
@pytest.mark.kills_launcher
def test_kill_at_each_stage_then_rerun_gives_the_uninterrupted_bytes(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    points = [
        ("documents", lambda: any((out / ".work" / "documents").rglob("*.arrow"))),
        ("vocab", lambda: (out / ".stages" / "documents.json").is_file()),
        ("bert examples", lambda: any(out.glob(".work/bert/.sort-*/examples"))),
        ("shard writing", lambda: any(out.glob("shards/bert/train-*.arrow"))),
    ]
    for name, appeared in points:
        _kill_when(_start(out), appeared)
        assert not (out / "manifest.json").exists(), f"killed during {name}: a run manifest is left"
        _manifest_agrees(out)
    output = _run_to_end(out)
    assert "stage documents reused" in output and "stage vocab reused" in output  # the last kill was in bert
    _no_leftovers(out)
    _manifest_agrees(out)
    assert _comparable(out) == _comparable(reference)
    if _same_wordpiece(out, reference):
        assert _files(out, "vocab/wordpiece", "shards/bert") == _files(reference, "vocab/wordpiece", "shards/bert")
    assert verify(out / "shards" / "bert") == [] and verify(out / "shards" / "gpt") == []


@pytest.mark.kills_launcher
def test_killed_rebuild_over_a_finished_folder_leaves_no_stale_manifest(finished: Path) -> None:
    out = finished
    _kill_when(_start(out, "clean.min_words=50"), lambda: any((out / ".work" / "documents").rglob("*.arrow")))
    assert not (out / "manifest.json").exists() and not (out / "report.html").exists()
    assert not (out / ".stages" / "documents.json").exists()
    _manifest_agrees(out)
    # the next build over it removes the spill folder and rebuilds what the kill left stale
    result = _build(out, "clean.min_words=50")
    assert set(result.ran) == set(ALL)
    _no_leftovers(out)
    _manifest_agrees(out)


def test_finished_build_rerun_reuses_every_stage_and_rewrites_nothing(finished: Path, reference: Path) -> None:
    def stamps() -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in finished.rglob("*") if p.is_file()}

    result = _build(finished)  # the copy's run.output_dir differs from the manifest's: only the manifest is rewritten
    assert result.reused == ALL and result.ran == {}
    before = stamps()
    result = _build(finished)
    assert result.reused == ALL and result.ran == {}
    assert set(result.stage_seconds) == {"total"}
    assert stamps() == before, "a re-run with nothing to do changed a file"
    assert result.stats == reference_result_stats(reference)
    assert len(result.warnings) == 2  # both vocabularies are far under the requested sizes, reused or not
    # a runner key changes no bytes: every stage reused, the manifest rewritten for the new configuration
    result = _build(finished, 'run.direct_running_mode="multi_threading"')
    assert result.reused == ALL and result.ran == {}
    manifest = json.loads((finished / "manifest.json").read_text())
    reference_manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["stages"] == dict.fromkeys(ALL, "reused")
    assert manifest["config"]["run"]["direct_running_mode"] == "multi_threading"
    for key in ("counters", "inputs", "outputs", "warnings"):
        assert manifest[key] == reference_manifest[key], key


def reference_result_stats(reference: Path) -> dict:
    from corpusforge.pipeline.summary import collect_stats

    stats = collect_stats(reference / "documents", reference / "rejects")
    for source, entry in json.loads((reference / "manifest.json").read_text())["counters"].items():
        stats[source].inputs = entry["inputs"]
    return stats


@pytest.mark.slow
def test_changed_key_reruns_exactly_the_stages_that_read_it(finished: Path) -> None:
    changes: list[str] = []
    for key, expected in [
        ("gpt.seq_len=128", {"gpt"}),
        ("bert.dupe_factor=2", {"bert"}),
        ("vocab.bpe_vocab_size=2000", {"vocab", "bert", "gpt"}),
        ("clean.min_words=30", set(ALL)),
    ]:
        changes.append(key)
        result = _build(finished, *changes)
        assert set(result.ran) == expected, key
        assert set(result.reused) == set(ALL) - expected, key
    assert result.ran["documents"] == "clean.min_words was 20, now 30"
    assert _build(finished, *changes).ran == {}
    forced = _build(finished, *changes, force=True)
    assert forced.ran == dict.fromkeys(ALL, "--force")


def test_summary_says_which_stages_were_reused(finished: Path) -> None:
    result = runner.invoke(app, ["build", str(DEMO), *[x for o in _sets(finished, "gpt.seq_len=128") for x in ("--set", o)]])
    assert result.exit_code == 0, result.output
    assert "reused (made earlier from the same configuration and inputs; --force runs them again): documents, vocab, bert" in " ".join(
        result.output.split()
    )
    assert "ran: gpt (gpt.seq_len was 256, now 128)" in result.output


@pytest.mark.parametrize(
    ("stages", "says"),
    [
        ('["bert"]', "bert needs the documents stage's output in {out}, and there is none: run documents first"),
        ('["vocab", "bert"]', "vocab needs the documents stage's output in {out}, and there is none: run documents first"),
    ],
)
def test_missing_prerequisite_is_one_line_with_exit_2(tmp_path: Path, stages: str, says: str) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(DEMO), *[x for o in _sets(out, f"run.stages={stages}") for x in ("--set", o)]])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert says.format(out=out.resolve()) in " ".join(result.output.split())
    assert not (out / "vocab").exists() and not (out / "shards").exists()


def test_prerequisite_made_from_another_config_fails_before_anything_changes(finished: Path) -> None:
    before = sorted((p, p.stat().st_mtime_ns) for p in finished.rglob("*") if p.is_file())
    for overrides, says in [
        (
            ['run.stages=["bert"]', "clean.min_words=50"],
            "bert needs documents, made with another configuration or input (clean.min_words was 20, now 50): run documents again",
        ),
        (
            ['run.stages=["gpt"]', "vocab.bpe_vocab_size=1000"],
            "gpt needs vocab, made with another configuration or input (vocab.bpe_vocab_size was 50257, now 1000): run vocab again",
        ),
    ]:
        result = runner.invoke(app, ["build", str(DEMO), *[x for o in _sets(finished, *overrides) for x in ("--set", o)]])
        assert result.exit_code == 2, result.output
        assert says in " ".join(result.output.split())
    assert sorted((p, p.stat().st_mtime_ns) for p in finished.rglob("*") if p.is_file()) == before


def test_leftovers_are_flagged_by_verify_and_removed_by_the_next_build(finished: Path) -> None:
    sort_dir = finished / "shards" / "bert" / (".sort-" + "0" * 32)
    (sort_dir / "examples").mkdir(parents=True)
    (finished / ".work" / "documents").mkdir(parents=True)
    half = finished / "documents" / ("part-00000-of-00001.parquet.tmp-" + "a" * 32)
    half.write_bytes(b"half")
    problems = verify(finished / "shards" / "bert")
    assert any(str(sort_dir) in p for p in problems) and any(str(finished / ".work") in p for p in problems)
    result = _build(finished, 'run.stages=["bert"]')
    assert result.reused == ["bert"]
    assert not sort_dir.exists() and not (finished / ".work").exists() and not half.exists()
    assert verify(finished / "shards" / "bert") == []


def test_small_vocabulary_and_zero_examples_are_warnings(finished: Path) -> None:
    result = _build(finished, "gpt.seq_len=1000000", "gpt.keep_tail=false")
    assert result.ran == {"gpt": "gpt.keep_tail was true, now false"}
    assert "gpt: 0 examples written (no document is long enough to make one)" in result.warnings
    assert any(w.startswith("vocab: the wordpiece vocabulary has") and "under 10% of the 30,522 asked" in w for w in result.warnings)
    assert json.loads((finished / "manifest.json").read_text())["warnings"] == result.warnings


def test_killed_training_continues_from_its_newest_checkpoint(finished: Path) -> None:
    train = [
        'run.stages=["books","wikipedia","clean","dedup","near_dedup","documents","vocab","bert","gpt","train"]',
        'train.model="bert-tiny"',
        "train.steps=40",
        "train.checkpoint_every=2",
        "train.batch_size=4",
        "train.num_workers=0",
        "train.eval_batches=1",
        "train.log_every=1",
    ]
    run_dir = finished / "train" / "bert-tiny"
    _kill_when(_start(finished, *train), lambda: (run_dir / "checkpoints" / "step-00000004").is_dir())
    result = _build(finished, *train)
    assert result.reused == ALL
    assert result.ran == {"train": "no earlier result; continued from its newest checkpoint"}
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["split"] == "train"]
    assert steps.count(1) == 1 and max(steps) == 40, steps  # the killed run's steps are not trained again
    assert _build(finished, *train).reused == [*ALL, "train"]


def test_changed_input_file_is_named_and_unchanged_files_are_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from corpusforge import markers as stages
    from corpusforge.core import storage

    books = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for book in books:
        book.write_text(f"the text of {book.name}\n")
    first = stages.describe_inputs(books, [])
    read: list[Path] = []
    sha256 = storage.sha256
    monkeypatch.setattr(storage, "sha256", lambda path: read.append(Path(path)) or sha256(path))
    assert stages.describe_inputs(books, first) == first and read == []  # same size and mtime: the recorded sha256
    books[1].write_text("another text of b.txt\n")
    second = stages.describe_inputs(books, first)
    assert read == [books[1].resolve()]
    strip = lambda described: {"inputs": [stages.identity(e) for e in described]}  # noqa: E731
    assert (
        stages.describe_difference(strip(first), strip(second)) == f"1 input file(s) changed, added or removed, e.g. {books[1].resolve()}"
    )
