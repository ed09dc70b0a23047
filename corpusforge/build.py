"""``corpusforge build``: run the stages a configuration asks for and write the run manifest.

documents (one Beam job: read sources -> clean -> exact/near dedup -> Parquet documents + rejects)
  -> vocab (HF tokenizers on a deterministic sample) -> bert / gpt shards (Beam jobs) -> train.
What each stage is lives in its declaration (``corpusforge.stages``); which run and which are reused
in the plan (``corpusforge.plan``). Each stage leaves a marker of what it was made from
(``corpusforge.markers``). The run manifest is removed before anything in the folder changes and
written last, so a run that stopped half way never looks complete.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from corpusforge import progress
from corpusforge.core import storage
from corpusforge.core.config import Config
from corpusforge.core.layout import Layout
from corpusforge.markers import Marker, fingerprint, remove_marker, write_marker
from corpusforge.pipeline import collector
from corpusforge.pipeline.cluster_warmup import warm_runner
from corpusforge.pipeline.forked_workers import forkserver_scope
from corpusforge.pipeline.manifest import package_versions
from corpusforge.pipeline.summary import SourceStats, stats_to_json
from corpusforge.plan import Plan, made_from, parts_of, plan_build
from corpusforge.stages import BY_NAME, DOCUMENTS, STAGES, Context

log = logging.getLogger(__name__)
_SORT_DIR = re.compile(r"^\.sort-[0-9a-f]{32}$")  # the shard writer's sort folders


@dataclass
class BuildResult:
    output_dir: str
    stats: dict[str, SourceStats] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    manifest_path: str | None = None
    reused: list[str] = field(default_factory=list)  # stages whose earlier outputs still matched
    ran: dict[str, str] = field(default_factory=dict)  # stage -> why it ran
    warnings: list[str] = field(default_factory=list)


@contextmanager
def build_lock(layout: Layout, lease_s: float) -> Iterator[None]:
    """One build at a time per output folder: the next one removes what a killed one left, never a live one's files."""
    try:
        with storage.lock(layout.lock, lease_s):
            yield
    except storage.LockedError:
        raise ValueError(f"another corpusforge build is writing {layout.out}: wait for it or use another run.output_dir") from None


def run_build(cfg: Config, force: bool = False) -> BuildResult:
    """Run the requested stages that are not already done (all of them with ``force``), then the manifest."""
    layout = Layout.at(cfg.run.output_dir, cfg.run.temp_location)
    storage.makedirs(layout.out)
    result = BuildResult(output_dir=layout.out)
    started = time.perf_counter()
    with (
        build_lock(layout, cfg.run.lock_lease_s),
        collector.relaxed(),  # the launcher runs stages too (vocab, in-memory jobs)
        forkserver_scope(),  # the workers of every multi_processing job fork from one server
    ):
        warm_runner(cfg.run)  # a cluster's processes import while this one plans (at once from the command line)
        plan = plan_build(cfg, layout, force)  # reads only: a missing prerequisite stops the build before anything changes
        current = not plan.reasons and manifest_describes(layout, cfg)
        if not current:
            for path in (layout.manifest, layout.report):
                storage.remove(path)
        leftovers = remove_leftovers(layout, cfg, plan)
        if leftovers:
            log.warning("removed what an interrupted build left: %s", ", ".join(layout.relative(p) for p in leftovers))
        markers = run_stages(cfg, plan, result)
        result.stage_seconds["total"] = round(time.perf_counter() - started, 3)
        result.manifest_path = layout.manifest
        if current:  # nothing ran and the manifest already describes this configuration: the folder stays as it is
            return result
        write_run_manifest(cfg, plan, markers, result)
        from corpusforge.report_page import write_report

        with progress.stage("report"):
            write_report(layout.out)
    return result


def remove_leftovers(layout: Layout, cfg: Config, plan: Plan) -> list[str]:
    """Spill folders and half-written files of a killed build, all under names only the build uses. The work
    folder of a resumable stage that runs again is kept: the stage decides what in it it can reuse."""
    kept = {storage.name(layout.work(s.name)) for s in STAGES if s.resumes and plan.runs(s.name) and not plan.force}
    found = [path for path in storage.listdir(layout.temp) if storage.name(path) not in kept]
    folders = [layout.out, layout.markers, *(folder for stage in STAGES for folder in stage.folders(layout, cfg))]
    for folder in folders:
        entries = storage.listdir(folder) if folder == layout.out else storage.walk(folder)
        found += [path for path in entries if storage.is_temporary(path) or _SORT_DIR.match(storage.name(path))]
    for path in found:
        storage.remove_tree(path) if storage.is_dir(path) else storage.remove(path)
    if storage.is_dir(layout.temp) and not storage.listdir(layout.temp):
        storage.remove_tree(layout.temp)
    return found


def manifest_describes(layout: Layout, cfg: Config) -> bool:
    """Whether OUT's manifest and report were written for this very configuration."""
    try:
        manifest = storage.read_json(layout.manifest)
    except (OSError, ValueError):
        return False
    return storage.is_file(layout.report) and manifest.get("config") == cfg.model_dump(mode="json")


def run_stages(cfg: Config, plan: Plan, result: BuildResult) -> dict[str, Marker]:
    """Each requested stage in order: reused as its marker describes it, or run and marked. Returns every
    stage's marker (run, reused or needed)."""
    layout = plan.layout
    markers = dict(plan.needed)
    for name in plan.requested:
        stage = BY_NAME[name]
        if name in plan.reused:
            progress.log.info("stage %s reused (unchanged since it was made)", name)
            markers[name] = plan.reused[name]
            result.reused.append(name)
        else:
            remove_marker(layout, name)  # before its outputs change
            made = made_from(stage, cfg, parts_of(stage, cfg, True, None), plan.inputs.get(name), markers)
            context = Context(cfg, layout, markers, fingerprint(made), plan.force, plan.inputs.get(name, []))
            t0 = time.perf_counter()
            with progress.stage(name, poll=lambda stage=stage: stage.live(layout)):
                outcome = stage.run(context)
            result.stage_seconds[name] = round(time.perf_counter() - t0, 3)
            data = outcome.data | ({"inputs": plan.inputs[name]} if name in plan.inputs else {})
            markers[name] = Marker(name, fingerprint(made), made, outcome.outputs, outcome.digests, data)
            write_marker(layout, markers[name])
            result.ran[name] = plan.reasons[name] + outcome.note
        figures = stage.figures(layout, markers[name])
        result.warnings += stage.warnings(cfg, figures)
        _add_figures(result, figures)
    if DOCUMENTS.name in markers and DOCUMENTS.name not in plan.requested:
        _add_figures(result, DOCUMENTS.figures(layout, markers[DOCUMENTS.name]))  # the figures of what later stages were made from
    return markers


def _add_figures(result: BuildResult, figures: dict[str, Any]) -> None:
    figures = dict(figures)
    result.stats = figures.pop("stats", result.stats)
    result.artifacts.update(figures)


def write_run_manifest(cfg: Config, plan: Plan, markers: dict[str, Marker], result: BuildResult) -> None:
    documents = markers.get(DOCUMENTS.name)
    storage.write_json(
        plan.layout.manifest,
        {
            "kind": "corpusforge-build",
            "inputs": documents.made_from["inputs"] if documents else [],
            "config": cfg.model_dump(mode="json"),
            "versions": package_versions(),
            "counters": stats_to_json(result.stats),
            "stages": {stage: "reused" if stage in result.reused else "ran" for stage in plan.requested},
            "stage_seconds": result.stage_seconds,
            "warnings": result.warnings,
            "artifacts": result.artifacts,
            "outputs": documents.outputs if documents else [],
        },
    )
