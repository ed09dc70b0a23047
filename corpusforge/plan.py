"""Which stages a build runs and which it reuses, decided once, before anything in the output folder changes.

A requested stage is reused when its marker's fingerprint equals the one the current configuration
and inputs give, its files are still there with their recorded sizes, no stage upstream of it runs
in this build, and ``--force`` is not given; otherwise it runs, and so does everything downstream.
A stage that is needed but not requested (``run.stages=["bert"]`` needs documents and vocab) must
already be there, made from this configuration: if not, the build stops with one line saying which
stage to run first (``PrerequisiteError``). The ``Plan`` is not changed after it is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corpusforge.core.config import Config
from corpusforge.core.layout import Layout
from corpusforge.markers import (
    MARKER_VERSION,
    Marker,
    PrerequisiteError,
    describe_difference,
    describe_inputs,
    fingerprint,
    identity,
    output_problem,
    read_marker,
)
from corpusforge.stages import BY_NAME, STAGES, Stage, documents_parts, requested_stages


@dataclass(frozen=True)
class Plan:
    layout: Layout
    requested: tuple[str, ...]  # in pipeline order
    force: bool
    reasons: dict[str, str]  # stage that runs -> why
    reused: dict[str, Marker]  # requested stages whose earlier outputs still match
    needed: dict[str, Marker]  # stages not requested that requested ones are made from
    inputs: dict[str, list[dict[str, Any]]]  # stage -> its input files (size, mtime, sha256), described once

    def runs(self, stage: str) -> bool:
        return stage in self.reasons


def parts_of(stage: Stage, cfg: Config, requested: bool, previous: Marker | None) -> list[str]:
    """The parts a stage runs (the documents stage's sources and filters): from ``run.stages`` when it is
    requested, else those it was made with."""
    if requested or previous is None:
        return documents_parts(cfg.run.stages)
    return previous.made_from["config"].get("stages", [])


def made_from(
    stage: Stage, cfg: Config, parts: list[str], inputs: list[dict[str, Any]] | None, upstream: dict[str, Marker]
) -> dict[str, Any]:
    """What ``stage`` is made from under ``cfg``: its fingerprint is the sha256 of this."""
    recipe: dict[str, Any] = {"version": MARKER_VERSION, "format": stage.format}
    if inputs is not None:
        recipe["inputs"] = [identity(e) for e in inputs]
    else:
        recipe["upstream"] = {}
        for name, output in stage.needs(cfg):
            value = upstream[name].digests.get(output)
            if value is None:
                hint = BY_NAME[name].missing_output_hint.format(output=output)
                raise PrerequisiteError(
                    f"{stage.name} needs the {output} output of the {name} stage, which it did not make: {hint} and run {name}"
                )
            recipe["upstream"][f"{name}.{output}"] = value
    return recipe | {"config": stage.view(cfg, parts)}


def plan_build(cfg: Config, layout: Layout, force: bool = False) -> Plan:
    """Decide every stage; raises ``PrerequisiteError`` for a needed stage that is missing or stale."""
    requested = [stage.name for stage in requested_stages(cfg)]
    needed = set(requested)
    for stage in reversed(STAGES):
        if stage.name in needed:
            needed |= {name for name, _ in stage.needs(cfg)}
    plan = Plan(layout, tuple(requested), force, {}, {}, {}, {})
    for stage in (s for s in STAGES if s.name in needed):
        if stage.name in requested:
            _decide(stage, cfg, plan)
        else:
            users = [s for s in requested if stage.name in {name for name, _ in BY_NAME[s].needs(cfg)}]
            _require(stage, users[0], cfg, plan)
    for name in requested:
        for upstream, output in BY_NAME[name].needs(cfg):
            if plan.runs(upstream) and output not in BY_NAME[upstream].makes(cfg):
                hint = BY_NAME[upstream].missing_output_hint.format(output=output)
                raise PrerequisiteError(f"{name} needs the {output} output of the {upstream} stage: {hint}")
    return plan


def _markers(plan: Plan) -> dict[str, Marker]:
    return plan.reused | plan.needed


def _current(stage: Stage, cfg: Config, plan: Plan, requested: bool, previous: Marker | None) -> dict[str, Any]:
    """What the stage would be made from now; a stage reading files outside OUT has them described (once)."""
    parts = parts_of(stage, cfg, requested, previous)
    inputs = None
    if stage.inputs is not None:
        inputs = describe_inputs(stage.inputs(cfg, parts), previous.data.get("inputs", []) if previous else [])
        plan.inputs[stage.name] = inputs
    return made_from(stage, cfg, parts, inputs, _markers(plan))


def _decide(stage: Stage, cfg: Config, plan: Plan) -> None:
    previous = read_marker(plan.layout, stage.name)
    rerun_upstream = [name for name, _ in stage.needs(cfg) if plan.runs(name)]
    current = None if rerun_upstream else _current(stage, cfg, plan, True, previous)  # inputs described now, before they are read
    if plan.force:
        reason = "--force"
    elif previous is None:
        reason = "no earlier result"
    elif current is None:
        reason = f"{rerun_upstream[0]} runs again"
    elif fingerprint(current) != previous.fingerprint:
        reason = describe_difference(previous.made_from, current)
    else:
        reason = output_problem(plan.layout, previous)
    if reason is None:
        plan.reused[stage.name] = previous
    else:
        plan.reasons[stage.name] = reason


def _require(stage: Stage, user: str, cfg: Config, plan: Plan) -> None:
    """A stage ``user`` needs but the build does not run: it must be there, made from this configuration."""
    marker = read_marker(plan.layout, stage.name)
    name, how = stage.name, stage.how_to_run
    if marker is None:
        raise PrerequisiteError(f"{user} needs the {name} stage's output in {plan.layout.out}, and there is none: run {name} first ({how})")
    rerun_upstream = [upstream for upstream, _ in stage.needs(cfg) if plan.runs(upstream)]
    if rerun_upstream:
        raise PrerequisiteError(f"{user} needs {name}, which must be made again after {rerun_upstream[0]}: {how}")
    problem = output_problem(plan.layout, marker)
    if problem:
        raise PrerequisiteError(f"{user} needs the {name} stage's output, but {problem}: run {name} again ({how})")
    current = _current(stage, cfg, plan, False, marker)
    if fingerprint(current) != marker.fingerprint:
        raise PrerequisiteError(
            f"{user} needs {name}, made with another configuration or input "
            f"({describe_difference(marker.made_from, current)}): run {name} again ({how})"
        )
    plan.needed[name] = marker
