"""A real S3-compatible server on 127.0.0.1: moto's standalone server (``moto_server``) as a subprocess on a
free port, reached by s3fs/boto exactly as a cloud bucket would be, through ``AWS_ENDPOINT_URL``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """Start ``moto_server``; yield the environment that points S3 clients at it (also set in ``os.environ``)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {endpoint}") from None
                time.sleep(0.1)
        env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint}
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        forget_clients()
        try:
            yield env
        finally:
            forget_clients()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        server.terminate()
        server.wait(timeout=10)


def forget_clients() -> None:
    """fsspec keeps one S3 filesystem per set of arguments, and the endpoint comes from the environment, not
    the arguments: a client made for an earlier server would still call it."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def make_buckets(*names: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    for name in names:
        fs.mkdir(name)


def upload(local: Path, uri: str) -> None:
    """Copy a local file or folder tree to ``uri`` (the way a user would with ``aws s3 cp --recursive``)."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    target = uri.removeprefix("s3://")
    if local.is_dir():
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{target}/{path.relative_to(local).as_posix()}")
    else:
        fs.put_file(str(local), target)
