"""Atomic writes: a target is either the old bytes or the new ones, and no temporary file is left."""

from __future__ import annotations

import os

import pytest

from corpusforge.core import storage


def test_local_output_replaces_on_success_and_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "data.bin"
    storage.write_bytes(target, b"old")
    with pytest.raises(OSError, match="disk full"):
        with storage.local_output(target) as temp:
            with open(temp, "wb") as handle:
                handle.write(b"half")
            raise OSError("disk full")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    with storage.local_output(target) as temp:
        assert os.path.dirname(temp) == str(tmp_path) and temp != str(target)
        with open(temp, "wb") as handle:
            handle.write(b"new")
        assert target.read_bytes() == b"old"  # nothing visible until the block ends
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    assert storage.sha256(target) == "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437"  # sha256(b"new")
