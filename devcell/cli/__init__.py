"""The `devcell` command: thin. Parse arguments, call the library, print, map errors to exit codes."""
