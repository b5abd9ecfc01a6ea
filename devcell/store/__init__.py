"""Store: the SQLite state database (desired objects, records, operations, events)."""
