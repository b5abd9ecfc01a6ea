"""Child processes that die with DevCell: every program a backend runs is started here.

A DevCell process killed in the middle of a copy (kill -9, the OOM killer, a closed terminal)
must not leave its `cp` processes copying gigabytes into a temporary directory nobody will
rename. Each child gets PR_SET_PDEATHSIG=SIGKILL (Linux: the kernel kills it when the thread
that started it dies, and subprocess.run waits on that same thread, so only a dead parent
triggers it) and its own process group, so a terminal's Ctrl-C reaches DevCell, which decides
(subprocess.run kills the child on any exception) instead of interrupting children half-way.

The function run in the child between fork and exec is resolved before forking and only
calls prctl and getppid: no lock, import or allocation that another thread could hold.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _prctl()


def _die_with(parent: int) -> Callable[[], None] | None:
    prctl = _PRCTL
    if prctl is None:
        return None
    getppid, exit_now = os.getppid, os._exit
    sigkill = int(signal.SIGKILL)

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if getppid() != parent:  # the parent died before prctl took effect
            exit_now(1)

    return in_child


TimeoutExpired = subprocess.TimeoutExpired
CompletedProcess = subprocess.CompletedProcess
Machine = subprocess.Popen[bytes]
"""A machine monitor process spawn_machine started."""
DEVNULL = subprocess.DEVNULL


def run(argv: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `argv` to completion (text output captured), as a child that dies with us."""
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False,
                          preexec_fn=_die_with(os.getpid()), process_group=0)


def run_bytes(argv: Sequence[str], *, cwd: Path | None = None, timeout: float | None = None,
              stdin: int | None = None, env: Mapping[str, str] | None = None
              ) -> subprocess.CompletedProcess[bytes]:
    """As `run`, output as bytes, with a time limit (TimeoutExpired, the child killed) and
    the child's standard input from a descriptor (DEVNULL by default); `env` is added to
    DevCell's environment for the child."""
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, check=False,
                          timeout=timeout, stdin=DEVNULL if stdin is None else stdin,
                          env={**os.environ, **env} if env else None,
                          preexec_fn=_die_with(os.getpid()), process_group=0)


class Stopped(Exception):
    """A child stopped because its watch said so (the reason is the message)."""


def run_bounded(argv: Sequence[str], *, env: Mapping[str, str], timeout: float,
                keep: int = 64 * 1024, watch: Callable[[], str | None] | None = None,
                inherit: bool = True) -> subprocess.CompletedProcess[bytes]:
    """As `run_bytes`, for a child whose output another party chooses (git relays a
    server's messages): it costs a constant whatever is written, the first `keep` bytes of
    standard output and the last `keep` of standard error kept, the rest read and dropped.
    Past `timeout` seconds the child's process group is killed and TimeoutExpired raised;
    `watch`, asked about every second, stops it the same way (Stopped) with its reason.
    `inherit` False: `env` is the child's whole environment, nothing of DevCell's added."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=DEVNULL, env={**os.environ, **env} if inherit else dict(env),
                            preexec_fn=_die_with(os.getpid()), process_group=0)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    open_fds = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(list(argv), timeout)
            why = watch() if watch is not None else None
            if why is not None:
                raise Stopped(why)
            for fd in select.select(list(open_fds), [], [], min(left, 1.0))[0]:
                chunk = os.read(fd, 65536)
                kept = open_fds[fd]
                if not chunk:
                    del open_fds[fd]
                elif kept is out:
                    out += chunk[:max(keep - len(out), 0)]
                else:
                    err += chunk
                    del err[:-keep]
        code = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    return subprocess.CompletedProcess(list(argv), code, bytes(out), bytes(err))


def output_reader(argv: Sequence[str], *, cwd: Path | str | None = None
                  ) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own (no terminal; the caller kills its process
    group, so what it leaves running ends with it) with its standard output and error one
    pipe the caller reads in bounded amounts, stdin closed, a child that dies with us: a
    host command whose output is shown as it runs."""
    return subprocess.Popen(list(argv), cwd=cwd, stdin=DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, close_fds=True,
                            preexec_fn=_die_with(os.getpid()), start_new_session=True)


def run_attached(argv: Sequence[str]) -> int:
    """Run `argv` in the foreground on our own terminal and streams (a program the user
    asked for, such as VS Code's launcher), a child that dies with us; its exit status."""
    return subprocess.run(list(argv), check=False, preexec_fn=_die_with(os.getpid())).returncode


def stderr_reader(argv: Sequence[str], *, env: Mapping[str, str], inherit: bool = True
                  ) -> subprocess.Popen[bytes]:
    """Start `argv` with its standard error a pipe the caller reads in bounded amounts and
    within its own deadline (stdout discarded, stdin closed; `env` added to DevCell's, or
    with `inherit` False the whole environment), a child that dies with us: a program whose
    progress is shown as it runs."""
    return subprocess.Popen(list(argv), stdout=DEVNULL, stderr=subprocess.PIPE, stdin=DEVNULL,
                            env={**os.environ, **env} if inherit else dict(env),
                            preexec_fn=_die_with(os.getpid()),
                            process_group=0)


def reader(argv: Sequence[str], *, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` with its standard output a pipe the caller reads in bounded amounts and
    within its own deadline (stderr discarded, stdin closed), a child that dies with us. Use it
    as a context manager; kill it if it is still running when done."""
    return subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=DEVNULL,
                            stdin=DEVNULL, preexec_fn=_die_with(os.getpid()), process_group=0)


def spawn_machine(argv: Sequence[str], *, executable: str, cwd: Path,
                  output: int) -> Machine:
    """Start a virtual machine's monitor process that must OUTLIVE the command starting it
    (a cell keeps running after `devcell apply` exits): its own session, no parent-death
    signal, standard input closed, output to the descriptor given. Ownership is proven by
    its label and pidfile (vm_proc), never by being our child."""
    return subprocess.Popen(list(argv), executable=executable, cwd=cwd, stdin=DEVNULL,
                            stdout=output, stderr=output, start_new_session=True)


def replace_process(program: str, argv: list[str]) -> NoReturn:
    """Become `program` (execv): `devcell ssh` hands the terminal to OpenSSH's client. No
    child is made, so none can outlive DevCell; standard streams are flushed first."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, argv)
