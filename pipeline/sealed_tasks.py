"""A job's Dask tasks sealed for the scheduler: each task's code and arguments pickled into bytes it forwards.

Dask's scheduler unpickles the whole graph it is sent, so it imported Beam, the runner and the job's steps (the
modules a task's DoFns name: ~2.2 CPU-s, on a 2-core cluster the cores the launcher and the workers were importing
on), held every task's objects, then pickled each one again to send it to a worker. A sealed task is the same key
and the same dependencies around the original task pickled once by the launcher; only the worker that runs it
unpickles it. The scheduler then needs nothing of the job's environment but this module, which imports no more
than the standard library and Dask.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import cloudpickle
from dask._task_spec import Alias, GraphNode, Task, TaskRef


def seal(graph: Mapping) -> dict:
    """The graph with every node but an alias (which names only a key) replaced by its sealed task."""
    sealed = {}
    for key, node in graph.items():
        if not isinstance(node, GraphNode) or isinstance(node, Alias):
            sealed[key] = node
            continue
        keys = tuple(node.dependencies)
        blob = cloudpickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)
        sealed[key] = Task(key, run_sealed, blob, keys, *map(TaskRef, keys), _data_producer=node.data_producer)
    return sealed


def run_sealed(blob: bytes, keys: tuple, *values: object) -> object:
    """The sealed task's result, from the values of its dependencies (``keys``, in that order)."""
    node = pickle.loads(blob)
    return node(dict(zip(keys, values)))
