"""What the build's forkserver imports once, so that every worker it forks starts with it loaded
(``forked_workers``): imported by the server for its side effects alone.

The imports run with the collector paused (``collector.paused``: 0.4 CPU-s less), and what they loaded (Beam, numpy,
pyarrow, our steps: ~245k objects) is then frozen out of the collector's sight: the workers fork with it frozen,
and the server's own exit at the end of each build, which the launcher waits for, no longer walks it all (0.73 s
measured, every build on the default runner).
"""

import gc
import importlib

from corpusforge.pipeline import collector

MODULES = (
    "apache_beam.runners.worker.sdk_worker_main",
    "corpusforge.pipeline.forked_workers",
    "corpusforge.pipeline.documents_job",
    "corpusforge.pipeline.examples_stage",
    "corpusforge.pipeline.webtext",
)

with collector.paused():
    for _name in MODULES:
        importlib.import_module(_name)
gc.freeze()
