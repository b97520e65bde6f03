"""`python -m pytest_devmem.cli`: the `devmem` command without its console script."""

from __future__ import annotations

from . import main

raise SystemExit(main())
