"""warc-dedup's output served by pywb, the replay server of Webrecorder (PyPI), as an archive would
serve it: every revisited URL must come back with its original's payload, byte for byte.

pywb runs from its own virtualenv (``make pywb``; testing/pywb-requirements.txt says why): its
``wb-manager`` indexes the output WARCs into a collection (CDXJ, its own indexer) and ``wayback``
serves it on 127.0.0.1. A revisit record holds no payload, so what comes back for it is what pywb
found through the revisit's ``WARC-Refers-To-Target-URI``, ``WARC-Refers-To-Date`` and
``WARC-Payload-Digest`` in its index (``ResolvingLoader``). Pages are fetched in identity mode
(``id_``, no rewriting) with ``Accept-Encoding: gzip`` so gzipped payloads come back as stored.
A third run de-duplicates crawl 2 against crawl 1 known only from the CDXJ index pywb wrote, imported
with ``warc-import-cdx``: revisits that name no record ID must replay too.

``make test`` names the virtualenv in ``CRAWL_DEDUP_PYWB``, so there a missing pywb fails the test;
elsewhere it is skipped when ``.venv-pywb`` is absent.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.ops.warc_dedup import run_dedup, run_import
from testing.archive_crawls import (
    Crawl,
    Response,
    check_output,
    expected_revisits,
    members,
    source_pages,
    two_crawls,
)

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("CRAWL_DEDUP_PYWB")
PYWB = Path(REQUIRED) if REQUIRED else ROOT / ".venv-pywb" / "bin"
if not (PYWB / "wayback").is_file():
    if REQUIRED:
        raise RuntimeError(f"CRAWL_DEDUP_PYWB={REQUIRED} has no wayback: run make pywb")
    pytest.skip(f"no pywb at {PYWB} (make pywb installs it)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def wayback(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """An empty pywb root with collection ``archive``; the server is started by :func:`_serve`."""
    root = tmp_path / "pywb"
    root.mkdir()
    subprocess.run([str(PYWB / "wb-manager"), "init", "archive"], cwd=root, check=True, capture_output=True)
    port = _free_port()
    yield root, f"http://127.0.0.1:{port}"


def _serve(root: Path, base: str) -> subprocess.Popen[bytes]:
    port = base.rsplit(":", 1)[1]
    server = subprocess.Popen([str(PYWB / "wayback"), "--bind", "127.0.0.1", "--port", port, "-t", "2"],
                              cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/archive/", timeout=5):
                return server
        except (urllib.error.URLError, ConnectionError):
            if server.poll() is not None:
                raise RuntimeError(f"wayback exited with {server.returncode}") from None
            time.sleep(0.3)
    server.terminate()
    raise RuntimeError("wayback did not answer in 60 s")


def _replayed(base: str, response: Response) -> bytes:
    stamp = response.date.replace("-", "").replace("T", "").replace(":", "").rstrip("Z")
    request = urllib.request.Request(f"{base}/archive/{stamp}id_/{response.uri}",
                                     headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            body: bytes = answer.read()
    except urllib.error.HTTPError as error:  # a replayed 404 is a 404
        body = error.read()
    return body


def _dedup(tmp_path: Path, crawls: list[Crawl], names: list[str], state: Path) -> list[Path]:
    outputs = []
    for crawl, name in zip(crawls, names, strict=True):
        source = tmp_path / f"{name}-in.warc.gz"
        source.write_bytes(crawl.warc())
        output = tmp_path / f"{name}.warc.gz"
        run_dedup([source], output, state)
        outputs.append(output)
    return outputs


def test_pywb_replays_every_revisit_with_its_original_payload(tmp_path: Path,
                                                              wayback: tuple[Path, str]) -> None:
    root, base = wayback
    crawls = list(two_crawls(source_pages(40)))
    outputs = _dedup(tmp_path, crawls, ["crawl1", "crawl2"], tmp_path / "state")
    assert check_output(crawls, [path.read_bytes() for path in outputs]) == []
    subprocess.run([str(PYWB / "wb-manager"), "add", "archive", *map(str, outputs)], cwd=root, check=True,
                   capture_output=True)
    expected = expected_revisits(*crawls)
    server = _serve(root, base)
    try:
        revisited = [e.response for e in expected if e.original is not None]
        wrong = [r.uri for r in revisited if _replayed(base, r) != r.entity]
        kept = [e.response for e in expected if e.original is None and e.response.entity][:10]
        wrong_kept = [r.uri for r in kept if _replayed(base, r) != r.entity]
    finally:
        server.terminate()
        server.wait(30)
    assert len(revisited) > 20 and wrong == [] and wrong_kept == []


def test_pywb_replays_revisits_of_an_archive_known_from_its_index(tmp_path: Path,
                                                                  wayback: tuple[Path, str]) -> None:
    root, base = wayback
    first, second = two_crawls(source_pages(30))
    (first_out,) = _dedup(tmp_path, [first], ["crawl1"], tmp_path / "state-archive")
    subprocess.run([str(PYWB / "wb-manager"), "add", "archive", str(first_out)], cwd=root, check=True,
                   capture_output=True)
    index = root / "collections" / "archive" / "indexes" / "index.cdxj"
    tally, _ = run_import([index], tmp_path / "state-new")
    assert tally["imported"] > 20 and tally["left_out:revisit"] > 0
    (second_out,) = _dedup(tmp_path, [second], ["crawl2"], tmp_path / "state-new")
    refers = b"".join(members(second_out.read_bytes()))
    assert b"WARC-Refers-To-Target-URI" in refers and b"WARC-Refers-To: " not in refers  # no record IDs
    subprocess.run([str(PYWB / "wb-manager"), "add", "archive", str(second_out)], cwd=root, check=True,
                   capture_output=True)
    server = _serve(root, base)
    try:
        revisits = [r for r in second.responses if r.entity and not r.chunked
                    and any(r.entity == old.entity and not old.chunked for old in first.responses)]
        wrong = [r.uri for r in revisits if _replayed(base, r) != r.entity]
    finally:
        server.terminate()
        server.wait(30)
    assert len(revisits) > 5 and wrong == []
