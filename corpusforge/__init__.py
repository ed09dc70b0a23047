"""corpusforge: command line and typed configuration shared by corpora, pipeline, shards and trainer."""

__version__ = "0.1.0"
