"""Check a shard directory end to end before hours of training depend on it.

Every problem is one line naming the file; an empty list means the directory is sound. Checked:
manifest validity, shard names, no missing shards, no stray ``*.arrow`` or half-written ``*.tmp-*``
files, each shard's size, sha256, schema, example and token counts and basic value sanity, the
totals, and the vocabulary file's checksum and id type.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from corpusforge.core.files import WORK_DIR, sha256_file
from corpusforge.shards.format import MANIFEST_NAME, SHARD_PATTERN, id_type
from corpusforge.shards.reader import Manifest, ShardEntry, ShardError, column_view, open_shard, read_manifest


def verify(directory: Path, *, progress: bool = False, vocab: Path | None = None) -> list[str]:
    """Every problem of ``directory``, one line each; ``vocab`` replaces the manifest's vocabulary path."""
    directory = Path(directory)
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
        problems += _check_shard(manifest, entry, schema)
    for key, actual in (("examples", manifest.examples), ("tokens", manifest.tokens)):
        if manifest.totals.get(key) != actual:
            problems.append(f"{directory / MANIFEST_NAME}: totals.{key} is {manifest.totals.get(key)}, shards add up to {actual}")
    return problems


def _check_files(manifest: Manifest) -> list[str]:
    problems = []
    listed = [entry.file for entry in manifest.shards]
    if len(set(listed)) != len(listed):
        problems.append(f"{manifest.root / MANIFEST_NAME}: a shard file is listed twice")
    for index, name in enumerate(listed):
        wanted = SHARD_PATTERN.format(index=index, count=len(listed))
        if name != wanted:
            problems.append(f"{manifest.root / name}: listed as shard {index}, expected the name {wanted}")
        if not (manifest.root / name).is_file():
            problems.append(f"{manifest.root / name}: shard file missing")
    for path in sorted(manifest.root.iterdir()):
        stray = path.name not in listed and (path.name.endswith(".arrow") or ".tmp-" in path.name)
        if stray:
            problems.append(f"{path}: not in the manifest (a leftover or half-written file)")
        elif path.is_dir() and path.name.startswith(".sort-"):
            problems.append(f"{path}: spill folder of an interrupted build (the next build removes it)")
    build_work = manifest.root.parent.parent / WORK_DIR
    if manifest.root.parent.name == "shards" and build_work.is_dir():
        problems.append(f"{build_work}: spill folder of an interrupted build (the next build removes it)")
    return problems


def _check_vocab(manifest: Manifest) -> list[str]:
    path, vocab = manifest.vocab_path(), manifest.vocab
    problems = []
    if manifest.shard_schema.id_type != str(id_type(vocab.size)):
        problems.append(f"{manifest.root / MANIFEST_NAME}: id_type {manifest.shard_schema.id_type} does not fit vocab size {vocab.size}")
    if path.is_dir():
        from corpusforge.encoding.vocab import vocab_sha256  # the build's digest over a vocabulary directory's files

        actual = vocab_sha256(path)
    elif path.is_file():
        actual = sha256_file(path)
    else:
        return problems + [f"{path}: vocabulary missing (shards moved without it? pass --vocab DIR)"]
    if vocab.sha256 and actual != vocab.sha256:
        problems.append(f"{path}: vocabulary sha256 differs from the manifest's")
    return problems


def _check_shard(manifest: Manifest, entry: ShardEntry, schema: pa.Schema) -> list[str]:
    path = manifest.shard_path(entry)
    if not path.is_file():
        return []  # already reported as missing
    try:
        table = open_shard(path, expected=entry, check_sha=True, schema=schema)
    except ShardError as exc:
        return [str(exc)]
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


def _check_bert_values(path: Path, table: pa.Table, length: np.ndarray) -> list[str]:
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
