"""The mutations issue 15 lists, each applied to the checkout, run against the tests meant to catch it, then undone.

    nice -n 10 .venv/bin/python bench/listed_mutations.py [name ...]

Prints CAUGHT or MISSED! per mutation. It edits files in place (and restores them in a ``finally``): run it
with nothing else running in the checkout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MUTATIONS = [
    (
        "sampling-rate filter deleted",
        "encoding/vocab.py",
        "        if stable_hash(seed, doc_id) >= threshold:\n            continue\n",
        "",
        ["tests/test_vocab.py", "-k", "sample"],
    ),
    (
        "rng_for ignores the seed",
        "core/hashing.py",
        "np.random.PCG64(stable_hash(*parts))",
        "np.random.PCG64(stable_hash(*parts[1:]))",
        ["tests/test_hashing.py", "tests/test_bert_examples.py", "-k", "rng_for or depends_only"],
    ),
    (
        "no mix64 in the shuffle keys",
        "pipeline/examples_stage.py",
        "return mix64(np.asarray(bases, dtype=np.uint64)[owner] + within.astype(np.uint64))",
        "return np.asarray(bases, dtype=np.uint64)[owner] + within.astype(np.uint64)",
        ["tests/test_hashing.py"],
    ),
    (
        "range_buckets returns zeros",
        "shards/writer.py",
        "return ((keys.astype(np.uint64) >> np.uint64(32)) * np.uint64(num_buckets)) >> np.uint64(32)",
        "return np.zeros(len(keys), dtype=np.uint64)",
        ["tests/test_shard_writer.py"],
    ),
    (
        "serial per host: HostGate(1)",
        "corpora/fetch.py",
        "HostGate(self.config.per_host_concurrency)",
        "HostGate(1)",
        ["tests/test_fetch.py", "-k", "concurrently or limits"],
    ),
    (
        "serial overall: Semaphore(1)",
        "corpora/fetch.py",
        "self.slots = asyncio.Semaphore(config.concurrency)",
        "self.slots = asyncio.Semaphore(1)",
        ["tests/test_fetch.py", "-k", "concurrently or limits"],
    ),
    (
        "shard manifest checksums 0*64",
        "shards/writer.py",
        '"sha256": sha256_file(path),',
        '"sha256": "0" * 64,',
        ["tests/test_shard_writer.py"],
    ),
    (
        "run manifest checksums 0*64",
        "pipeline/manifest.py",
        '"sha256": sha256_file(path)}',
        '"sha256": "0" * 64}',
        ["tests/test_demo_build.py", "-k", "checksums"],
    ),
    (
        "verify ignores shard checksums",
        "shards/reader.py",
        "if actual != expected.sha256:",
        "if False:",
        ["tests/test_shards_cli.py", "-k", "verify"],
    ),
]


def main(only: list[str]) -> None:
    for name, path, old, new, tests in MUTATIONS:
        if only and not any(word in name for word in only):
            continue
        file = ROOT / path
        original = file.read_text()
        if original.count(old) != 1:
            print(f"STALE    {name}: the code to mutate is no longer in {path} exactly once", flush=True)
            continue
        file.write_text(original.replace(old, new))
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], cwd=ROOT, capture_output=True, text=True
            )
        finally:
            file.write_text(original)
        last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-200:]
        outcome = {0: "MISSED!", 1: "CAUGHT "}.get(run.returncode, f"rc={run.returncode}")
        print(f"{outcome}  {name}: {last}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
