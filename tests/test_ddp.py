"""Two-process DDP on CPU (gloo): ranks read disjoint examples and train the same model as one process.

DDP on 2 ranks x batch 8 averages the gradients of the two halves of each global batch of 16; one
process with batch 8 accumulating 2 micro-batches sees the same halves (ShardStream hands rank r
slice r of every global batch) and averages the same gradients. With dropout off both must reach the
same weights, up to float summation order.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file
from shard_factory import FIRST_WORD_ID, bert_tokenizer_json, random_bert_columns, write_shards

from corpusforge.core.config import TrainConfig
from corpusforge.trainer.checkpoint import WEIGHTS_NAME, checkpoint_dir
from corpusforge.trainer.distributed import init_world
from corpusforge.trainer.loop import train
from corpusforge.trainer.metrics import read_log
from corpusforge.trainer.prepare import accumulation_steps, make_stream

STEPS = 6


def config(global_batch: int) -> TrainConfig:
    return TrainConfig(
        model="bert-tiny",
        steps=STEPS,
        batch_size=8,
        global_batch_size=global_batch,
        lr=1e-3,
        dropout=0.0,
        num_workers=0,
        log_every=3,
        checkpoint_every=0,
    )


def rank_main(rank: int, port: int, shards: Path, run_dir: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    cfg = config(16)
    train(cfg, shards, run_dir, progress=False)
    world = init_world()  # the group train() joined
    stream = iter(make_stream(cfg, shards, world))
    seen = [int(i) for _ in range(STEPS * accumulation_steps(cfg, world)) for i in next(stream)["input_ids"][:, 1].long() - FIRST_WORD_ID]
    (run_dir / f"examples-rank{rank}.json").write_text(json.dumps(seen))
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data) -> Path:
    directory = tmp_path_factory.mktemp("shards")
    columns = random_bert_columns(400, max_seq_length=32, max_predictions=5, seed=1)
    columns["input_ids"][:, 1] = FIRST_WORD_ID + np.arange(400)  # a readable example id
    tokenizer = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", directory)
    return write_shards(directory, columns, [250, 150], tokenizer_json=tokenizer)


def test_two_rank_ddp_matches_one_process_accumulating(shards, tmp_path):
    mp.spawn(rank_main, args=(free_port(), shards, tmp_path / "ddp"), nprocs=2, join=True)
    torch.set_num_threads(1)
    train(config(16), shards, tmp_path / "single", progress=False)

    seen = [set(json.loads((tmp_path / "ddp" / f"examples-rank{r}.json").read_text())) for r in range(2)]
    assert len(seen[0]) == len(seen[1]) == STEPS * 8 and not seen[0] & seen[1]
    ddp = load_file(str(Path(checkpoint_dir(tmp_path / "ddp", STEPS)) / WEIGHTS_NAME))
    single = load_file(str(Path(checkpoint_dir(tmp_path / "single", STEPS)) / WEIGHTS_NAME))
    for name in ddp:
        assert torch.allclose(ddp[name], single[name], atol=2e-5), name
    # rank 0 logged losses summed over both ranks: the same figures as the single process
    ddp_log, single_log = ([r for r in read_log(tmp_path / run / "metrics.jsonl") if r["split"] == "train"] for run in ("ddp", "single"))
    assert [r["step"] for r in ddp_log] == [3, 6]
    assert [r["loss"] for r in ddp_log] == pytest.approx([r["loss"] for r in single_log], abs=1e-4)
    # both ranks' shares of the held-out set (whole batches, then the rest split) make up exactly the single process's
    ddp_eval, single_eval = (json.loads((tmp_path / run / "eval.json").read_text()) for run in ("ddp", "single"))
    assert ddp_eval["examples"] == single_eval["examples"] == 40  # losses are means of batch means: batches differ, counts do not
    assert (ddp_eval["mlm_accuracy"], ddp_eval["nsp_accuracy"]) == pytest.approx((single_eval["mlm_accuracy"], single_eval["nsp_accuracy"]))
