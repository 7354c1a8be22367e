"""``python -m streams``: see :mod:`streams.cli`."""

from streams.cli import main

if __name__ == "__main__":  # child processes (forkserver) import this module as __mp_main__
    raise SystemExit(main())
