"""Which stages a build runs and which it reuses, decided before anything in the output folder changes.

A requested stage is reused when its marker's fingerprint equals the one the current configuration
and inputs give, its files are still there with their recorded sizes, no stage upstream of it runs
in this build, and ``--force`` is not given; otherwise it runs, and so does everything downstream.
A stage that is needed but not requested (``run.stages=["bert"]`` needs documents and vocab) must
already be there, made from this configuration: if not, the build stops with one line saying which
stage to run first (``PrerequisiteError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from corpusforge.core.config import Config
from corpusforge.stages import (
    FORMATS,
    MARKER_VERSION,
    SOURCE_STAGES,
    STAGES,
    Marker,
    PrerequisiteError,
    config_view,
    describe_difference,
    describe_inputs,
    documents_stages,
    fingerprint,
    output_problem,
    read_marker,
    upstream,
)

VOCAB_KINDS = {"bert": "wordpiece", "gpt": "bpe"}


@dataclass
class Plan:
    out: Path
    requested: list[str]  # in pipeline order
    force: bool = False
    reasons: dict[str, str] = field(default_factory=dict)  # stage that runs -> why
    reused: list[str] = field(default_factory=list)
    markers: dict[str, Marker] = field(default_factory=dict)  # stages reused, made or needed in this build
    inputs: list[dict[str, Any]] = field(default_factory=list)  # the documents stage's input files, mtimes included

    def runs(self, stage: str) -> bool:
        return stage in self.reasons


def requested_stages(cfg: Config) -> list[str]:
    """The stages ``run.stages`` asks for, in pipeline order: documents whenever a source is listed."""
    asked = set(cfg.run.stages) - {"documents"}
    if asked & set(SOURCE_STAGES):
        asked.add("documents")
    return [stage for stage in STAGES if stage in asked]


def input_files(cfg: Config, stages: Iterable[str]) -> list[Path]:
    stages = set(stages)
    files: list[Path] = []
    if "books" in stages:
        from corpusforge.corpora.books import list_book_files

        for root in cfg.books.paths:
            files += list_book_files(Path(root), tuple(cfg.books.extensions))
    if "wikipedia" in stages:
        files += [Path(p) for p in [*cfg.wikipedia.paths, *cfg.wikipedia.index_paths]]
    if "webtext" in stages:
        files += [Path(p) for p in cfg.webtext.dumps]
        if cfg.webtext.offline:  # the captures are then inputs; online, the stage itself adds to them
            from corpusforge.corpora.warc import warc_files
            from corpusforge.pipeline.webtext import warc_dir_of

            files += warc_files(warc_dir_of(cfg))
    return files


def made_from(stage: str, cfg: Config, plan: Plan, previous: Marker | None) -> dict[str, Any]:
    """What ``stage`` is made from under ``cfg``: its fingerprint is the sha256 of this."""
    recipe: dict[str, Any] = {"version": MARKER_VERSION, "format": FORMATS[stage]}
    if stage == "documents":
        sources = documents_stages(cfg.run.stages) if "documents" in plan.requested else previous.made_from["config"]["stages"]
        if not plan.inputs:
            plan.inputs = describe_inputs(input_files(cfg, sources), previous.data.get("inputs", []) if previous else [])
        recipe["inputs"] = [{k: e[k] for k in ("path", "bytes", "sha256")} for e in plan.inputs]
        return recipe | {"config": config_view(stage, cfg, sources)}
    recipe["upstream"] = {}
    for name, output in upstream(stage, cfg):
        value = plan.markers[name].digests.get(output)
        if value is None:
            raise PrerequisiteError(
                f"{stage} needs the {output} output of the {name} stage, which it did not make: "
                f'add "{output}" to vocab.kinds and run {name}'
            )
        recipe["upstream"][f"{name}.{output}"] = value
    return recipe | {"config": config_view(stage, cfg, [])}


def how_to_run(stage: str) -> str:
    if stage == "documents":
        return 'add its sources, e.g. "books", "wikipedia", to run.stages'
    return f'add "{stage}" to run.stages'


def plan_build(cfg: Config, force: bool = False) -> Plan:
    """Decide every stage; raises ``PrerequisiteError`` for a needed stage that is missing or stale."""
    out = cfg.run.output_dir.resolve()
    plan = Plan(out, requested_stages(cfg), force)
    needed = set(plan.requested)
    for stage in reversed(STAGES):
        if stage in needed:
            needed |= {name for name, _ in upstream(stage, cfg)}
    for stage in (s for s in STAGES if s in needed):
        users = [s for s in plan.requested if stage in {name for name, _ in upstream(s, cfg)}] or [stage]
        if stage in plan.requested:
            _decide(stage, cfg, plan)
        else:
            _require(stage, users[0], cfg, plan)
    for stage, kind in VOCAB_KINDS.items():
        if stage in plan.requested and plan.runs("vocab") and kind not in cfg.vocab.kinds:
            raise PrerequisiteError(f'{stage} needs a {kind} vocabulary: add "{kind}" to vocab.kinds')
    return plan


def _decide(stage: str, cfg: Config, plan: Plan) -> None:
    previous = read_marker(plan.out, stage)
    rerun_upstream = [name for name, _ in upstream(stage, cfg) if plan.runs(name)]
    current = None if rerun_upstream else made_from(stage, cfg, plan, previous)  # documents: inputs described now, before they are read
    if plan.force:
        reason = "--force"
    elif previous is None:
        reason = "no earlier result"
    elif current is None:
        reason = f"{rerun_upstream[0]} runs again"
    elif fingerprint(current) != previous.fingerprint:
        reason = describe_difference(previous.made_from, current)
    else:
        reason = output_problem(plan.out, previous)
    if reason is None:
        plan.reused.append(stage)
        plan.markers[stage] = previous
    else:
        plan.reasons[stage] = reason


def _require(stage: str, user: str, cfg: Config, plan: Plan) -> None:
    """A stage ``user`` needs but the build does not run: it must be there, made from this configuration."""
    marker = read_marker(plan.out, stage)
    if marker is None:
        raise PrerequisiteError(
            f"{user} needs the {stage} stage's output in {plan.out}, and there is none: run {stage} first ({how_to_run(stage)})"
        )
    rerun_upstream = [name for name, _ in upstream(stage, cfg) if plan.runs(name)]
    if rerun_upstream:
        raise PrerequisiteError(f"{user} needs {stage}, which must be made again after {rerun_upstream[0]}: {how_to_run(stage)}")
    problem = output_problem(plan.out, marker)
    if problem:
        raise PrerequisiteError(f"{user} needs the {stage} stage's output, but {problem}: run {stage} again ({how_to_run(stage)})")
    current = made_from(stage, cfg, plan, marker)
    if fingerprint(current) != marker.fingerprint:
        raise PrerequisiteError(
            f"{user} needs {stage}, made with another configuration or input "
            f"({describe_difference(marker.made_from, current)}): run {stage} again ({how_to_run(stage)})"
        )
    plan.markers[stage] = marker
