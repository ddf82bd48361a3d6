"""``python -m pipeline`` is the ``streamscribe`` command."""

from pipeline.cli import main

raise SystemExit(main())
