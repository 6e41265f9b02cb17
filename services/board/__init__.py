"""The board process (``taskd``): SQLite store, domain commands, HTTP API, SSE stream, web UI."""
