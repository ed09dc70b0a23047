"""Where everything lives under a build's output folder: the one owner of every sub-folder name.

OUT/
  documents/part-*.parquet, rejects/part-*.parquet   the documents stage
  vocab/<kind>/                                      the vocab stage (wordpiece, bpe)
  shards/<format>/                                   the example stages (bert, gpt)
  train/<model>/                                     the train stage
  webtext/warc/                                      WebText's WARC captures (unless webtext.warc_dir)
  manifest.json, report.html                         the run's summary, removed first and written last
  .stages/<stage>.json, .stages/build.lock           stage markers, the single-writer lock
  .work/<stage>/                                     spill, shuffle and sort files of a running stage
                                                     (``run.temp_location`` moves them elsewhere)
"""

from __future__ import annotations

from dataclasses import dataclass

from corpusforge.core import storage

MANIFEST = "manifest.json"
REPORT = "report.html"
MARKERS = ".stages"
WORK = ".work"
DOCUMENTS = "documents"
REJECTS = "rejects"


@dataclass(frozen=True)
class Layout:
    out: str  # resolved: an absolute local path or a URI
    temp: str  # spill/shuffle/sort area of running stages

    @classmethod
    def at(cls, output_dir: storage.PathLike, temp_location: storage.PathLike | None = None) -> Layout:
        out = storage.resolve(output_dir)
        return cls(out, storage.resolve(temp_location) if temp_location else storage.join(out, WORK))

    def path(self, *parts: str) -> str:
        return storage.join(self.out, *parts)

    @property
    def documents(self) -> str:
        return self.path(DOCUMENTS)

    @property
    def rejects(self) -> str:
        return self.path(REJECTS)

    def vocab(self, kind: str) -> str:
        return self.path("vocab", kind)

    @property
    def vocab_root(self) -> str:
        return self.path("vocab")

    def shards(self, task: str) -> str:
        return self.path("shards", task)

    @property
    def shards_root(self) -> str:
        return self.path("shards")

    @property
    def captures(self) -> str:
        """WebText's WARC captures of fetched pages (``webtext.warc_dir`` moves them)."""
        return self.path("webtext", "warc")

    def train(self, model: str) -> str:
        return self.path("train", model)

    @property
    def manifest(self) -> str:
        return self.path(MANIFEST)

    @property
    def report(self) -> str:
        return self.path(REPORT)

    @property
    def markers(self) -> str:
        return self.path(MARKERS)

    def marker(self, stage: str) -> str:
        return self.path(MARKERS, f"{stage}.json")

    @property
    def lock(self) -> str:
        return self.path(MARKERS, "build.lock")

    def work(self, stage: str) -> str:
        """The running stage's spill/shuffle/sort folder, removed when the stage ends."""
        return storage.join(self.temp, stage)

    def relative(self, path: storage.PathLike) -> str:
        return storage.relative(path, self.out)

    def is_build_folder(self) -> bool:
        return storage.is_dir(self.documents) or storage.is_dir(self.shards_root)


def build_folder_of(path: storage.PathLike) -> str | None:
    """The build folder a shard folder (``OUT/shards/<format>``) sits in, or None when it is not in one."""
    text = storage.resolve(path)
    parent = storage.parent(text)
    return storage.parent(parent) if storage.name(parent) == "shards" else None
