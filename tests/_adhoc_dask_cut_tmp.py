import time
from apache_beam.options.pipeline_options import PipelineOptions
from test_bert_examples import parquet_documents, vocab_dir  # noqa: F401
from corpusforge.core.config import BertConfig, RunConfig, ShardsConfig
from corpusforge.pipeline.examples_stage import write_bert_shards
from corpusforge.pipeline.options import pipeline_options
import corpusforge.shards.writer as writer


def test_adhoc(parquet_documents, vocab_dir, tmp_path, monkeypatch):
    from dask.distributed import Client, LocalCluster
    bert = BertConfig(dupe_factor=2, partner_bucket_size=8)
    shards = ShardsConfig(max_examples=700, sort_bucket_bytes=256 * 1024)
    t = time.perf_counter()
    local = write_bert_shards(PipelineOptions([], runner="DirectRunner", direct_running_mode="in_memory"), parquet_documents, vocab_dir, tmp_path / "l", bert, shards, seed=5)
    print("TIME in_memory", time.perf_counter() - t)
    t = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster):
        print("TIME cluster", time.perf_counter() - t)
        def refuse(*a, **k):
            raise AssertionError("cut in the launcher")
        monkeypatch.setattr(writer, "write_shard", refuse)
        run = RunConfig(runner="DaskRunner", beam_args=[f"--dask_client_address={cluster.scheduler_address}"])
        t = time.perf_counter()
        d = write_bert_shards(pipeline_options(run), parquet_documents, vocab_dir, tmp_path / "d", bert, shards, seed=5, work=str(tmp_path / "w"), cut_on_workers=True)
        print("TIME dask", time.perf_counter() - t, len(d["shards"]))
    assert d == local
