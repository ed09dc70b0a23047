"""What the build's forkserver imports once, so that every worker it forks starts with it loaded
(``forked_workers``): imported by the server for its side effects alone.

The imports run with the collector paused, and what they loaded (Beam, numpy, pyarrow, our steps: ~245k objects)
is then frozen out of its sight (``collector.import_for_good``): the workers fork with it frozen, and the server's own
exit at the end of each build, which the launcher waits for, no longer walks it all (0.73 s measured, every build on
the default runner).
"""

from corpusforge.pipeline import collector

MODULES = (
    "apache_beam.runners.worker.sdk_worker_main",
    "corpusforge.pipeline.forked_workers",
    "corpusforge.pipeline.documents_job",
    "corpusforge.pipeline.examples_stage",
    "corpusforge.pipeline.webtext",
)

collector.import_for_good(MODULES)
