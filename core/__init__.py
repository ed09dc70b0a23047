"""The ground every layer stands on: the typed configuration, storage, the output layout and stable hashes.

Nothing here imports from corpora, encoding, shards, pipeline, trainer or the orchestration on top.
"""
