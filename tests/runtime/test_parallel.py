"""ProcessMap: submissions run in child processes while the caller works, results in input order."""

from __future__ import annotations

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
