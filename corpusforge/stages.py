"""Stage markers: what each finished stage was made from, so a re-run reuses it and a change reruns it.

``OUT/.stages/<stage>.json`` is written (atomically) when a stage finishes and removed before the
stage starts changing its outputs. It holds the stage's fingerprint, a sha256 of what it was made
from: a format version, the configuration sections the stage reads, and its inputs (the documents
stage: every input file's size and sha256; the others: digests of their upstream stages' outputs).
Beside it: the files the stage wrote with their sizes (the cheap check that they are still there),
digests of its outputs for the stages downstream, and the figures the summary needs when the stage
is reused rather than run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.core.config import Config
from corpusforge.core.files import WORK_DIR, sha256_file, write_json_atomic
from corpusforge.shards.format import FORMAT_VERSION as SHARDS_FORMAT

MARKER_VERSION = 2  # 2: the documents marker's stats carry each source's lengths
MARKERS_DIR = ".stages"
STAGES = ("documents", "vocab", "bert", "gpt", "train")
SOURCE_STAGES = ("books", "wikipedia", "webtext")
FILTER_STAGES = ("clean", "dedup", "near_dedup")
# bumped when a stage writes different bytes from the same inputs, so older outputs are rebuilt
FORMATS = {"documents": 1, "vocab": 1, "bert": SHARDS_FORMAT, "gpt": SHARDS_FORMAT, "train": 1}
# the build's own temporary names: files.temp_path and the shard writer's sort folders
_TEMP_FILE = re.compile(r"\.tmp-[0-9a-f]{32}$")
_SORT_DIR = re.compile(r"^\.sort-[0-9a-f]{32}$")


class PrerequisiteError(ValueError):
    """A stage's inputs are missing or were made from another configuration: one line saying what to run first."""


@dataclass
class Marker:
    stage: str
    fingerprint: str
    made_from: dict[str, Any]
    outputs: list[dict[str, Any]]  # {"path" (relative to OUT), "bytes"[, "sha256"]}
    digests: dict[str, str] = field(default_factory=dict)  # output name -> digest, what downstream stages record
    data: dict[str, Any] = field(default_factory=dict)  # figures for the summary when the stage is reused


def fingerprint(made_from: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(made_from, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def marker_path(out: Path, stage: str) -> Path:
    return Path(out) / MARKERS_DIR / f"{stage}.json"


def read_marker(out: Path, stage: str) -> Marker | None:
    """The stage's marker, or None when there is none or it is unreadable or of another version."""
    try:
        data = json.loads(marker_path(out, stage).read_text(encoding="utf-8"))
        if data.pop("version", None) != MARKER_VERSION:
            return None
        return Marker(**data)
    except (OSError, ValueError, TypeError):
        return None


def write_marker(out: Path, marker: Marker) -> None:
    write_json_atomic({"version": MARKER_VERSION, **asdict(marker)}, marker_path(out, marker.stage))


def remove_marker(out: Path, stage: str) -> None:
    marker_path(out, stage).unlink(missing_ok=True)


def describe_outputs(out: Path, paths: list[Path], checksums: bool = False) -> list[dict[str, Any]]:
    entries = []
    for path in sorted(paths):
        entry: dict[str, Any] = {"path": path.relative_to(out).as_posix(), "bytes": path.stat().st_size}
        if checksums:
            entry["sha256"] = sha256_file(path)
        entries.append(entry)
    return entries


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*") if p.is_file() and not _TEMP_FILE.search(p.name))


def digest(entries: list[dict[str, Any]]) -> str:
    """One digest over files' names and checksums."""
    return fingerprint({"files": [[e["path"], e["sha256"]] for e in entries]})


def output_problem(out: Path, marker: Marker) -> str | None:
    """The cheap check that a stage's outputs are still what it wrote: each file there with its size."""
    for entry in marker.outputs:
        path = Path(out) / entry["path"]
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{path} changed size"
    return None


def describe_inputs(paths: list[Path], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input files with size, mtime and sha256; a file whose size and mtime match ``previous`` keeps its
    recorded sha256 rather than being read again (as make and rsync decide)."""
    known = {(e["path"], e["bytes"], e["mtime_ns"]): e["sha256"] for e in previous}
    described = []
    for path in sorted({Path(p).resolve() for p in paths}):
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        described.append(
            {"path": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": known.get(key) or sha256_file(path)}
        )
    return described


def documents_stages(stages: list[str]) -> list[str]:
    """The source and filter stages of a stage list: what the documents stage runs."""
    return [s for s in (*SOURCE_STAGES, *FILTER_STAGES) if s in stages]


def config_view(stage: str, cfg: Config, documents: list[str]) -> dict[str, Any]:
    """The configuration a stage reads (``documents``: the source and filter stages it runs)."""
    if stage == "documents":
        sections = list(documents)
        if "webtext" in documents and "wikipedia" in documents and "near_dedup" not in sections:
            sections.append("near_dedup")  # Wikipedia removal from WebText uses its settings
        view = {"stages": documents, "part_bytes": cfg.run.part_bytes, "reject_parts": cfg.run.reject_parts}
        return view | {name: getattr(cfg, name).model_dump(mode="json") for name in sections}
    if stage == "vocab":
        return {"vocab": cfg.vocab.model_dump(mode="json")}
    if stage in ("bert", "gpt"):
        return {stage: getattr(cfg, stage).model_dump(mode="json"), "shards": cfg.shards.model_dump(mode="json"), "seed": cfg.run.seed}
    return {"train": cfg.train.model_dump(mode="json", exclude={"task"})}


def upstream(stage: str, cfg: Config) -> list[tuple[str, str]]:
    """(stage, output) pairs a stage is made from."""
    if stage == "vocab":
        return [("documents", "documents")]
    if stage == "bert":
        return [("documents", "documents"), ("vocab", "wordpiece")]
    if stage == "gpt":
        return [("documents", "documents"), ("vocab", "bpe")]
    if stage == "train":
        from corpusforge.trainer.sizes import get_size

        family = get_size(cfg.train.model).family
        return [(family, family)]
    return []


def first_difference(recorded: Any, current: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """(dotted key, recorded value, current value) of the first difference between two JSON values."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        for key in sorted(set(recorded) | set(current)):
            found = first_difference(recorded.get(key), current.get(key), f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    return None if recorded == current else (path, recorded, current)


def describe_difference(recorded: dict[str, Any], current: dict[str, Any]) -> str:
    """Why a marker no longer matches, in words: the first key, input file or upstream output that differs."""
    found = first_difference(recorded, current)
    if found is None:
        return "unchanged"
    key, old, new = found
    if key.startswith("config."):
        name = key.removeprefix("config.")
        name = f"run.{name}" if name.split(".")[0] in ("stages", "part_bytes", "reject_parts", "seed") else name
        return f"{name} was {json.dumps(old)}, now {json.dumps(new)}"
    if key == "inputs":
        before, after = ({e["path"]: e for e in files or []} for files in (old, new))
        changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
        return f"{len(changed)} input file(s) changed, added or removed, e.g. {changed[0]}"
    if key.startswith("upstream."):
        _, name, output = key.split(".", 2)
        return f"the {name if name == output else f'{output} {name}'} it was made from changed"
    return f"it was made by another corpusforge ({key} {json.dumps(old)}, now {json.dumps(new)})"


def remove_leftovers(out: Path) -> list[Path]:
    """Spill folders and half-written files of a killed build, all under names only the build uses."""
    out = Path(out)
    found: list[Path] = [out / WORK_DIR] if (out / WORK_DIR).is_dir() else []
    for folder in sorted((out / "shards").glob("*")):
        if folder.is_dir():
            found += [p for p in sorted(folder.iterdir()) if p.is_dir() and _SORT_DIR.match(p.name)]
    roots = [out, out / MARKERS_DIR, out / "documents", out / "rejects", out / "vocab", out / "shards"]  # train/: the trainer's own
    for root in roots:
        if root.is_dir():
            walk = root.iterdir() if root == out else root.rglob("*")
            found += sorted(p for p in walk if p.is_file() and _TEMP_FILE.search(p.name))
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return found
