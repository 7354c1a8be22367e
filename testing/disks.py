"""Small filesystems for the full-disk tests (issue 37): a tmpfs of a few MB mounted by the test
(``mount -t tmpfs -o size=...``, root or CAP_SYS_ADMIN; the test is skipped where mounting is not
permitted, with the reason), and a ballast file that fills one to the last few kilobytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BALLAST = "ballast"


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def used_bytes(directory: Path) -> int:
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


def _mount(directory: Path, size_mb: int) -> None:
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-disk tests mount a tmpfs")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs",
                             str(directory)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {directory} ({result.stderr.strip() or result.returncode}): "
                    "the full-disk tests need root or CAP_SYS_ADMIN")


def _unmount(directory: Path) -> None:
    result = subprocess.run(["umount", str(directory)], capture_output=True, text=True, check=False)
    if result.returncode != 0:  # still busy (a process being reaped): detach it now, freed when unused
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)


@contextmanager
def small_filesystem(directory: Path, size_mb: int, keep: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` at ``directory``, unmounted afterwards. ``keep``: what the directory
    held is copied in first (what the mount hides stays underneath, as it was, for afterwards)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="small-fs-") as scratch:
        saved = Path(scratch) / "saved"
        if keep:
            shutil.copytree(directory, saved, symlinks=True)
        _mount(directory, size_mb)
        try:
            if keep:
                shutil.copytree(saved, directory, symlinks=True, dirs_exist_ok=True)
            yield directory
        finally:
            _unmount(directory)


def fill(directory: Path, leave_bytes: int) -> Path:
    """Fill ``directory``'s filesystem until ``leave_bytes`` are free (a ballast file); its path."""
    ballast = directory / BALLAST
    chunk = b"\0" * (1 << 20)
    with open(ballast, "ab") as out:
        while (room := free_bytes(directory) - leave_bytes) > 0:
            try:
                out.write(chunk[:min(len(chunk), room)])
                out.flush()
            except OSError:  # someone else took the rest meanwhile
                break
    return ballast


def make_room(ballast: Path) -> None:
    """Free what :func:`fill` took."""
    ballast.unlink(missing_ok=True)
