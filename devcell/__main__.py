"""`python -m devcell` runs the CLI."""

from devcell.cli.main import process_main

raise SystemExit(process_main())
