"""The Arrow shard format: column schemas and manifest layout shared by writer, reader and trainer.

Shards are in the Arrow IPC *streaming* format, one record batch each, uncompressed by default:
memory-mappable, so ``pa.ipc.open_stream(pa.memory_map(path)).read_all()`` gives columns whose
buffers point into the map (zero-copy), and the flavour ``datasets.Dataset.from_file`` reads (it
rejects IPC files). ``compression`` "lz4"/"zstd" trades that zero-copy read for size. Every column
is fixed-size so training shapes are static.

BERT columns (L = max_seq_length, P = max_predictions_per_seq, ids uint16 or int32 if vocab > 65,535):
  input_ids            fixed_size_list<id>[L]   [CLS] A [SEP] B [SEP] then [PAD] (id 0)
  length               uint16                  real tokens; input_mask = position < length
  a_length             uint16                  tokens of "[CLS] A [SEP]"; segment_ids = a_length <= pos < length
  masked_lm_positions  fixed_size_list<uint16>[P]   0-padded
  masked_lm_ids        fixed_size_list<id>[P]       original token at each position, 0-padded
  masked_lm_weights    fixed_size_list<float32>[P]  1.0 for real predictions, 0.0 for padding
  next_sentence_label  int8                    0 = B is the actual next segment, 1 = random (HF convention)

GPT columns (T = seq_len + 1):
  input_ids  fixed_size_list<id>[T]   window of T tokens; padded with <|endoftext|> after `length`
  length     uint32                   real tokens (T except for a flagged final partial window)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
# HF datasets' split naming, so ``load_dataset("arrow", data_dir=SHARDS)`` reads the shards and not manifest.json
SHARD_PATTERN = "train-{index:05d}-of-{count:05d}.arrow"
OLD_SHARD_GLOB = "shard-*-of-*.arrow*"  # what earlier builds named them: cleared like our own


def numpy_dtype(kind: pa.DataType) -> np.dtype:
    """The numpy dtype of a column's values (of its items, for fixed-size lists), without pandas."""
    value = kind.value_type if pa.types.is_fixed_size_list(kind) else kind
    return pa.array([], type=value).to_numpy(zero_copy_only=False).dtype


def id_type(vocab_size: int) -> pa.DataType:
    return pa.uint16() if vocab_size <= 65535 else pa.int32()


def bert_schema(max_seq_length: int, max_predictions_per_seq: int, vocab_size: int) -> pa.Schema:
    ids = id_type(vocab_size)
    return pa.schema(
        [
            ("input_ids", pa.list_(ids, max_seq_length)),
            ("length", pa.uint16()),
            ("a_length", pa.uint16()),
            ("masked_lm_positions", pa.list_(pa.uint16(), max_predictions_per_seq)),
            ("masked_lm_ids", pa.list_(ids, max_predictions_per_seq)),
            ("masked_lm_weights", pa.list_(pa.float32(), max_predictions_per_seq)),
            ("next_sentence_label", pa.int8()),
        ]
    )


def gpt_schema(seq_len: int, vocab_size: int) -> pa.Schema:
    return pa.schema([("input_ids", pa.list_(id_type(vocab_size), seq_len + 1)), ("length", pa.uint32())])


def shard_manifest(task: str, vocab: dict, params: dict, **schema: object) -> dict:
    """A manifest before its shards and totals (``shards.writer`` adds them): the one place its layout is built."""
    return {"format_version": FORMAT_VERSION, "task": task, "params": params, "vocab": vocab, "schema": schema}


# manifest.json layout (written atomically by shards.writer, read by shards.reader):
# {
#   "format_version": 1, "task": "bert" | "gpt",
#   "params": {...all generation parameters...},
#   "vocab": {"kind": "wordpiece" | "bpe", "path": str, "sha256": str, "size": int,
#             "special_ids": {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103} | {"eot": 50256}},
#   "schema": {"max_seq_length"/"seq_len": int, "max_predictions_per_seq": int, "id_type": "uint16"|"int32"},
#   "shards": [{"file": str, "examples": int, "tokens": int, "bytes": int, "sha256": str}, ...],
#   "totals": {"examples": int, "tokens": int, ...counters...}
# }
