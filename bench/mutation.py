"""Mutation run (issue 15): cosmic-ray over five modules, each against its own tests only, on a fixed sample.

    .venv/bin/pip install cosmic-ray            # into the venv only: not a project dependency
    nice -n 10 .venv/bin/python bench/mutation.py [--per-module 30] [--timeout 300] [module ...]
    nice -n 10 .venv/bin/python bench/mutation.py --rerun-survivors   # after adding tests: same mutants again

Sessions live in ``$MUTATION_WORK`` (default /tmp/corpusforge-mutation), on a fresh copy of the checkout's files
(tracked and not ignored): the checkout itself is never mutated. The copy's ``corpusforge/`` links the sibling
folders, so ``corpusforge.x`` imports load the mutated file there (the editable install would load the checkout).

cosmic-ray replaces every ``+`` twelve ways and every ``<`` nine ways; those variants mostly die together, so the
operators are cut to one natural replacement each (``+`` -> ``-``, ``<`` -> ``<=``, ...) plus every other operator
but the random variable ones. From what remains, ``--per-module`` mutants are sampled by a stable hash of the
mutation (module, operator, occurrence), so every rerun tests the same ones and the score is an estimate of the
whole module's. Prints killed / survived per module and the diff of every survivor.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("MUTATION_WORK", "/tmp/corpusforge-mutation"))
PACKAGES = ("corpora", "examples", "shards", "pipeline", "trainer")
MODULES = {  # module -> its own tests (the Dask/Beam runner comparison is left out: 25 s a mutant)
    "corpora/minhash.py": "tests/test_minhash.py",
    "encoding/bert_examples.py": "tests/test_bert_examples.py --deselect tests/test_bert_examples.py::test_beam_stage_writes_identical_shards_on_every_runner",
    "encoding/gpt_examples.py": "tests/test_gpt_examples.py",
    "shards/writer.py": "tests/test_shard_writer.py",
    "trainer/data.py": "tests/test_trainer_data.py",
}
PAIRS = [
    "Add_Sub",
    "Sub_Add",
    "Mul_Div",
    "Div_Mul",
    "FloorDiv_Div",
    "Mod_FloorDiv",
    "Pow_Mul",
    "RShift_LShift",
    "LShift_RShift",
    "BitAnd_BitOr",
    "BitOr_BitAnd",
    "BitXor_BitOr",
    "Lt_LtE",
    "LtE_Lt",
    "Gt_GtE",
    "GtE_Gt",
    "Eq_NotEq",
    "NotEq_Eq",
    "Is_IsNot",
    "IsNot_Is",
    "In_NotIn",
    "NotIn_In",
    "USub_UAdd",
    "Delete_USub",
    "Delete_Invert",
    "Delete_Not",
]


def kept_operator(name: str) -> bool:
    kind = name.removeprefix("core/")
    if kind.startswith(("ReplaceBinaryOperator_", "ReplaceComparisonOperator_", "ReplaceUnaryOperator_")):
        return kind.split("_", 1)[1] in PAIRS
    return kind not in ("VariableReplacer", "VariableInserter")


def sample_key(module: str, operator: str, occurrence: int) -> str:
    return hashlib.sha256(f"{module}\0{operator}\0{occurrence}".encode()).hexdigest()


def fresh_copy() -> Path:
    """The checkout's files (tracked, and new ones not ignored) copied to WORK/repo, with the package links."""
    repo = WORK / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    for package in PACKAGES:
        (repo / "corpusforge" / package).symlink_to(Path("..") / package)
    shared = WORK / "shared"  # tests find the shared data beside the checkout
    if not shared.exists():
        shared.symlink_to((ROOT.parent / "shared").resolve())
    return repo


def cosmic_ray(*args: str, repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    subprocess.run([str(Path(sys.executable).with_name("cosmic-ray")), *args], cwd=repo, env=env, check=True)


def write_config(module: str, timeout: float) -> Path:
    config = WORK / f"{Path(module).stem}.toml"
    tests = f"{sys.executable} -m pytest -x -q -p no:cacheprovider {MODULES[module]}"
    config.write_text(
        f'[cosmic-ray]\nmodule-path = "{module}"\ntimeout = {timeout}\nexcluded-modules = []\ntest-command = "{tests}"\n\n'
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    return config


def choose(session: Path, per_module: int) -> None:
    """Skip every mutant but the sample: kept operators, the ``per_module`` smallest stable keys."""
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.pending_work_items)
        candidates = [item for item in items if kept_operator(item.mutations[0].operator_name)]
        candidates.sort(
            key=lambda item: sample_key(item.mutations[0].module_path, item.mutations[0].operator_name, item.mutations[0].occurrence)
        )
        chosen = {item.job_id for item in candidates[:per_module]}
        skipped = [item.job_id for item in items if item.job_id not in chosen]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not in the sample"))
        print(f"{session.stem}: {len(items)} mutants, {len(candidates)} after the operator cut, {len(chosen)} sampled", flush=True)


def reopen_survivors(session: Path) -> None:
    """Forget the survivors' results so that ``exec`` runs them again against the current tests."""
    with use_db(str(session), WorkDB.Mode.open) as db:
        survivors = [item.job_id for item, result in db.completed_work_items if result.test_outcome == TestOutcome.SURVIVED]
        with db._session_maker.begin() as rows:  # cosmic-ray has no public "forget a result"
            rows.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(survivors)).delete(synchronize_session=False)


def report(session: Path) -> tuple[int, int]:
    with use_db(str(session), WorkDB.Mode.open) as db:
        done = [(item, result) for item, result in db.completed_work_items if result.worker_outcome != WorkerOutcome.SKIPPED]
    survived = [(item, result) for item, result in done if result.test_outcome == TestOutcome.SURVIVED]
    for item, result in survived:
        mutation = item.mutations[0]
        print(
            f"--- survived: {mutation.module_path}:{mutation.start_pos[0]} {mutation.operator_name} #{mutation.occurrence}\n{result.diff}"
        )
    killed = len(done) - len(survived)
    print(f"{session.stem}: killed {killed} of {len(done)} ({100 * killed / max(len(done), 1):.0f}%), survived {len(survived)}", flush=True)
    return killed, len(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES))
    parser.add_argument("--per-module", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--rerun-survivors", action="store_true", help="run last time's survivors against the current tests")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    repo = fresh_copy()
    for module in args.modules:
        config = write_config(module, args.timeout)
        session = WORK / f"{Path(module).stem}.sqlite"
        if args.rerun_survivors:
            reopen_survivors(session)
        else:
            session.unlink(missing_ok=True)
            cosmic_ray("init", str(config), str(session), repo=repo)
            choose(session, args.per_module)
        cosmic_ray("exec", str(config), str(session), repo=repo)
        report(session)


if __name__ == "__main__":
    main()
