"""GLUE tasks in their original files: readers, the official dev metrics, and encoding for BERT.

Formats (as distributed by GLUE, see ../shared/data/glue/SOURCES.md): SST-2 ``sentence<TAB>label``
with a header; CoLA four columns without a header (source, label, original mark, sentence), its
train split optionally in two files (train.tsv + val.tsv together are GLUE's train); MRPC
``Quality, #1 ID, #2 ID, #1 String, #2 String`` with a header (and a UTF-8 BOM). Fields are split on
tabs only: the files are not CSV-quoted (quote characters are part of the text).

Metrics follow GLUE: accuracy (SST-2), Matthews correlation (CoLA), F1 of the positive class and
accuracy (MRPC), written out from their definitions so no scikit-learn is needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from corpusforge.core import storage


@dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    label: int


@dataclass(frozen=True)
class Task:
    name: str
    folder: str
    train_files: tuple[str, ...]  # read in this order and concatenated; missing extras are skipped
    header: bool
    columns: tuple[int, int | None, int]  # text_a, text_b, label
    metric: str  # the headline metric reported as "dev"


TASKS: dict[str, Task] = {
    "sst2": Task("sst2", "SST-2", ("train.tsv",), True, (0, None, 1), "accuracy"),
    "cola": Task("cola", "CoLA", ("train.tsv", "val.tsv"), False, (3, None, 1), "mcc"),
    "mrpc": Task("mrpc", "MRPC", ("train.tsv",), True, (3, 4, 0), "f1"),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def read_tsv(path: storage.PathLike, task: Task) -> list[Example]:
    """One file of ``task``; a malformed row fails naming the file and line."""
    lines = storage.read_bytes(path).decode("utf-8-sig").splitlines()
    a_col, b_col, label_col = task.columns
    examples = []
    for number, line in enumerate(lines[1:] if task.header else lines, start=2 if task.header else 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        try:
            label = int(fields[label_col])
            example = Example(fields[a_col].strip(), fields[b_col].strip() if b_col is not None else None, label)
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{number}: not a {task.folder} row ({len(fields)} tab-separated fields)") from None
        if label not in (0, 1):
            raise ValueError(f"{path}:{number}: label {label} is not 0 or 1")
        examples.append(example)
    return examples


def task_files(glue_dir: storage.PathLike, task: Task) -> tuple[list[str], str]:
    """(train files, dev file) of ``task`` under ``glue_dir`` (the folder holding SST-2/, CoLA/, MRPC/, or the task folder itself)."""
    folder = glue_dir if storage.name(glue_dir) == task.folder else storage.join(glue_dir, task.folder)
    first, dev = storage.join(folder, task.train_files[0]), storage.join(folder, "dev.tsv")
    for needed in (first, dev):
        if not storage.is_file(needed):
            raise FileNotFoundError(f"{needed}: GLUE {task.folder} file not found (--glue-dir is the folder holding {task.folder}/)")
    extras = [storage.join(folder, name) for name in task.train_files[1:] if storage.is_file(storage.join(folder, name))]
    return [first, *extras], dev


def load_task(glue_dir: storage.PathLike, task: Task) -> tuple[list[Example], list[Example]]:
    train_files, dev_file = task_files(glue_dir, task)
    return [e for path in train_files for e in read_tsv(path, task)], read_tsv(dev_file, task)


def subset(examples: Sequence[Example], count: int | None, seed: int) -> list[Example]:
    """``count`` examples drawn without replacement by ``seed``, kept in file order (all when None or more)."""
    if count is None or count >= len(examples):
        return list(examples)
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=count, replace=False))
    return [examples[i] for i in keep]


def encode(examples: Sequence[Example], tokenizer: Tokenizer, special_ids: dict[str, int], max_seq_length: int) -> dict[str, torch.Tensor]:
    """``[CLS] a [SEP] (b [SEP])`` padded to the longest row, pairs truncated longest-first as BERT does."""
    cls, sep, pad = special_ids["cls"], special_ids["sep"], special_ids["pad"]
    rows, types = [], []
    for example in examples:
        a = tokenizer.encode(example.text_a, add_special_tokens=False).ids
        b = tokenizer.encode(example.text_b, add_special_tokens=False).ids if example.text_b is not None else None
        budget = max_seq_length - (3 if b is not None else 2)
        while len(a) + len(b or []) > budget:
            if b is not None and len(b) > len(a):
                b.pop()
            else:
                a.pop()
        ids = [cls, *a, sep] + ([*b, sep] if b is not None else [])
        rows.append(ids)
        types.append([0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2))
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, segment) in enumerate(zip(rows, types)):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        token_type_ids[i, : len(ids)] = torch.tensor(segment)
    lengths = torch.tensor([len(ids) for ids in rows])
    attention_mask = torch.arange(width)[None, :] < lengths[:, None]
    labels = torch.tensor([e.label for e in examples], dtype=torch.long)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask, "labels": labels}


def confusion(predictions: Sequence[int], labels: Sequence[int]) -> tuple[int, int, int, int]:
    """(true positives, true negatives, false positives, false negatives) of binary predictions."""
    p, y = np.asarray(predictions), np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"{p.shape[0]} predictions for {y.shape[0]} labels")
    return (
        int(((p == 1) & (y == 1)).sum()),
        int(((p == 0) & (y == 0)).sum()),
        int(((p == 1) & (y == 0)).sum()),
        int(((p == 0) & (y == 1)).sum()),
    )


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    tp, tn, fp, fn = confusion(predictions, labels)
    return (tp + tn) / max(tp + tn + fp + fn, 1)


def matthews(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """(TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when a marginal is empty (a constant guess)."""
    tp, tn, fp, fn = confusion(predictions, labels)
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def f1(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """F1 of the positive class (MRPC's "paraphrase"): 2TP / (2TP + FP + FN)."""
    tp, _, fp, fn = confusion(predictions, labels)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


METRICS: dict[str, Callable[[Sequence[int], Sequence[int]], float]] = {"accuracy": accuracy, "mcc": matthews, "f1": f1}
TASK_METRICS: dict[str, tuple[str, ...]] = {"sst2": ("accuracy",), "cola": ("mcc", "accuracy"), "mrpc": ("f1", "accuracy")}


def score(task: Task, predictions: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    """The task's official dev metrics, headline first."""
    return {name: METRICS[name](predictions, labels) for name in TASK_METRICS[task.name]}


def majority_baseline(task: Task, labels: Sequence[int]) -> dict[str, float | int]:
    """The task's metrics of always answering the most frequent label: what a model that learnt nothing scores
    (SST-2 dev accuracy 0.509, CoLA MCC 0 whatever the label, MRPC F1 0.812)."""
    majority = int(2 * sum(labels) >= len(labels))
    return {"label": majority, **score(task, [majority] * len(labels), labels)}
