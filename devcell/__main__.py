"""`python -m devcell` runs the CLI."""

from devcell.cli.main import main

raise SystemExit(main())
