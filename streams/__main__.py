"""``python -m streams``: see :mod:`streams.cli`."""

from streams.cli import main

raise SystemExit(main())
