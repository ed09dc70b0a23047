"""Vectorised MinHash signatures over word n-gram shingles, provably equal to datasketch's.

A signature is ``datasketch.MinHash(num_perm, seed, hashfunc=self.hashfunc, scheme="legacy")``
after ``update_batch(shingles(text, ngram))``, value for value (tested on random texts and books):
each shingle (the UTF-8 bytes of a word n-gram of the normalised text) gets a 32-bit base hash,
then is permuted by ``(a * h + b) mod (2^61 - 1)`` truncated to 32 bits, with ``a, b`` drawn from
``np.random.RandomState(seed)`` exactly as datasketch draws them.

Two base hashes, both plain functions of the shingle's bytes that datasketch accepts as ``hashfunc``:

* ``"wordmix"`` (default): every word gets a 64-bit hash (a polynomial over its bytes, then the
  murmur3 finaliser); a shingle's hash is the finaliser of the position-weighted sum of its word
  hashes, top 32 bits. Word hashes come from one segmented sum over the document's bytes in numpy
  and each shingle reuses its neighbours' word hashes, so no Python runs per shingle or per word.
* ``"sha1"``: datasketch's default ``sha1_hash32``, for signatures bit-compatible with MinHashes
  built by others with datasketch's defaults (about 3x slower than ``"wordmix"``).

The permutation step is shared: the low 32 bits of ``a*h + b`` need only uint32 arithmetic, and the
fold ``mod 2^61 - 1`` adds at most 7 to them, so only each permutation's argmin (and any shingle
within 7 of it) goes through datasketch's exact 64-bit formula (see :meth:`MinHasher.hash_values`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from hashlib import sha1 as _openssl_sha1
from operator import methodcaller
from typing import Literal

import numpy as np

from corpusforge.core.hashing import splitmix64

try:  # CPython's built-in SHA-1 is faster than the OpenSSL one on short inputs; same digest.
    from _sha1 import sha1 as _sha1
except ImportError:  # pragma: no cover - other interpreters
    _sha1 = _openssl_sha1

BaseHash = Literal["wordmix", "sha1"]
BASE_HASHES: tuple[str, ...] = ("wordmix", "sha1")

MERSENNE_PRIME = (1 << 61) - 1
MAX_HASH = (1 << 32) - 1
_U64 = (1 << 64) - 1
_BLOCK = 1024  # shingles per permutation block: 128 x 1024 x 4 bytes stays in L2 cache
_CHUNK_BYTES = 1 << 17  # normalised bytes of the texts ``MinHasher.signatures`` hashes together
_SHORT_BLOCK = 4096  # shingles of short texts permuted together (fewer, larger segmented mins; 2 MB of uint32)
_PUNCT = re.compile(r"[^\w\s]+")
_SPACE = re.compile(r"\s")
_DIGEST = methodcaller("digest")

_BYTE_BASE = 0x9E3779B97F4A7C15  # odd, so its powers are units mod 2^64 and every byte position counts
_LENGTH_KEY = 0xC2B2AE3D27D4EB4F  # separates words whose byte polynomials agree (b"a" vs b"a\x00")
_FMIX_1, _FMIX_2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53  # murmur3's 64-bit finaliser


def _ascii_rules() -> tuple[bytes, bytes]:
    """A bytes.translate table and delete set doing to ASCII what :func:`normalize` does after
    lowercasing: drop what ``_PUNCT`` matches, turn what ``str.split`` splits on into a space."""
    table = bytearray(range(256))
    for code in range(128):
        if chr(code).isspace():
            table[code] = 32
    delete = bytes(code for code in range(128) if _PUNCT.fullmatch(chr(code)))
    return bytes(table), delete


_ASCII_TABLE, _ASCII_DELETE = _ascii_rules()


def normalize(text: str) -> str:
    """Lowercase, strip punctuation, collapse whitespace: edits in markup or spacing are not differences."""
    return " ".join(_PUNCT.sub("", text.lower()).split())


def _normalize_non_ascii(run: bytes) -> bytes:
    return _SPACE.sub(" ", _PUNCT.sub("", run.decode("utf-8"))).encode("utf-8")


_normalize_short_run = lru_cache(maxsize=4096)(_normalize_non_ascii)  # curly quotes, dashes, accents recur
# Quotes, dashes, ellipsis, no-break space and BOM are most of the non-ASCII in English text: a
# bytes.replace per character (exact, as UTF-8 sequences only match at character boundaries) often
# leaves nothing for the per-run pass.
_COMMON_NON_ASCII = tuple(
    (char.encode("utf-8"), _normalize_non_ascii(char.encode("utf-8"))) for char in "\u2019\u201c\u201d\u2018\u2014\u2013\u2026\u00a0\ufeff"
)


def _normalize_non_ascii_runs(data: bytes) -> bytes:
    """Apply :func:`normalize`'s rules to each run of bytes >= 0x80: such a run is whole UTF-8
    characters, since every byte of a multi-byte character is >= 0x80 and no ASCII byte is."""
    high = np.frombuffer(data, dtype=np.uint8) >= 0x80
    edges = np.flatnonzero(np.diff(high, prepend=False, append=False)).tolist()  # run starts, run ends
    pieces, done = [], 0
    for start, end in zip(edges[::2], edges[1::2]):
        run = data[start:end]
        pieces += [data[done:start], _normalize_short_run(run) if end - start <= 16 else _normalize_non_ascii(run)]
        done = end
    pieces.append(data[done:])
    return b"".join(pieces)


def normalized_bytes(text: str) -> bytes:
    """``normalize(text).encode("utf-8")``, several times faster: ASCII goes through one
    ``bytes.translate``, only runs of non-ASCII characters meet the regex (with the same rules),
    and whitespace (now all single spaces) collapses in numpy."""
    data = text.lower().encode("utf-8").translate(_ASCII_TABLE, _ASCII_DELETE)
    if not text.isascii():
        for sequence, replacement in _COMMON_NON_ASCII:
            data = data.replace(sequence, replacement)
        if not data.isascii():
            data = _normalize_non_ascii_runs(data)
    raw = np.frombuffer(data, dtype=np.uint8)
    drop = raw == 32
    drop[1:] &= drop[:-1]  # a space goes when the byte before it is a space too (or it leads)
    out = raw[~drop].tobytes()
    return out[:-1] if out.endswith(b" ") else out


def shingles(text: str, ngram: int = 5) -> list[bytes]:
    """UTF-8 bytes of every word n-gram of the normalised text (one shingle if it is shorter than n)."""
    words = normalize(text).split()
    if not words:
        return []
    return [" ".join(words[i : i + ngram]).encode("utf-8") for i in range(max(1, len(words) - ngram + 1))]


def _word_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and byte lengths of the words of normalised bytes (single spaces between words)."""
    spaces = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 32)
    starts = np.concatenate(([0], spaces + 1))
    lengths = np.concatenate((spaces, [len(data)])) - starts
    return starts, lengths


def _shingle_slices(data: bytes, ngram: int) -> list[bytes]:
    """Same shingles as :func:`shingles`, cut as slices of the normalised bytes (a space byte never
    occurs inside a multi-byte UTF-8 character, so splitting bytes on spaces splits words)."""
    if not data:
        return []
    starts, lengths = _word_bounds(data)
    count = max(1, len(starts) - ngram + 1)
    last = np.minimum(np.arange(count) + ngram - 1, len(starts) - 1)
    ends = starts[last] + lengths[last]
    return list(map(data.__getitem__, map(slice, starts[:count].tolist(), ends.tolist())))


def sha1_hash32(shingle: bytes) -> int:
    """``datasketch.hashfunc.sha1_hash32``: the first 4 SHA-1 digest bytes, little-endian."""
    return int.from_bytes(_sha1(shingle).digest()[:4], "little")


def sha1_hash32_many(items: Sequence[bytes]) -> np.ndarray:
    """:func:`sha1_hash32` of every item, as uint64."""
    digests = b"".join(map(_DIGEST, map(_sha1, items)))
    return np.frombuffer(digests, dtype="<u4")[::5].astype(np.uint64)


# ---- the "wordmix" base hash: scalar reference (datasketch's hashfunc) and its vectorised twin ----


@lru_cache(maxsize=None)
def _position_key(position: int) -> int:
    """Odd multiplier of the word at ``position`` in a shingle: word order changes the hash."""
    return splitmix64(position) | 1


def _fmix64_int(k: int) -> int:
    k ^= k >> 33
    k = (k * _FMIX_1) & _U64
    k ^= k >> 33
    k = (k * _FMIX_2) & _U64
    return k ^ (k >> 33)


def _fmix64(k: np.ndarray) -> np.ndarray:
    """murmur3's finaliser in place on a uint64 array (numpy integer products wrap mod 2^64)."""
    k ^= k >> np.uint64(33)
    k *= np.uint64(_FMIX_1)
    k ^= k >> np.uint64(33)
    k *= np.uint64(_FMIX_2)
    k ^= k >> np.uint64(33)
    return k


def word_hash64(word: bytes) -> int:
    """fmix64(sum_j word[j] * B^j + len(word) * L  mod 2^64)."""
    poly = 0
    for byte in reversed(word):  # Horner's rule from the last byte gives sum_j word[j] * B^j
        poly = (poly * _BYTE_BASE + byte) & _U64
    return _fmix64_int((poly + len(word) * _LENGTH_KEY) & _U64)


def wordmix_hash64(shingle: bytes) -> int:
    """fmix64(sum_i K_i * word_hash64(word_i)  mod 2^64) over the space-separated words."""
    total = sum(_position_key(i) * word_hash64(word) for i, word in enumerate(shingle.split(b" ")))
    return _fmix64_int(total & _U64)


def wordmix_hash32(shingle: bytes) -> int:
    """The ``"wordmix"`` base hash as a datasketch ``hashfunc``: the top 32 bits of :func:`wordmix_hash64`."""
    return wordmix_hash64(shingle) >> 32


_powers = np.ones(1, dtype=np.uint64)  # B^0, B^1, ... grown to the longest word seen


def _byte_powers(count: int) -> np.ndarray:
    global _powers
    if len(_powers) < count:
        grown = np.full(max(count, 2 * len(_powers), 64), _BYTE_BASE, dtype=np.uint64)
        grown[0] = 1
        _powers = np.multiply.accumulate(grown)
    return _powers


def word_hashes64(data: bytes) -> np.ndarray:
    """:func:`word_hash64` of every word of normalised (non-empty) bytes, all at once (``window_hashes64`` combines them): each byte is weighted by
    B^(its offset in its word), and a segmented sum per word gives the polynomials."""
    raw = np.frombuffer(data, dtype=np.uint8)
    starts, lengths = _word_bounds(data)
    word_of_byte_start = np.repeat(starts, lengths + 1)[: len(raw)]  # each word's bytes and the space after it
    terms = _byte_powers(int(lengths.max()) + 1)[np.arange(len(raw)) - word_of_byte_start] * raw
    terms[starts[1:] - 1] = 0  # the separating spaces belong to no word
    poly = np.add.reduceat(terms, starts)
    poly += lengths.astype(np.uint64) * np.uint64(_LENGTH_KEY)
    return _fmix64(poly)


def wordmix_hashes64(data: bytes, ngram: int) -> np.ndarray:
    """:func:`wordmix_hash64` of every shingle of normalised bytes, in shingle order."""
    if not data:
        return np.empty(0, dtype=np.uint64)
    return window_hashes64(word_hashes64(data), ngram)


def window_hashes64(words: np.ndarray, ngram: int) -> np.ndarray:
    """:func:`wordmix_hash64` of every ``ngram``-word window of ``word_hashes64``'s words (one window when fewer)."""
    count = max(1, len(words) - ngram + 1)
    total = words[:count] * np.uint64(_position_key(0))
    for i in range(1, min(ngram, len(words))):
        total += words[i : i + count] * np.uint64(_position_key(i))
    return _fmix64(total)


def wordmix_hashes64_many(datas: Sequence[bytes], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`wordmix_hashes64` of several non-empty normalised texts at once: (their shingle hashes, one text
    after another; shingles per text). Joined by a space, each text's words stay its own words, and a window
    that would run into the next text is cut at its text's end, as ``window_hashes64`` cuts a short text."""
    if len(datas) == 1:  # a long text has a chunk of its own: plain slices, no window index
        hashes = wordmix_hashes64(datas[0], ngram)
        return hashes, np.array([len(hashes)], dtype=np.int64)
    words = word_hashes64(b" ".join(datas))
    counts = np.fromiter((data.count(b" ") + 1 for data in datas), dtype=np.int64, count=len(datas))
    windows = np.maximum(1, counts - ngram + 1)
    widths = np.repeat(np.minimum(ngram, counts), windows)  # words in each window
    first = np.repeat((np.cumsum(counts) - counts) - (np.cumsum(windows) - windows), windows) + np.arange(int(windows.sum()))
    total = words[first] * np.uint64(_position_key(0))
    for i in range(1, ngram):
        inside = np.where(i < widths, words[np.minimum(first + i, len(words) - 1)], np.uint64(0))
        total += inside * np.uint64(_position_key(i))
    return _fmix64(total), windows


def shingle_set(text: str, ngram: int = 5) -> np.ndarray:
    """Sorted unique 64-bit "wordmix" hashes of the shingles: an exact Jaccard barring 64-bit collisions, compact to ship."""
    return np.unique(wordmix_hashes64(normalized_bytes(text), ngram))


def shingle_sets(texts: Iterable[str], ngram: int = 5) -> Iterator[np.ndarray]:
    """:func:`shingle_set` of each text in turn, the word hashes of about ``_CHUNK_BYTES`` of texts computed together."""
    for chunk in _normalised_chunks(texts):
        yield from _chunk_shingle_sets(chunk, ngram)


def _normalised_chunks(texts: Iterable[str]) -> Iterator[list[bytes]]:
    """The texts' :func:`normalized_bytes` in runs of about ``_CHUNK_BYTES`` (a long text ends a run alone or nearly)."""
    chunk: list[bytes] = []
    size = 0
    for data in map(normalized_bytes, texts):
        chunk.append(data)
        size += len(data)
        if size >= _CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _chunk_shingle_sets(datas: list[bytes], ngram: int) -> Iterator[np.ndarray]:
    texts = [data for data in datas if data]
    if texts:
        hashes, counts = wordmix_hashes64_many(texts, ngram)
        pieces = iter(np.split(hashes, np.cumsum(counts)[:-1]))
    for data in datas:
        yield np.unique(next(pieces)) if data else np.empty(0, dtype=np.uint64)


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` of datasketch's legacy scheme, drawn in the same order from the same generator."""
    gen = np.random.RandomState(seed)
    pairs = [(gen.randint(1, MERSENNE_PRIME, dtype=np.uint64), gen.randint(0, MERSENNE_PRIME, dtype=np.uint64)) for _ in range(num_perm)]
    a, b = np.array(pairs, dtype=np.uint64).T
    return np.ascontiguousarray(a), np.ascontiguousarray(b)


class MinHasher:
    """MinHash signatures (uint32, length ``num_perm``) of texts over word ``ngram`` shingles."""

    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5, base_hash: BaseHash = "wordmix") -> None:
        if base_hash not in BASE_HASHES:
            raise ValueError(f"base_hash must be one of {BASE_HASHES}, got {base_hash!r}")
        self.num_perm = num_perm
        self.seed = seed
        self.ngram = ngram
        self.base_hash = base_hash
        self.a, self.b = permutations(num_perm, seed)
        self._a_low = (self.a & np.uint64(MAX_HASH)).astype(np.uint32)[:, None]
        self._b_low_8 = ((self.b + np.uint64(8)) & np.uint64(MAX_HASH)).astype(np.uint32)[:, None]
        self._perm_index = np.arange(num_perm)
        self._z = np.empty((num_perm, _BLOCK), dtype=np.uint32)
        self._short_z = np.empty((num_perm, _SHORT_BLOCK), dtype=np.uint32)

    @property
    def hashfunc(self) -> Callable[[bytes], int]:
        """The scalar base hash to give ``datasketch.MinHash(hashfunc=...)`` for the same signatures."""
        return wordmix_hash32 if self.base_hash == "wordmix" else sha1_hash32

    def base_hashes(self, text: str) -> np.ndarray:
        """The 32-bit base hash of every shingle of ``text`` (as uint64, in shingle order)."""
        data = normalized_bytes(text)
        if self.base_hash == "sha1":
            return sha1_hash32_many(_shingle_slices(data, self.ngram))
        return wordmix_hashes64(data, self.ngram) >> np.uint64(32)

    def hash_values(self, hashes: np.ndarray) -> np.ndarray:
        """Min over shingles of ``((a*h + b) mod p) & MAX_HASH`` for 32-bit hashes ``h``, per permutation.

        With ``y = a*h + b mod 2^64`` (datasketch's wrapping uint64 arithmetic), ``y = hi*2^61 + lo``
        and ``y mod p = lo + hi`` (``hi < 8``) unless that reaches ``p``, which needs the low 32 bits
        ``x`` of ``y`` to be >= 2^32 - 8. So when every ``x`` of a permutation is below that, each value
        is ``x + hi``, in ``[x, x + 7]``, and only shingles with ``x <= min(x) + 7`` can hold the minimum.
        ``x`` needs only the low 32 bits of ``a, b, h``: it is computed for all (permutation, shingle)
        pairs in uint32 (half the memory traffic of uint64, no division), and the exact datasketch
        formula runs on the few candidates: normally one per permutation, the argmin, confirmed alone
        when the runner-up is more than 7 above it. Otherwise (or when some ``x`` of the permutation is
        within 8 of 2^32, so ``x + 8`` wraps below 8) every shingle within the bound is a candidate.
        """
        if len(hashes) and hashes.max() > MAX_HASH:
            raise ValueError("base hashes must be 32-bit: the uint32 search relies on it")
        out = np.full(self.num_perm, MAX_HASH, dtype=np.uint64)
        low = hashes.astype(np.uint32)
        for start in range(0, len(hashes), _BLOCK):
            h = hashes[start : start + _BLOCK]
            z = np.multiply(self._a_low, low[start : start + _BLOCK], out=self._z[:, : len(h)])
            z += self._b_low_8  # x + 8 (mod 2^32)
            rows = z.argmin(axis=1)
            least = z[self._perm_index, rows]
            z[self._perm_index, rows] = MAX_HASH
            runner_up = z.min(axis=1)
            z[self._perm_index, rows] = least
            if (least >= 8).all() and (runner_up - least > 7).all():  # each permutation's minimum is its only candidate
                perms = self._perm_index
            else:
                bound = _candidate_bound(least)
                perms, rows = np.nonzero(z <= bound[:, None])
            exact = self._exact(h[rows], perms)
            np.minimum.at(out, perms, exact)
        return out.astype(np.uint32)

    def _exact(self, hashes: np.ndarray, perms: np.ndarray) -> np.ndarray:
        """datasketch's ``(a*h + b) mod (2^61 - 1)``, low 32 bits, for each (hash, its permutation)."""
        return ((hashes * self.a[perms] + self.b[perms]) % np.uint64(MERSENNE_PRIME)) & np.uint64(MAX_HASH)

    def signature(self, text: str) -> np.ndarray:
        return self.hash_values(self.base_hashes(text))

    def signatures(self, texts: Iterable[str]) -> np.ndarray:
        """Signatures of many texts as a (len(texts), num_perm) uint32 array: each row is ``signature`` of its text.

        Texts are hashed a chunk at a time: a 400-byte page costs more in numpy calls than in arithmetic,
        so a chunk's word hashes are one segmented sum and its short texts' permutations one product per
        block (``_short_values``); a text of many shingles still goes through ``hash_values`` alone."""
        rows = [self._chunk_values(chunk) for chunk in _normalised_chunks(texts)]
        return np.concatenate(rows) if rows else np.empty((0, self.num_perm), dtype=np.uint32)

    def _chunk_values(self, datas: list[bytes]) -> np.ndarray:
        """``signatures`` of normalised texts held together."""
        out = np.full((len(datas), self.num_perm), MAX_HASH, dtype=np.uint32)  # an empty text has no shingle
        rows = np.flatnonzero(np.fromiter(map(len, datas), dtype=np.int64, count=len(datas)))
        if not len(rows):
            return out
        hashes, counts = self._many_base_hashes([datas[row] for row in rows.tolist()])
        short = counts <= _BLOCK
        if short.any():
            out[rows[short]] = self._short_values(hashes[np.repeat(short, counts)], counts[short])
        ends = np.cumsum(counts)
        for k in np.flatnonzero(~short).tolist():
            out[rows[k]] = self.hash_values(hashes[ends[k] - counts[k] : ends[k]])
        return out

    def _many_base_hashes(self, datas: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """The base hashes of several non-empty normalised texts, one after another, and how many each has."""
        if self.base_hash == "sha1":
            per_text = [sha1_hash32_many(_shingle_slices(data, self.ngram)) for data in datas]
            return np.concatenate(per_text), np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))
        hashes, counts = wordmix_hashes64_many(datas, self.ngram)
        return hashes >> np.uint64(32), counts

    def _short_values(self, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``hash_values`` of consecutive texts' base hashes (``counts`` each, none over ``_SHORT_BLOCK``), texts grouped
        into blocks of at most ``_SHORT_BLOCK`` shingles: each text's minimum ``x + 8`` per permutation is a segmented min over
        the block, and every shingle within the bound of ``hash_values`` (normally the argmin alone) then gets the
        exact formula, the least of them kept per (text, permutation)."""
        out = np.full((len(counts), self.num_perm), MAX_HASH, dtype=np.uint64)
        ends = np.cumsum(counts)
        starts = ends - counts
        low = hashes.astype(np.uint32)
        first = 0
        while first < len(counts):
            last = max(int(np.searchsorted(ends, starts[first] + _SHORT_BLOCK, side="right")), first + 1)  # texts first..last-1
            begin, width = int(starts[first]), int(ends[last - 1] - starts[first])
            z = np.multiply(self._a_low, low[begin : begin + width], out=self._short_z[:, :width])
            z += self._b_low_8  # x + 8 (mod 2^32)
            segments = starts[first:last] - begin
            least = np.minimum.reduceat(z, segments, axis=1)
            bound = _candidate_bound(least)
            perms, columns = np.divmod(np.flatnonzero(z <= np.repeat(bound, counts[first:last], axis=1)), width)
            exact = self._exact(hashes[begin + columns], perms)
            texts = first + np.searchsorted(segments, columns, side="right") - 1
            np.minimum.at(out, (texts, perms), exact)
            first = last
        return out.astype(np.uint32)


def _candidate_bound(least: np.ndarray) -> np.ndarray:
    """The largest ``x + 8`` that can still hold the minimum, from the least one (``hash_values``): 7 above it,
    or every shingle when the least wrapped past 2^32 (below 8)."""
    return np.where(least < 8, np.uint32(MAX_HASH), np.minimum(least, np.uint32(MAX_HASH - 7)) + 7)


@lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimising the weighted false positive/negative areas under the S-curve: datasketch's
    ``_optimal_param``, the same choice (``tests/test_minhash.py`` compares them over a grid).

    Its areas are integrals of polynomials of degree bands x rows <= num_perm, which Gauss-Legendre quadrature
    with num_perm / 2 + 1 nodes computes exactly, for every (bands, rows) at once: datasketch integrates each with
    scipy's ``quad``, and importing datasketch (scipy) was half a second of every build's and Beam worker's start.
    """
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)
    pairs = np.array([(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)], dtype=np.float64)
    bands, rows = pairs[:, :1], pairs[:, 1:]

    def area(low: float, high: float, probability: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        half = (high - low) / 2
        return probability(low + half * (nodes + 1)) @ (half * weights)

    false_positive = area(0.0, threshold, lambda s: 1 - (1 - s**rows) ** bands)  # P(candidate) below the threshold
    false_negative = area(threshold, 1.0, lambda s: (1 - s**rows) ** bands)  # P(not candidate) above it
    best = int(np.argmin(false_positive * fp_weight + false_negative * fn_weight))  # the first minimum, as datasketch's loop
    return int(pairs[best, 0]), int(pairs[best, 1])


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """P(two documents share at least one band | Jaccard similarity): 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def s_curve_table(bands: int, rows: int) -> str:
    """The S-curve as a printable table for s = 0.1 .. 1.0, so a run states what it will catch."""
    lines = [f"LSH {bands} bands x {rows} rows: P(candidate | Jaccard s)"]
    lines += [f"  s={s / 10:.1f}  P={candidate_probability(s / 10, bands, rows):.4f}" for s in range(1, 11)]
    return "\n".join(lines)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One key per band: band index + that band's hash values; equal keys make a candidate pair."""
    sig = np.ascontiguousarray(signature, dtype=np.uint32)
    return [band.to_bytes(2, "little") + sig[band * rows : (band + 1) * rows].tobytes() for band in range(bands)]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two :func:`shingle_set` arrays (1.0 for two empty texts: they are equal)."""
    if not len(a) and not len(b):
        return 1.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)
