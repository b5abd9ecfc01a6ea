"""DevCell's verbs as library calls: what `devcell apply`, `delete`, `cell ...`, `snapshot
create` and `op ...` do, without the command line.

Each verb is one call that records desired state (through admission), then converges it and
returns a typed `reports.Report`: inline, in this process, under the reconcile lock; or, when
a daemon holds the lease, by waiting for what the daemon records (approving gates through the
store when asked to). The CLI parses arguments, calls one of these and prints the report, as
sqlite-utils' commands call sqlite-utils; tests and other programs get the same behaviour
without a subprocess.

The calls never print, never exit and never configure log sinks; they raise DevCell's own
errors (devcell.errors). What the caller shows while a call runs goes through `Hooks`:

- `on_recorded` is called once the changes are recorded (in a dry run: once they are known),
  before any converging. A verb is one call with a callback rather than two calls (record,
  then converge) because what follows the recording is the orchestration this package exists
  to own: which objects to converge, whether a daemon does it, what to wait for (Ready, the
  object's deletion, or an operation), whether to approve gates. Split in two, every caller
  would carry those decisions from the first call to the second. The callback is how the CLI
  prints `cell/api created` before a wait of minutes.
- `inline` wraps an inline converge, and only that: the CLI installs its log sinks and
  progress bars there, so a call that converges nothing (a no-op re-apply, a daemon's wait)
  never imports loguru or draws a bar.

Modules: `reports` (what a call returns), `converging` (inline or through the daemon, for
every verb), `apply` (apply, delete), `cells` (snapshot, fork, sleep, start), `ops`
(resume and cancel a suspended operation), `transfer` (snapshot export and import), `gc`,
`capacity` (what `get -o wide` measures), `df` (`devcell df`'s rows, a list of sources),
`listing` (what `get` lists, for the CLI and the HTTP API) and `lineage` (snapshots and forks
as a forest, for `get snapshots --tree` and the dashboard). Of the verbs, nothing here is
imported by `devcell get`; it reads through `listing` (and `capacity` for `-o wide`).
"""
