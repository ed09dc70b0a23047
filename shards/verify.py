"""Check a shard directory end to end before hours of training depend on it.

Every problem is one line naming the file; an empty list means the directory is sound. Checked:
manifest validity, shard names, no missing shards, no stray ``*.arrow`` or half-written ``*.tmp-*``
files, each shard's size, sha256, schema, example and token counts and basic value sanity, the
totals, and the vocabulary file's checksum and id type.

A folder behind a URI is checked the same way: each object is read once, its size and sha256 compared
with the manifest's on the way, into memory (nothing is kept) or, for the trainer, into its shard cache
so that training reuses the download.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from corpusforge.core import storage
from corpusforge.core.layout import Layout, build_folder_of
from corpusforge.shards.cache import ShardCache, checked_bytes, open_cached
from corpusforge.shards.format import MANIFEST_NAME, SHARD_PATTERN, id_type
from corpusforge.shards.reader import Manifest, ShardEntry, ShardError, column_view, open_shard, read_manifest, read_shard


def verify(
    directory: storage.PathLike, *, progress: bool = False, vocab: storage.PathLike | None = None, cache: ShardCache | None = None
) -> list[str]:
    """Every problem of ``directory``, one line each; ``vocab`` replaces the manifest's vocabulary path.

    ``cache`` keeps a URI folder's downloaded shards (``shards.cache``); without it each is read into memory and dropped.
    """
    directory = os.fspath(directory)
    try:
        manifest = read_manifest(directory, vocab=vocab)
    except ShardError as exc:
        return [str(exc)]
    problems = _check_files(manifest) + _check_vocab(manifest)
    try:
        schema = manifest.arrow_schema()
    except ShardError as exc:
        return problems + [str(exc)]
    for entry in tqdm(manifest.shards, desc="verify", unit="shard", disable=None if progress else True):
        problems += _check_shard(manifest, entry, schema, cache)
    for key, actual in (("examples", manifest.examples), ("tokens", manifest.tokens)):
        if manifest.totals.get(key) != actual:
            problems.append(
                f"{storage.join(directory, MANIFEST_NAME)}: totals.{key} is {manifest.totals.get(key)}, shards add up to {actual}"
            )
    return problems


def what_verify_checks(directory: storage.PathLike, *, vocab: storage.PathLike | None = None) -> str:
    """What ``verify`` found sound in ``directory``, in one line, so that an OK says what it stands for."""
    manifest = read_manifest(os.fspath(directory), vocab=vocab)
    width = manifest.arrow_schema().field("input_ids").type.list_size
    bert = "; BERT segment lengths, masked positions and weights, NSP labels" if manifest.task == "bert" else ""
    vocab_sha = "sha256 and " if manifest.vocab.sha256 else ""
    return (
        f"{len(manifest.shards):,} shards, {manifest.examples:,} examples, {manifest.tokens:,} tokens: "
        "every listed file present and named in order, no stray, half-written or spill files; "
        f"sizes and sha256 match the manifest; Arrow schema, example and token counts, no nulls, lengths within 1..{width}{bert}; "
        f"totals; vocabulary {vocab_sha}id type"
    )


def _check_files(manifest: Manifest) -> list[str]:
    problems = []
    root = manifest.root
    listed = [entry.file for entry in manifest.shards]
    if len(set(listed)) != len(listed):
        problems.append(f"{storage.join(root, MANIFEST_NAME)}: a shard file is listed twice")
    for index, name in enumerate(listed):
        wanted = SHARD_PATTERN.format(index=index, count=len(listed))
        if name != wanted:
            problems.append(f"{storage.join(root, name)}: listed as shard {index}, expected the name {wanted}")
        if not storage.is_file(storage.join(root, name)):
            problems.append(f"{storage.join(root, name)}: shard file missing")
    for name in [storage.name(found) for found in storage.listdir(root)]:
        path = storage.join(root, name)  # as the caller spelled the folder
        if name not in listed and (name.endswith(".arrow") or ".tmp-" in name):
            problems.append(f"{path}: not in the manifest (a leftover or half-written file)")
        elif name.startswith(".sort-") and storage.is_dir(path):
            problems.append(f"{path}: spill folder of an interrupted build (the next build removes it)")
    build = build_folder_of(root)
    work = Layout.at(build).temp if build is not None else None
    if work is not None and storage.is_dir(work):
        problems.append(f"{work}: spill folder of an interrupted build (the next build removes it)")
    return problems


def _check_vocab(manifest: Manifest) -> list[str]:
    path, vocab = manifest.vocab_path(), manifest.vocab
    problems = []
    if manifest.shard_schema.id_type != str(id_type(vocab.size)):
        problems.append(
            f"{storage.join(manifest.root, MANIFEST_NAME)}: id_type {manifest.shard_schema.id_type} does not fit vocab size {vocab.size}"
        )
    if storage.is_dir(path):
        from corpusforge.encoding.vocab import vocab_sha256  # the build's digest over a vocabulary directory's files

        actual = vocab_sha256(path)
    elif storage.is_file(path):
        actual = storage.sha256(path)
    else:
        return problems + [f"{path}: vocabulary missing (shards moved without it? pass --vocab DIR)"]
    if vocab.sha256 and actual != vocab.sha256:
        problems.append(f"{path}: vocabulary sha256 differs from the manifest's")
    return problems


def _check_shard(manifest: Manifest, entry: ShardEntry, schema: pa.Schema, cache: ShardCache | None) -> list[str]:
    path = manifest.shard_path(entry)
    if not storage.is_file(path):
        return []  # already reported as missing
    try:
        if storage.is_local(path):
            table = open_shard(path, expected=entry, check_sha=True, schema=schema)
        elif cache is None:  # streamed into memory, size and sha256 checked on the way
            table = read_shard(path, checked_bytes(path, entry.sha256, entry.bytes), expected=entry, schema=schema)
        else:  # downloaded into the cache, checked the same way, for the training that follows
            table = open_cached(manifest, entry, cache, schema=schema)
    except ShardError as exc:
        return [str(exc)]
    return _check_table(manifest, entry, table)


def _check_table(manifest: Manifest, entry: ShardEntry, table: pa.Table) -> list[str]:
    """Nulls, token counts and value ranges of an opened shard."""
    path = manifest.shard_path(entry)
    problems = [f"{path}: column {name} has nulls" for name in table.column_names if table.column(name).null_count]
    if problems:
        return problems
    length = column_view(table, "length").astype(np.int64)
    width = table.schema.field("input_ids").type.list_size
    if int(length.sum()) != entry.tokens:
        problems.append(f"{path}: {int(length.sum())} tokens, manifest says {entry.tokens}")
    if len(length) and (length.min() < 1 or length.max() > width):
        problems.append(f"{path}: a length outside 1..{width}")
    if manifest.task == "bert":
        problems += _check_bert_values(path, table, length)
    return problems


def _check_bert_values(path: str, table: pa.Table, length: np.ndarray) -> list[str]:
    problems = []
    a_length = column_view(table, "a_length").astype(np.int64)
    if np.any(a_length >= length) or np.any(a_length < 2):
        problems.append(f"{path}: an a_length outside 2..length-1")
    weights = column_view(table, "masked_lm_weights")
    positions = column_view(table, "masked_lm_positions").astype(np.int64)
    if not np.isin(weights, (0.0, 1.0)).all():
        problems.append(f"{path}: masked_lm_weights other than 0.0 and 1.0")
    if np.any((weights > 0) & (positions >= length[:, None])):
        problems.append(f"{path}: a masked_lm_position past the example's length")
    if not np.isin(column_view(table, "next_sentence_label"), (0, 1)).all():
        problems.append(f"{path}: next_sentence_label other than 0 and 1")
    return problems
