"""``python -m graphfix``: the same as the ``graphfix`` command."""

from graphfix.cli import main

raise SystemExit(main())
