"""core/storage.py on the two kinds of place a build writes: a local folder and a real S3 server on
127.0.0.1 (moto's standalone server). The same calls give the same answers on both."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_fixture import make_buckets, s3_server

from corpusforge.core import storage


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_server():
        make_buckets("cf-storage")
        yield "s3://cf-storage"


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path) if request.param == "local" else f"{request.getfixturevalue('s3')}/{tmp_path.name}"


def test_write_list_read_remove_on_local_and_s3(root: str) -> None:
    storage.write_json(storage.join(root, "a", "one.json"), {"n": 1})
    storage.write_bytes(storage.join(root, "a", "b", "two.bin"), b"\x00" * 10)
    with storage.writing(storage.join(root, "three.txt"), "w") as handle:
        handle.write("three")
    assert storage.read_json(storage.join(root, "a", "one.json")) == {"n": 1}
    assert [storage.name(p) for p in storage.listdir(root)] == ["a", "three.txt"]
    assert [storage.relative(p, root) for p in storage.files_under(root)] == ["a/b/two.bin", "a/one.json", "three.txt"]
    assert [storage.relative(p, root) for p in storage.glob(storage.join(root, "a", "*.json"))] == ["a/one.json"]
    assert storage.size(storage.join(root, "a", "b", "two.bin")) == 10 and storage.is_dir(storage.join(root, "a"))
    assert storage.sha256(storage.join(root, "three.txt")) == "8b5b9db0c13db24256c829aa364aa90c6d2eba318b9232a4ab9313b954d3555f"
    storage.remove_tree(storage.join(root, "a"))
    assert [storage.name(p) for p in storage.files_under(root)] == ["three.txt"] and not storage.exists(storage.join(root, "a"))


def test_local_copies_are_local_files_with_the_same_bytes_and_are_removed_after(root: str) -> None:
    paths = [storage.join(root, name) for name in ("x.arrow", "y.arrow")]
    for index, path in enumerate(paths):
        storage.write_bytes(path, bytes([index]) * 1000)
    with storage.local_copies(paths) as local:
        assert [Path(p).read_bytes() for p in local] == [b"\x00" * 1000, b"\x01" * 1000]
        assert (local == paths) == storage.is_local(root)  # local files are read in place
    assert all(Path(p).exists() == storage.is_local(root) for p in local)  # downloads are gone


def test_read_chunks_gives_the_bytes_in_order_a_chunk_at_a_time(root: str) -> None:
    path = storage.join(root, "blob.bin")
    data = bytes(range(256)) * 40  # 10,240 bytes
    storage.write_bytes(path, data)
    chunks = list(storage.read_chunks(path, 4096))
    assert [len(chunk) for chunk in chunks] == [4096, 4096, 2048] and b"".join(chunks) == data


def test_read_range_gives_those_bytes_and_refuses_a_short_read(root: str) -> None:
    path = storage.join(root, "pieces.bin")
    data = bytes(range(256)) * 40
    storage.write_bytes(path, data)
    assert storage.read_range(path, 0, 5) == data[:5] and storage.read_range(path, 1000, 3000) == data[1000:4000]
    assert storage.read_range(path, len(data) - 7, 7) == data[-7:]
    with pytest.raises(OSError, match="expected 20"):
        storage.read_range(path, len(data) - 10, 20)  # a piece past the end: a truncated file, not a short pickle


def test_a_failed_write_leaves_nothing(root: str) -> None:
    target = storage.join(root, "half.bin")
    with pytest.raises(RuntimeError):
        with storage.writing(target) as handle:
            handle.write(b"half")
            raise RuntimeError("killed")
    assert not storage.exists(target) and storage.walk(root) == []


def test_exclusive_create_admits_one_writer(root: str) -> None:
    path = storage.join(root, "claim")
    assert storage.create_exclusive(path, b"first") and not storage.create_exclusive(path, b"second")
    assert storage.read_bytes(path) == b"first"


def test_the_s3_lock_refuses_a_second_holder_and_takes_over_a_stale_one(s3: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{s3}/locks/build.lock"
    with storage.lock(path):
        with pytest.raises(storage.LockedError):
            with storage.lock(path):
                pass
    assert not storage.exists(path)  # released
    storage.write_bytes(path, json.dumps({"holder": "killed", "renewed": time.time() - storage.LEASE_S - 1}).encode())
    with storage.lock(path):  # a killed launcher's lease, not renewed for LEASE_S: taken over
        assert json.loads(storage.read_bytes(path))["holder"] != "killed"
    storage.write_bytes(path, json.dumps({"holder": "alive", "renewed": time.time()}).encode())
    with pytest.raises(storage.LockedError):
        with storage.lock(path):
            pass


def test_the_s3_lock_is_renewed_while_held(s3: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "RENEW_S", 0.2)
    path = f"{s3}/locks/renewed.lock"
    with storage.lock(path):
        first = json.loads(storage.read_bytes(path))["renewed"]
        time.sleep(1.0)
        assert json.loads(storage.read_bytes(path))["renewed"] > first


def test_resolve_keeps_uris_and_makes_local_paths_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage.resolve("s3://b/k/") == "s3://b/k" and storage.resolve("gs://b/k") == "gs://b/k"
    assert storage.resolve("rel/x") == str(tmp_path.resolve() / "rel" / "x") and storage.resolve(f"file://{tmp_path}") == str(
        tmp_path.resolve()
    )
    assert storage.join("s3://b/run", "documents", "part-0.parquet") == "s3://b/run/documents/part-0.parquet"


def test_a_bare_file_name_is_written_in_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage.write_bytes("plain.png", b"png")  # e.g. `shards inspect ... --plot gpt-lengths.png`
    assert (tmp_path / "plain.png").read_bytes() == b"png"
