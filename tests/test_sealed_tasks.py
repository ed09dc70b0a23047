"""Sealed Dask tasks: the same results, and unpickled where Dask unpickles a task it is sent (the worker's loop)."""

from __future__ import annotations

import threading

import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef
from distributed import Client, LocalCluster

from corpusforge.pipeline.sealed_tasks import run_sealed, seal


def _add(a: int, b: int) -> int:
    return a + b


def _unpickled_here() -> int:
    return threading.get_ident()


class _Where:
    """Becomes, when unpickled, the id of the thread that unpickled it."""

    def __reduce__(self):
        return (_unpickled_here, ())


def _where(unpickled_in: int) -> tuple[int, int]:
    return unpickled_in, threading.get_ident()


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def test_a_sealed_graph_gives_the_same_results_with_its_dependencies_and_aliases(client: Client) -> None:
    graph = {
        "one": DataNode("one", 1),
        "two": Task("two", _add, TaskRef("one"), 1),
        "sum": Task("sum", _add, TaskRef("two"), TaskRef("one")),
        "named": Alias("named", "sum"),
    }
    sealed = seal(graph)
    assert all(node.func is run_sealed for key, node in sealed.items() if key != "named")
    assert isinstance(sealed["named"], Alias) and sealed["sum"].dependencies == graph["sum"].dependencies
    assert client.get(sealed, ["two", "sum", "named"]) == client.get(graph, ["two", "sum", "named"]) == [2, 3, 3]


def test_a_sealed_task_is_unpickled_on_the_workers_event_loop_not_where_it_runs(client: Client) -> None:
    """Beam imported in two threads at once can fail: a task is unpickled on the loop thread, as Dask's own are."""
    unpickled_in, ran_in = client.get(seal({"where": Task("where", _where, _Where())}), "where")
    (loop_thread,) = client.run(threading.get_ident).values()  # ``Client.run`` calls on the worker's loop thread
    assert unpickled_in == loop_thread != ran_in
