"""``python -m streams``: see :mod:`streams.cli`.

The command line is imported only when this runs as the program. Child processes started with
``spawn`` (the group describer, restore processes) import this module as ``__mp_main__`` first, and
importing the whole command line there delayed each of them, at every worker start."""

if __name__ == "__main__":
    from streams.cli import main

    raise SystemExit(main())
