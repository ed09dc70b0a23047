"""Stable hashes and shuffle keys: the same in every process, different for every input that should matter."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from corpusforge.core.hashing import mix64, rng_for, splitmix64, stable_hash
from corpusforge.pipeline.examples_stage import example_keys
from corpusforge.shards.writer import range_buckets


def draws(*parts: object) -> list[int]:
    return rng_for(*parts).integers(0, 2**63, 8).tolist()


def test_rng_for_depends_on_the_seed_and_on_every_other_part():
    assert draws(1, "doc", 0) == draws(1, "doc", 0)
    variants = [draws(1, "doc", 0), draws(2, "doc", 0), draws(1, "other", 0), draws(1, "doc", 1), draws(1, "doc")]
    assert len({tuple(v) for v in variants}) == len(variants)


def test_hashes_and_generators_are_the_same_in_another_process():
    code = "from corpusforge.core.hashing import rng_for, stable_hash; print(stable_hash(7, 'doc', 3), rng_for(7, 'doc', 3).integers(0, 2**63))"
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    printed = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout.split()
    assert printed == [str(stable_hash(7, "doc", 3)), str(rng_for(7, "doc", 3).integers(0, 2**63))]


def test_mix64_is_splitmix64_on_arrays():
    values = [0, 1, 2, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15]
    assert mix64(np.array(values, dtype=np.uint64)).tolist() == [splitmix64(v) for v in values]


def test_example_keys_scatter_the_examples_of_one_document_over_the_whole_order():
    """Consecutive examples of a document get unrelated keys, so the global sort does not keep them together."""
    documents, per_document = 40, 25
    bases = [stable_hash(7, "order", f"doc-{i}", 0) for i in range(documents)]
    owner = np.repeat(np.arange(documents), per_document)
    keys = example_keys(bases, owner)
    assert len(np.unique(keys)) == len(keys)
    order = owner[np.argsort(keys)]
    assert np.mean(order[1:] == order[:-1]) < 0.1  # a random order gives about 1/40; unmixed keys 24/25
    rank = np.argsort(np.argsort(keys))
    assert all(np.ptp(rank[owner == doc]) > len(keys) // 2 for doc in range(documents))
    assert np.bincount(range_buckets(keys, 4), minlength=4).min() > len(keys) // 8  # every sort bucket gets a share


def test_example_keys_count_within_each_owner():
    owner = np.array([0, 0, 0, 1, 2, 2])
    keys = example_keys([10, 20, 30], owner)
    assert keys.tolist() == mix64(np.array([10, 11, 12, 20, 30, 31], dtype=np.uint64)).tolist()
