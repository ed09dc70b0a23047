"""Apache Beam transforms and jobs that compose the corpora readers at any scale."""
