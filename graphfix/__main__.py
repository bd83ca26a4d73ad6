"""``python -m graphfix``: the same as the ``graphfix`` command."""

from graphfix.cli.main import main

raise SystemExit(main())
