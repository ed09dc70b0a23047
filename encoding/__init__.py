"""Beam-free builders of model inputs: vocabularies, sentence tokens, BERT and GPT examples.

Pure functions over documents and numpy arrays; ``pipeline`` runs them at scale, tests and
benchmarks call them directly.
"""
