"""ProcessMap: submissions run in child processes while the caller works, results in input order."""

from __future__ import annotations

import os

import pytest

from streams.errors import RuntimeFailure
from streams.runtime.parallel import ProcessMap


def shout(context: bytes, item: bytes) -> bytes:
    """The mapped function (children import it by path, as they would a stage's)."""
    return context + item.upper()


def test_a_submission_comes_back_in_input_order() -> None:
    pool = ProcessMap("test_parallel:shout", b">", 2)
    try:
        pending = pool.submit([b"a%d" % index for index in range(101)])
        assert pending.results() == [b">A%d" % index for index in range(101)]
        assert pool.map([]) == []
    finally:
        pool.close()


def test_a_submission_nobody_took_does_not_mix_into_the_next() -> None:
    """An aborted batch's analyses are dropped; the next batch gets only its own results."""
    pool = ProcessMap("test_parallel:shout", b"", 3)
    try:
        pool.submit([b"old%d" % index for index in range(50)])  # never taken
        assert pool.map([b"new%d" % index for index in range(7)]) == [b"NEW%d" % index for index in range(7)]
    finally:
        pool.close()


def die_on_x(context: bytes, item: bytes) -> bytes:
    if item == b"x":
        os._exit(3)  # a crash in native code, say: the child is gone without a word
    return item


def test_a_child_that_dies_fails_the_submission() -> None:
    """Inputs go to whichever child is free; a dead child fails the submission (the batch is not
    committed) instead of leaving it waiting for results that never come."""
    pool = ProcessMap("test_parallel:die_on_x", b"", 2)
    try:
        with pytest.raises(RuntimeFailure, match="died"):
            pool.submit([b"a", b"b", b"x", *[b"c%d" % index for index in range(40)]]).results()
    finally:
        pool.close()
