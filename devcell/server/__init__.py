"""DevCell's HTTP API, served by the daemon (`devcell controller run --listen ...`).

A layer above `api/` and below the CLI: it turns requests into the same library calls the
CLI makes (api.listing for list and get, api.apply for apply and delete, api.cells for the
actions on a cell) and their results
and errors into JSON documents. Starlette and uvicorn are imported only by the modules that
serve (`app`, `serve`); `problems`, `routes` and `openapi` are plain Python, so they can be
read, tested and documented without them.

Modules: `problems` (every error as one RFC 9457 problem document), `routes` (the route
table: resources, verbs, parameters), `openapi` (the OpenAPI document made from the route
table and the kinds' JSON schemas), `watch` (changes after a version, from the events
table), `actions` (sleep, start, snapshot and fork on a cell, and waiting for them), `app`
(the ASGI application), `tls` (the certificate the server makes for itself), `serve`
(uvicorn beside the reconcile loop) and `ui` (the web dashboard at /ui, built on its first
request: docs/dashboard.md).
"""
