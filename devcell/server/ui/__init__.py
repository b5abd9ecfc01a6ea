"""The web dashboard, /ui of the API's server (`devcell controller run --listen ...`).

Pages made on the server from the same library calls the CLI and the API make (api.listing,
api.lineage, api.capacity), with the standard library's escaping (no template engine), one
small script served as a file for the live parts (the API's watch as server-sent events) and
no build step. Built on the first request to /ui (server.app), so a daemon nobody browses
never imports it.

Modules: `html` (escaping: every page is made of escaped text), `data` (what each page
shows), `graph` (the lineage forest and an operation's timeline as SVG), `pages` (the
pages), `sessions` (sign-in sessions over TCP, CSRF tokens) and `app` (the routes).
docs/dashboard.md describes each page.
"""
