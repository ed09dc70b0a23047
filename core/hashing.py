"""Process-independent hashes: every id, bucket and random choice derives from these, never from
Python's salted ``hash`` or from bundle order, so any runner and worker count gives the same bytes."""

from __future__ import annotations

import hashlib

import numpy as np

_U64 = (1 << 64) - 1


def stable_hash(*parts: object) -> int:
    """64-bit hash of the parts that is identical in every process (Python's ``hash`` is salted)."""
    data = "\x1f".join(map(str, parts)).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded by the parts (e.g. seed, dupe index, a bucket's first document id, kind of choice)."""
    return np.random.Generator(np.random.PCG64(stable_hash(*parts)))


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser of one integer."""
    z = (x + 0x9E3779B97F4A7C15) & _U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over uint64 arrays: consecutive inputs give independent-looking keys."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))
