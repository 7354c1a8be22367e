"""``make lint``: the commits a branch adds say what changed in one short line, and why below it.

``git log --oneline`` is how a reviewer, a bisect and a release note read the history; a subject
that runs to hundreds of characters makes it unreadable, and a commit with no body leaves the why
to be guessed. The rules (those of Git's own documentation, ``git help commit``, "Discussion"):

- the subject is at most :data:`MAX_SUBJECT` characters and says what changed;
- a blank line, then a body: why (at least one line of it);
- no "wip" commits (squash them before the branch is merged).

Merge commits are not checked (their subjects are Git's). Two ways to run it:

    python tools/commit_messages.py [BASE]      # every commit of HEAD not in BASE (default: main)
    python tools/commit_messages.py --hook FILE # one message: a commit-msg hook (docs in the README)

With no BASE known to git (a tarball, a shallow clone) there is nothing to compare: it says so and
passes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with one commit message (none: it is fine)."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    subject = lines[0].strip() if lines else ""
    found = []
    if not subject:
        found.append("no subject")
    if len(subject) > MAX_SUBJECT:
        found.append(f"subject of {len(subject)} characters (at most {MAX_SUBJECT})")
    if subject.lower().startswith("wip"):
        found.append("a wip commit: squash it")
    if len(lines) > 1 and lines[1].strip():
        found.append("no blank line after the subject")
    if not any(line.strip() for line in lines[1:]):
        found.append("no body: say why below the subject")
    return found


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def branch_commits(base: str) -> list[tuple[str, str]]:
    """(short hash, message) of each non-merge commit of HEAD that ``base`` does not have."""
    hashes = _git("rev-list", "--no-merges", "--reverse", f"{base}..HEAD").split()
    return [(commit[:10], _git("log", "-1", "--format=%B", commit)) for commit in hashes]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--hook"]:
        found = problems(Path(argv[1]).read_text())
        for problem in found:
            print(f"commit message: {problem}", file=sys.stderr)
        return 1 if found else 0
    base = argv[0] if argv else "main"
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"],
                           capture_output=True, check=False).returncode == 0
    if not known:
        print(f"commit messages: no {base} to compare with; not checked")
        return 0
    bad = 0
    for commit, message in branch_commits(base):
        for problem in problems(message):
            print(f"{commit} {message.splitlines()[0][:60]!r}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
