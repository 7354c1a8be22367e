"""``python -m streams``: see :mod:`streams.cli`.

The command line is imported only when this runs as the program. Child processes started with
``spawn`` (the group describer, restore processes) import this module as ``__mp_main__`` first, and
importing the whole command line there cost each of them about 0.2 s of CPU before its work, at
every worker start (``python -X importtime``)."""

if __name__ == "__main__":
    from streams.cli import main

    raise SystemExit(main())
