"""MinHash signatures equal datasketch's for the same base hash (our fast "wordmix" one, or
datasketch's default SHA-1); LSH parameters follow datasketch's optimum."""

from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from corpusforge.corpora.minhash import (
    MAX_HASH,
    MinHasher,
    _position_key,
    _shingle_slices,
    band_keys,
    candidate_probability,
    jaccard,
    lsh_params,
    normalize,
    normalized_bytes,
    s_curve_table,
    shingle_set,
    shingle_sets,
    shingles,
    wordmix_hash32,
    wordmix_hash64,
    wordmix_hashes64,
)

BASE_HASHES = ("wordmix", "sha1")


def datasketch_signature(text: str, num_perm: int = 128, seed: int = 1, ngram: int = 5, hashfunc=None) -> np.ndarray:
    m = MinHash(num_perm=num_perm, seed=seed, hashfunc=hashfunc, scheme="legacy")
    m.update_batch(shingles(text, ngram))
    return m.hashvalues


@pytest.fixture(scope="module")
def book_docs(shared_data) -> list[str]:
    words = (shared_data / "books" / "en" / "1155-0.txt").read_text(encoding="utf-8").split()
    return [" ".join(words[i : i + 1100]) for i in range(0, 1100 * 8, 1100)]


@pytest.mark.parametrize("base_hash", BASE_HASHES)
def test_signatures_identical_to_datasketch_on_book_chunks(book_docs, base_hash):
    hasher = MinHasher(128, seed=1, base_hash=base_hash)
    ours = hasher.signatures(book_docs)
    assert ours.shape == (8, 128)
    for text, sig in zip(book_docs, ours):
        assert np.array_equal(sig.astype(np.uint64), datasketch_signature(text, hashfunc=hasher.hashfunc))


def test_sha1_variant_matches_datasketch_defaults(book_docs):
    """With no hashfunc datasketch uses sha1_hash32: "sha1" signatures are interchangeable with those."""
    ours = MinHasher(base_hash="sha1").signature(book_docs[0])  # our defaults: 128 permutations, seed 1
    assert np.array_equal(ours.astype(np.uint64), datasketch_signature(book_docs[0]))


@pytest.mark.parametrize("base_hash", BASE_HASHES)
def test_other_seed_and_width_identical(book_docs, base_hash):
    hasher = MinHasher(64, seed=7, ngram=3, base_hash=base_hash)
    expected = datasketch_signature(book_docs[1], 64, 7, 3, hashfunc=hasher.hashfunc)
    assert np.array_equal(hasher.signature(book_docs[1]).astype(np.uint64), expected)


text_strategy = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "a",
                "b",
                "é",
                "ß",
                "İ",
                "\u4e2d",
                " ",
                "  ",
                "\n",
                "\t",
                "\x1c",
                "\x1f",
                "\u00a0",
                "\u3000",
                "\u2028",
                ".",
                ",",
                "!",
                "'",
                "-",
                "\u2019",
                "\u201c",
                "\u2014",
                "_",
                "word",
                "Über",
                "x1",
                "z" * 70,
            ]
        ),
        st.text(max_size=3),
    ),
    max_size=120,
).map("".join)


@settings(max_examples=100, deadline=None)
@given(text_strategy, st.integers(min_value=1, max_value=6))
def test_signature_identity_property(text, ngram):
    """Any text, short ones and unicode included: same shingles, same base hashes, same signatures."""
    data = normalized_bytes(text)
    assert data == normalize(text).encode("utf-8")
    expected_shingles = shingles(text, ngram)
    assert _shingle_slices(data, ngram) == expected_shingles
    assert wordmix_hashes64(data, ngram).tolist() == [wordmix_hash64(s) for s in expected_shingles]
    for base_hash in BASE_HASHES:
        hasher = MinHasher(32, seed=3, ngram=ngram, base_hash=base_hash)
        m = MinHash(num_perm=32, seed=3, hashfunc=hasher.hashfunc, scheme="legacy")
        m.update_batch(expected_shingles)
        assert np.array_equal(hasher.signature(text).astype(np.uint64), m.hashvalues)


@settings(max_examples=60, deadline=None)
@given(st.lists(text_strategy, max_size=12), st.integers(min_value=1, max_value=6))
def test_signatures_of_many_texts_are_each_texts_signature(texts, ngram):
    """Texts hashed together (windows cut at each text's end, short texts' minima as segmented mins) give
    every text its own signature: empty texts, texts shorter than the n-gram and unicode included."""
    for base_hash in BASE_HASHES:
        hasher = MinHasher(32, seed=3, ngram=ngram, base_hash=base_hash)
        expected = np.array([hasher.signature(text) for text in texts], dtype=np.uint32).reshape(-1, 32)
        assert np.array_equal(hasher.signatures(texts), expected)
    sets = list(shingle_sets(texts, ngram))
    assert len(sets) == len(texts)
    for text, got in zip(texts, sets):
        assert got.dtype == np.uint64 and np.array_equal(got, shingle_set(text, ngram))


def test_signatures_across_chunks_and_blocks_match_one_at_a_time(shared_data):
    """Real pages of every length, over several chunks and permutation blocks: the same rows as one text at a time."""
    words = (shared_data / "books" / "en" / "1155-0.txt").read_text(encoding="utf-8").split()
    rng = np.random.default_rng(0)
    texts, at = [], 0
    for length in rng.choice([0, 1, 3, 5, 40, 70, 700, 1500, 5000], size=400):
        texts.append(" ".join(words[at : at + int(length)]))
        at = (at + int(length)) % (len(words) - 5000)
    hasher = MinHasher()
    expected = np.array([hasher.signature(text) for text in texts])
    assert np.array_equal(hasher.signatures(texts), expected)
    assert np.array_equal(hasher.signatures(texts[::-1]), expected[::-1])
    assert all(np.array_equal(got, shingle_set(text)) for text, got in zip(texts, shingle_sets(texts)))


def test_wordmix_depends_on_every_byte_word_order_and_length():
    base = b"the quick brown fox jumps"
    variants = [
        b"the quick brown fox jumpt",
        b"quick the brown fox jumps",
        b"the quick brown fox",
        b"the quick brown fox jumps\x00",
        b"thequick brown fox jumps",
        b"the quick brown fox jumps " + b"x" * 200,
    ]
    hashes = {wordmix_hash64(s) for s in [base, *variants]}
    assert len(hashes) == len(variants) + 1
    assert 0 <= wordmix_hash32(base) <= MAX_HASH


def test_wordmix_bits_are_balanced_on_real_shingles(book_docs):
    """A good 32-bit base hash: no 64-bit collisions among distinct shingles, each output bit set about half the time."""
    distinct = sorted({s for text in book_docs for s in shingles(text)})
    hashes = np.array([wordmix_hash64(s) for s in distinct], dtype=np.uint64)
    assert len(np.unique(hashes)) == len(distinct)
    top = (hashes >> np.uint64(32)).astype(np.uint32)
    ones = np.unpackbits(top.view(np.uint8)).reshape(-1, 32).mean(axis=0)
    assert np.abs(ones - 0.5).max() < 4 * 0.5 / np.sqrt(len(distinct))


@pytest.mark.parametrize("base_hash", BASE_HASHES)
def test_signature_agreement_estimates_jaccard(book_docs, base_hash):
    """The share of equal signature values estimates the exact shingle Jaccard (std ~ 0.03 at 256 perms)."""
    hasher = MinHasher(256, seed=11, base_hash=base_hash)
    words = book_docs[2].split()
    for keep in (0.9, 0.6, 0.3):
        other = " ".join(words[: int(len(words) * keep)] + book_docs[3].split()[: int(len(words) * (1 - keep))])
        exact = jaccard(shingle_set(book_docs[2]), shingle_set(other))
        estimate = float(np.mean(hasher.signature(book_docs[2]) == hasher.signature(other)))
        assert abs(estimate - exact) < 0.12, (keep, exact, estimate)


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


def exact_hash_values(hasher: MinHasher, hashes: np.ndarray) -> np.ndarray:
    """datasketch's legacy formula, written out with the 64-bit modulo."""
    if not len(hashes):
        return np.full(hasher.num_perm, MAX_HASH, dtype=np.uint64)
    values = ((hashes[:, None] * hasher.a + hasher.b) % np.uint64((1 << 61) - 1)) & np.uint64(MAX_HASH)
    return values.min(axis=0)


@settings(max_examples=80, deadline=None)
@example([], 0, MAX_HASH - 10, [0])  # one shingle whose low word is near 2^32: the bound must not wrap to 0
@example([], 3, MAX_HASH - 14, [0, 6])
@given(
    st.lists(st.integers(0, MAX_HASH), max_size=30),
    st.integers(0, 63),
    st.one_of(st.integers(0, 40), st.integers(MAX_HASH - 20, MAX_HASH), st.integers(0, MAX_HASH)),
    st.lists(st.integers(0, 9), min_size=1, max_size=6),
)
def test_hash_values_exact_with_near_ties_and_wraps(randoms, pick, target, offsets):
    """Shingles whose low 32 bits land within a few of each other (ties the 61-bit fold can reorder),
    near 0 (likely minima) or near 2^32 (the wrap case) still give datasketch's exact minimum."""
    hasher = MinHasher(16, seed=5)
    odd = [i for i, a in enumerate(hasher.a) if int(a) & 1]
    k = odd[pick % len(odd)]
    a_low, b_low = int(hasher.a[k]) & MAX_HASH, int(hasher.b[k]) & MAX_HASH
    inverse = pow(a_low, -1, 1 << 32)
    crafted = [((target + off - b_low) * inverse) % (1 << 32) for off in offsets]
    hashes = np.array(randoms + crafted, dtype=np.uint64)
    assert np.array_equal(hasher.hash_values(hashes).astype(np.uint64), exact_hash_values(hasher, hashes))
    # the same shingles as texts hashed together (``signatures``' path for short texts): the crafted ones in one text
    texts = [part for part in (hashes[: len(randoms) // 2], hashes[len(randoms) // 2 : len(randoms)], hashes[len(randoms) :]) if len(part)]
    together = hasher._short_values(np.concatenate(texts), np.array([len(t) for t in texts]))
    assert np.array_equal(together.astype(np.uint64), np.array([exact_hash_values(hasher, t) for t in texts]))


def test_hash_values_exact_across_blocks():
    hasher = MinHasher(128, seed=2)
    hashes = np.random.default_rng(0).integers(0, 1 << 32, 5000, dtype=np.uint64)
    assert np.array_equal(hasher.hash_values(hashes).astype(np.uint64), exact_hash_values(hasher, hashes))
    assert np.array_equal(hasher.hash_values(hashes[:1]).astype(np.uint64), exact_hash_values(hasher, hashes[:1]))


def test_normalisation_ignores_case_punctuation_and_spacing():
    assert normalize("Hello,  World!\n\nIt's   ME.") == "hello world its me"
    assert normalized_bytes("  Hello,\u00a0World\u2019s\x1cend  ") == b"hello worlds end"
    assert shingles("A b. c d e", 5) == [b"a b c d e"]
    assert shingles("", 5) == []


@pytest.mark.parametrize("base_hash", BASE_HASHES)
def test_empty_text_has_empty_signature(base_hash):
    assert (MinHasher(16, base_hash=base_hash).signature(" ,. ") == MAX_HASH).all()


def test_unknown_base_hash_is_refused():
    with pytest.raises(ValueError, match="base_hash"):
        MinHasher(16, base_hash="md5")
    with pytest.raises(ValueError, match="32-bit"):
        MinHasher(16).hash_values(np.array([1 << 40], dtype=np.uint64))


def test_lsh_params_and_s_curve():
    bands, rows = lsh_params(0.8, 128)
    assert bands * rows <= 128
    assert candidate_probability(0.9, bands, rows) > 0.9
    assert candidate_probability(0.5, bands, rows) < 0.1
    probabilities = [candidate_probability(s / 10, bands, rows) for s in range(1, 11)]
    assert probabilities == sorted(probabilities) and probabilities[-1] == 1.0
    table = s_curve_table(bands, rows).splitlines()
    assert f"{bands} bands x {rows} rows" in table[0]
    assert table[1:] == [f"  s={s / 10:.1f}  P={p:.4f}" for s, p in zip(range(1, 11), probabilities)]
    assert lsh_params(0.5, 128)[1] < rows  # a lower threshold needs fewer rows per band


def test_lsh_params_are_datasketchs():
    from datasketch import MinHashLSH
    from datasketch.lsh import _optimal_param

    for threshold, num_perm in ((0.8, 128), (0.7, 256), (0.5, 64)):
        lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        assert lsh_params(threshold, num_perm) == (lsh.b, lsh.r)
    # our own quadrature, datasketch's choice: every threshold, signature size and weighting a config can ask for, about
    for num_perm in (8, 16, 32, 64, 100, 128, 200, 256):
        for threshold in (0.05 * i for i in range(1, 20)):
            for fn_weight in (0.1, 0.5, 0.9):
                expected = _optimal_param(threshold, num_perm, 1.0 - fn_weight, fn_weight)
                assert lsh_params(threshold, num_perm, 1.0 - fn_weight, fn_weight) == expected, (threshold, num_perm, fn_weight)


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
    assert len(shingle_set(a)) == len(sa)
    assert jaccard(shingle_set(""), shingle_set("")) == 1.0


def test_every_word_position_has_an_odd_multiplier():
    """Odd multipliers are invertible mod 2^64: a shingle's hash changes whenever any one word's hash changes."""
    assert all(_position_key(position) % 2 == 1 for position in range(64))
    assert len({_position_key(position) for position in range(64)}) == 64
