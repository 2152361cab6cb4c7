"""Archives in their publishers' formats, and a file server on 127.0.0.1 for the
data-preparation tests: byte ranges as a publisher's
server answers them, and the faults a download meets (a connection cut mid-file, a slow
answer). Every request is logged with its ``Range`` header."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from workers.data.archives import MIRRORS_VARIABLE, Archive, digests_of


@dataclass
class Served:
    root: Path
    base: str = ""
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range)
    # path -> the byte each of its next answers is cut at, one per answer
    cuts: dict[str, list[int]] = field(default_factory=dict)
    delay_s: float = 0.0  # before each answer


@contextmanager
def serve(root: Path) -> Iterator[Served]:
    """Serve ``root`` until the block ends; ``Served.base`` is its address."""
    served = Served(root)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            ranged = self.headers.get("Range")
            served.requests.append((self.path, ranged))
            time.sleep(served.delay_s)
            path = served.root / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            start = 0
            if ranged and ranged.startswith("bytes="):
                start = int(ranged[6:].split("-")[0])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            pending = served.cuts.get(self.path)
            cut = pending.pop(0) if pending else None
            if cut is not None:
                self.wfile.write(body[start:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body[start:])

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def tgz(path: Path, members: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def sgm(setid: str, segments: list[str]) -> str:
    body = "".join(f'<seg id="{i}">{text}</seg>\n' for i, text in enumerate(segments, 1))
    head = f'<srcset setid="{setid}" srclang="any">\n<doc docid="d" genre="news">\n'
    return f"{head}{body}</doc>\n</srcset>\n"


def upstream_path(root: Path, url: str) -> Path:
    """Where the server at ``root`` keeps the file of ``url``: its official path, as a mirror
    (``SCALEBENCH_DATA_MIRRORS``) is asked for it."""
    return root / urlsplit(url).path.lstrip("/")


def as_served(archives: Iterable[Archive], root: Path) -> tuple[Archive, ...]:
    """``archives`` with the digests and sizes of the miniatures served at ``root``."""
    found = []
    for archive in archives:
        path = upstream_path(root, archive.url)
        digest = digests_of(path)[0]
        found.append(replace(archive, sha256=digest, md5=None, bytes=path.stat().st_size))
    return tuple(found)


@contextmanager
def mirrored(root: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """Serve ``root`` and make it the mirror of ``source`` for this test."""
    with serve(root) as server:
        monkeypatch.setenv(MIRRORS_VARIABLE, f"{source}={server.base}")
        yield server
