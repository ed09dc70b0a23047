"""What a person watching a build sees: the current stage, its counters, and an ETA when the total is known.

On a terminal a live rich view (one row per stage: spinner, bar, counters, elapsed time, time left);
when the output is piped, plain log lines: one when a stage starts, one when it ends, and the counters
every ``interval_s`` seconds while it runs. The build only calls the two module-level functions:

    with progress.stage("vocab", total=None):
        ...
        progress.count("documents", n)

Without ``display()`` around the build (library use, tests) the stage lines still go to the
``corpusforge.progress`` logger, which the default WARNING level keeps quiet.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

log = logging.getLogger("corpusforge.progress")


@dataclass
class Stage:
    """One running stage: its counters, and the counter ``unit`` that advances toward ``total``."""

    name: str
    total: int | None = None
    unit: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    polled: dict[str, int] = field(default_factory=dict)  # the live counters ``stage(poll=...)`` read from files

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def describe(self) -> str:
        return ", ".join(f"{name} {value:,}" for name, value in self.counters.items())


class LogReporter:
    """Plain lines for logs and pipes: start, end, and the counters every ``interval_s`` seconds."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self._tickers: dict[int, tuple[threading.Event, threading.Thread]] = {}

    def started(self, stage: Stage) -> None:
        log.info("stage %s started%s", stage.name, f" ({stage.total:,} {stage.unit or 'items'})" if stage.total else "")
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(stage, stop), daemon=True, name=f"progress-{stage.name}")
        self._tickers[id(stage)] = (stop, ticker)
        ticker.start()

    def counted(self, stage: Stage) -> None:
        """Counters are reported by the ticker, not per call: a hot loop must not flood the log."""

    def finished(self, stage: Stage, failed: bool) -> None:
        stop, ticker = self._tickers.pop(id(stage))
        stop.set()
        ticker.join()
        counters = f": {stage.describe()}" if stage.counters else ""
        log.info("stage %s %s after %.1fs%s", stage.name, "FAILED" if failed else "done", stage.elapsed, counters)

    def close(self) -> None:
        """Stages end (and stop their tickers) in ``stage()``'s finally: nothing is left running."""

    def _tick(self, stage: Stage, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            log.info("stage %s running for %.0fs%s", stage.name, stage.elapsed, _eta_text(stage))


def _eta_text(stage: Stage) -> str:
    text = f": {stage.describe()}" if stage.counters else ""
    done = stage.counters.get(stage.unit or "", 0)
    if stage.total and done:
        left = stage.elapsed * (stage.total - done) / done
        text += f" ({done / stage.total:.0%} of {stage.total:,}, about {left:.0f}s left)"
    return text


class _NotATerminal:
    """stderr as libraries see it under the live view: not a terminal, so tqdm (``disable=None``) and
    similar bars stay quiet instead of printing their frames as lines above the view."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class LiveReporter:
    """A rich live view on a terminal: finished stages stay listed with their time and counters."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("[bold]{task.description:<10}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[counters]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            refresh_per_second=4,
        )
        self._tasks: dict[int, TaskID] = {}
        self._progress.start()
        self._stderr = sys.stderr
        sys.stderr = _NotATerminal(sys.stderr)  # type: ignore[assignment]

    def started(self, stage: Stage) -> None:
        self._tasks[id(stage)] = self._progress.add_task(stage.name, total=stage.total, counters="")

    def counted(self, stage: Stage) -> None:
        completed = stage.counters.get(stage.unit or "") if stage.total else None
        self._progress.update(self._tasks[id(stage)], counters=stage.describe(), completed=completed)

    def finished(self, stage: Stage, failed: bool) -> None:
        task = self._tasks.pop(id(stage))
        counters = stage.describe() + (" [red]failed[/]" if failed else "")
        total = stage.total or 1
        self._progress.update(task, counters=counters, total=total, completed=total if not failed else None)
        self._progress.stop_task(task)

    def close(self) -> None:
        sys.stderr = self._stderr
        self._progress.stop()


_reporter: LogReporter | LiveReporter = LogReporter()
_current: list[Stage] = []


@contextlib.contextmanager
def stage(
    name: str, total: int | None = None, unit: str | None = None, poll: Callable[[], dict[str, int]] | None = None
) -> Iterator[Stage]:
    """A build stage: reported when it starts and ends (and failed, if it raises).

    ``poll`` (optional) returns counters read from what the stage has written so far; it is called
    every ``POLL_S`` seconds while the stage runs, so work done in Beam's worker processes (or on a
    cluster) shows up without the workers reporting to us. Polled counters are live figures only:
    the line a finished stage leaves holds what the stage itself counted.
    """
    current = Stage(name, total, unit)
    _current.append(current)
    _reporter.started(current)
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(current, poll, stop), daemon=True, name=f"poll-{name}") if poll else None
    if poller:
        poller.start()
    failed = True
    try:
        yield current
        failed = False
    finally:
        if poller:
            stop.set()
            poller.join()
            for key in poll_keys(current):
                del current.counters[key]
        _current.remove(current)
        _reporter.finished(current, failed)


POLL_S = 1.0


def _poll(current: Stage, poll: Callable[[], dict[str, int]], stop: threading.Event) -> None:
    while not stop.wait(POLL_S):
        try:
            polled = poll()
        except OSError:  # a folder removed while it was counted: next time
            continue
        current.polled.update(polled)
        current.counters.update(polled)
        _reporter.counted(current)


def poll_keys(current: Stage) -> list[str]:
    return [key for key in current.polled if key in current.counters]


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` of the innermost running stage (ignored outside a stage)."""
    if not _current:
        return
    current = _current[-1]
    current.counters[name] = current.counters.get(name, 0) + int(n)
    _reporter.counted(current)


@contextlib.contextmanager
def display(console: Console, *, live: bool | None = None, interval_s: float = 30.0) -> Iterator[None]:
    """Report stages live on ``console`` when it is a terminal (or ``live``), else as log lines."""
    global _reporter
    previous = _reporter
    use_live = console.is_terminal if live is None else live
    _reporter = LiveReporter(console) if use_live else LogReporter(interval_s)
    try:
        yield
    finally:
        _reporter.close()
        _reporter = previous


# What Beam's worker processes warn about at start-up, relayed by the launcher once per worker and job:
# options and GCP modules the local runner does not use, nothing about the build.
BEAM_START_UP = ("No semi_persistent_directory found", "Discarding unparseable args", "apitools not found")


def not_beam_start_up(record: logging.LogRecord) -> bool:
    """A logging filter: False for Beam's start-up chatter, True for every other record."""
    message = record.getMessage()
    return not any(chatter in message for chatter in BEAM_START_UP)


def configure_logging(verbosity: int) -> None:
    """-q: errors only; default: warnings plus the stage lines, without Beam's start-up chatter; -v: INFO
    everywhere (Beam's own lines and its chatter too).

    ``force``: importing Beam calls ``logging.warning`` at module level, which installs a root handler
    first and would make a plain ``basicConfig`` a no-op.
    """
    level = logging.ERROR if verbosity < 0 else logging.INFO if verbosity > 0 else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", force=True)
    log.setLevel(logging.INFO if verbosity >= 0 else logging.ERROR)
    if verbosity <= 0:
        for handler in logging.getLogger().handlers:  # a handler's filter sees the records of every logger below it
            handler.addFilter(not_beam_start_up)
