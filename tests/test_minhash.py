"""MinHash signatures are datasketch's, bit for bit; LSH parameters follow datasketch's optimum."""
from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.minhash import (
    MAX_HASH,
    MinHasher,
    _shingle_slices,
    band_keys,
    candidate_probability,
    jaccard,
    lsh_params,
    normalize,
    s_curve_table,
    shingle_set,
    shingles,
)


def datasketch_signature(text: str, num_perm: int = 128, seed: int = 1, ngram: int = 5) -> np.ndarray:
    m = MinHash(num_perm=num_perm, seed=seed, scheme="legacy")
    m.update_batch(shingles(text, ngram))
    return m.hashvalues


@pytest.fixture(scope="module")
def book_docs(shared_data) -> list[str]:
    words = (shared_data / "books" / "en" / "1155-0.txt").read_text(encoding="utf-8").split()
    return [" ".join(words[i : i + 1100]) for i in range(0, 1100 * 8, 1100)]


def test_signatures_identical_to_datasketch_on_book_chunks(book_docs):
    ours = MinHasher(128, seed=1).signatures(book_docs)
    assert ours.shape == (8, 128)
    for text, sig in zip(book_docs, ours):
        assert np.array_equal(sig.astype(np.uint64), datasketch_signature(text))


def test_other_seed_and_width_identical(book_docs):
    ours = MinHasher(64, seed=7, ngram=3).signature(book_docs[0])
    assert np.array_equal(ours.astype(np.uint64), datasketch_signature(book_docs[0], 64, 7, 3))


text_strategy = st.lists(
    st.sampled_from(["a", "b", "é", "ß", "\u4e2d", " ", "\n", "\t", ".", ",", "!", "'", "-", "word", "Über", "x1"]),
    max_size=120,
).map("".join)


@settings(max_examples=80, deadline=None)
@given(text_strategy, st.integers(min_value=1, max_value=6))
def test_signature_identity_property(text, ngram):
    assert _shingle_slices(text, ngram) == shingles(text, ngram)
    ours = MinHasher(32, seed=3, ngram=ngram).signature(text)
    m = MinHash(num_perm=32, seed=3, scheme="legacy")
    m.update_batch(shingles(text, ngram))
    assert np.array_equal(ours.astype(np.uint64), m.hashvalues)


def test_rare_mersenne_fold_case_is_exact():
    """A hash that puts the low 32 bits of a*h+b within 8 of 2^32 takes the exact (slow) path."""
    hasher = MinHasher(16, seed=1)
    k = next(i for i, a in enumerate(hasher.a) if int(a) & 1)  # an odd low word is invertible mod 2^32
    a_low, b_low = int(hasher.a[k]) & MAX_HASH, int(hasher.b[k]) & MAX_HASH
    h = ((MAX_HASH - 3 - b_low) * pow(a_low, -1, 1 << 32)) % (1 << 32)
    hashes = np.array([h, 12345], dtype=np.uint64)
    assert (int(hasher.a[k]) * h + int(hasher.b[k])) & MAX_HASH == MAX_HASH - 3
    exact = (((hashes[:, None] * hasher.a + hasher.b) % np.uint64((1 << 61) - 1)) & np.uint64(MAX_HASH)).min(axis=0)
    assert np.array_equal(hasher.hash_values(hashes).astype(np.uint64), exact)


def test_normalisation_ignores_case_punctuation_and_spacing():
    assert normalize("Hello,  World!\n\nIt's   ME.") == "hello world its me"
    assert shingles("A b. c d e", 5) == [b"a b c d e"]
    assert shingles("", 5) == []


def test_empty_text_has_empty_signature():
    assert (MinHasher(16).signature("") == MAX_HASH).all()


def test_lsh_params_and_s_curve():
    bands, rows = lsh_params(0.8, 128)
    assert bands * rows <= 128
    assert candidate_probability(0.9, bands, rows) > 0.9
    assert candidate_probability(0.5, bands, rows) < 0.1
    probabilities = [candidate_probability(s / 10, bands, rows) for s in range(1, 11)]
    assert probabilities == sorted(probabilities) and probabilities[-1] == 1.0
    table = s_curve_table(bands, rows)
    assert f"{bands} bands x {rows} rows" in table and "s=0.8" in table
    assert lsh_params(0.5, 128)[1] < rows  # a lower threshold needs fewer rows per band


def test_band_keys_collide_for_equal_bands_only():
    sig = np.arange(128, dtype=np.uint32)
    other = sig.copy()
    other[0] += 1
    keys, other_keys = band_keys(sig, 16, 8), band_keys(other, 16, 8)
    assert len(set(keys)) == 16
    assert keys[0] != other_keys[0] and keys[1:] == other_keys[1:]


def test_exact_jaccard_matches_python_sets(book_docs):
    a, b = book_docs[0], book_docs[0][: len(book_docs[0]) // 2] + book_docs[1][:1000]
    sa, sb = set(shingles(a)), set(shingles(b))
    assert jaccard(shingle_set(a), shingle_set(b)) == pytest.approx(len(sa & sb) / len(sa | sb))
    assert jaccard(shingle_set(""), shingle_set("")) == 1.0
