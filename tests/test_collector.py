"""The build's garbage-collector thresholds: relaxed in workers for good, in the launcher only while it builds."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from corpusforge.pipeline import collector


def test_relaxed_restores_the_processs_own_thresholds() -> None:
    before = gc.get_threshold()
    with collector.relaxed():
        assert gc.get_threshold() == collector.THRESHOLDS
    assert gc.get_threshold() == before


def test_relax_keeps_a_higher_threshold_its_owner_set() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(10 * collector.THRESHOLDS[0], 5, 5)
        collector.relax()
        assert gc.get_threshold() == (10 * collector.THRESHOLDS[0], 5, 5)
        gc.set_threshold(700, 10, 10)
        collector.relax()
        assert gc.get_threshold() == collector.THRESHOLDS
    finally:
        gc.set_threshold(*before)


def test_paused_holds_collections_off_and_restores_the_processs_own_state() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()  # its owner turned it off: it stays off
    finally:
        gc.enable()


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_release_freed_memory_hands_freed_heap_back() -> None:
    """A step's freed heap stays with the process (glibc keeps pages between live blocks) until released."""
    blocks = [bytes(4096) for _ in range(40_000)]  # 160 MB from glibc's heap (above pymalloc's 512 bytes)
    kept = blocks[::16]  # one block in 16 stays: the heap cannot shrink from its top
    del blocks
    held = _rss()
    collector.release_freed_memory()
    released = held - _rss()
    assert released > 80 << 20, f"only {released >> 20} MB of the freed blocks' pages were handed back"
    assert len(kept) == 2_500  # the kept blocks stayed alive through the measurement


def test_the_console_script_exits_without_walking_what_it_loaded() -> None:
    """A command that imported Beam leaves its objects frozen for the interpreter's exit (its full collection over
    them took 0.8 s), with the command's own exit status."""
    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        "from corpusforge.cli import console_script\n"
        "sys.argv = ['corpusforge', 'build', '--set', 'run.stages=[\"nonsense\"]']\n"
        "console_script()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown stage(s) ['nonsense']" in done.stderr + done.stdout
    frozen = int(done.stdout.split("frozen ")[-1])
    assert frozen > 200_000  # Beam's modules alone are well over that (the stage names are checked after importing it)
