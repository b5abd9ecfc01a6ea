"""spec.userEnvProbe: the environment the cell user's own shell sets up, given to hooks and
sessions (devcontainer.json's userEnvProbe), rendered into the supervisor script.

Tools installed for a user (nvm, pyenv, sdkman, a PATH entry in ~/.profile or ~/.bashrc) are
found only by a shell that read those files; hooks and `devcell exec` run commands directly.
So, once per runtime, the supervisor (the cell's main process, with the container's own
environment and as the cell's user) starts that user's shell (/etc/passwd, else /bin/sh) as
a login and/or interactive shell and has awk write what the shell changed (each variable it
set or altered, as shell `export` lines) to /tmp, bounded by `timeout` where the image has
it. `supervisor.sh --exec` (hooks, exec, ssh) run as that same user waits up to
PROBE_WAIT_S for that file (not at all where /tmp cannot be written: no file will come)
and sources it when it belongs to that user (another user's file
would let one user of the cell run code as another: `exec -u root` gets no probe). spec.env
names are left out of the file, so the manifest's values win, as remoteEnv wins over the
probed environment in the devcontainer CLI.

Only what changed is kept, so a command's own variables (`exec -e`, an SSH client's) stay
unless the shell's files set the same name; secrets are unset before the probe, so they
are never written to the file. The file is named after the runtime (the boot id and the
start time of process 1: the supervisor in a container), so a stopped and started cell
probes again.
"""

from __future__ import annotations

import shlex

MODES = {"loginShell": "-l", "interactiveShell": "-i", "loginInteractiveShell": "-l -i"}
"""spec.userEnvProbe -> the shell's flags ("none", the default, probes nothing)."""
PROBE_WAIT_S = 10
"""How long the probe may run, and how long a command waits for it before it runs without."""
SKIPPED = ("PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "PS1", "PS2", "PS4", "IFS", "OPTIND")
"""Set by every shell for itself: never carried from the probe into a command."""

# Each variable as NAME=VALUE on one line, newlines in values made \001 (compared only).
_DUMP = ('function enc(v,  n, p, i, o) { n = split(v, p, "\\n"); o = p[1]; '
         'for (i = 2; i <= n; i++) o = o "\\001" p[i]; return o } '
         'BEGIN { for (k in ENVIRON) print k "=" enc(ENVIRON[k]) }')
# What the probing shell set or changed against the dump (ARGV[1]), as export lines.
_DIFF = ('function enc(v,  n, p, i, o) { n = split(v, p, "\\n"); o = p[1]; '
         'for (i = 2; i <= n; i++) o = o "\\001" p[i]; return o } '
         'function quote(v,  n, p, i, o) { n = split(v, p, "\\047"); o = p[1]; '
         'for (i = 2; i <= n; i++) o = o "\\047\\"\\047\\"\\047" p[i]; '
         'return "\\047" o "\\047" } '
         'BEGIN { while ((getline line < ARGV[1]) > 0) { i = index(line, "="); '
         'if (i > 1) before[substr(line, 1, i - 1)] = substr(line, i + 1) } '
         'n = split(SKIP, s, " "); for (i = 1; i <= n; i++) skip[s[i]] = 1; '
         'for (k in ENVIRON) { if (k !~ /^[A-Za-z_][A-Za-z0-9_]*$/ || (k in skip)) continue; '
         'v = ENVIRON[k]; if ((k in before) && before[k] == enc(v)) continue; '
         'print "export " k "=" quote(v) } }')

_KEY = ('devcell_userenv() {{ '
        'read -r boot </proc/sys/kernel/random/boot_id 2>/dev/null; '
        'set -- $(cat /proc/1/stat 2>/dev/null); '
        'echo "/tmp/.devcell-userenv-${{boot:-0}}-${{22:-0}}"; }}\n')

_PROBE = """devcell_probe() {{
    # spec.userEnvProbe: what the cell user's shell sets up, once per runtime (user_env.py).
    f=$(devcell_userenv)
    rm -f /tmp/.devcell-userenv-* 2>/dev/null
    shell=$(awk -F: -v u="$(id -u)" '$3 == u {{ print $7; exit }}' /etc/passwd 2>/dev/null)
    [ -n "$shell" ] && [ -x "$shell" ] || shell=/bin/sh
    bound=
    command -v timeout >/dev/null 2>&1 && bound="timeout {wait}"
    (
        unset {secrets}
        umask 077
        awk {dump} >"$f.before" </dev/null 2>/dev/null
        $bound "$shell" {flags} -c 'exec awk -v SKIP="$1" "$2" "$3"' devcell-probe \\
            {skip} {diff} "$f.before" </dev/null >"$f.tmp" 2>/dev/null
        mv -f "$f.tmp" "$f" 2>/dev/null || : >"$f"
        rm -f "$f.before" "$f.tmp"
    ) &
    # A shell that never ends (no `timeout` in the image): commands stop waiting for it.
    ( sleep {wait}; [ -e "$f" ] || : >"$f" ) 2>/dev/null &
}}
"""

_USE = """    if [ "$(id -u)" = "$(awk '/^Uid:/ {{ print $2; exit }}' /proc/1/status 2>/dev/null)" ]; then
        f=$(devcell_userenv)
        waited=0
        while [ ! -e "$f" ] && [ -d /tmp ] && [ -w /tmp ] && [ "$waited" -lt {tenths} ]; do
            sleep 0.1 2>/dev/null || sleep 1
            waited=$((waited + 1))
        done
        [ -O "$f" ] && [ -f "$f" ] && . "$f"
    fi
"""


def mode_flags(spec: dict[str, object]) -> str | None:
    """The shell flags spec.userEnvProbe asks for; None: no probe."""
    mode = spec.get("userEnvProbe")
    return MODES.get(mode) if isinstance(mode, str) else None


def render_functions(spec: dict[str, object], names: list[str], secret: list[str]) -> str:
    """The probe's shell functions (empty without a probe). `names`: every spec.env name
    (left out of the probe's file: spec.env goes on top), `secret`: those to unset first."""
    flags = mode_flags(spec)
    if flags is None:
        return ""
    skip = " ".join((*SKIPPED, *names))
    return _KEY.format() + _PROBE.format(
        wait=PROBE_WAIT_S, secrets=" ".join(secret) or "DEVCELL_NOTHING", dump=shlex.quote(_DUMP),
        flags=flags, skip=shlex.quote(skip), diff=shlex.quote(_DIFF))


def render_use(spec: dict[str, object]) -> str:
    """What `--exec` runs before its command: the probed environment, when there is one."""
    if mode_flags(spec) is None:
        return ""
    return _USE.format(tenths=PROBE_WAIT_S * 10)
