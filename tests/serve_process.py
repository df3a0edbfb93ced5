"""`planner serve` as its own process, for the tests that need the real server (its folder, sockets, signals, pages)."""

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path | None = None, *options: str) -> tuple[subprocess.Popen, str]:
    """`planner serve` on a free port, run from `folder`, once it answers: the process and its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "planner.cli", "serve", "--port", str(port), *options],
                               cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/api/catalog/precisions", timeout=1)
            return process, url
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"planner serve exited: {process.stderr.read()[-500:]}")
            time.sleep(0.1)
    process.kill()
    pytest.fail("planner serve did not start within 30 s")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("planner serve did not stop within 30 s of SIGTERM")


@contextmanager
def running_server(folder: Path | None = None, *options: str) -> Iterator[str]:
    """The URL of a `planner serve` started from `folder`, stopped on leaving."""
    process, url = start_server(folder, *options)
    try:
        yield url
    finally:
        stop_server(process)
