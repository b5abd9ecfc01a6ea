"""The manifest files `apply -f` and `diff -f` send a server, so that its answer says what they
say on a state directory (cli/remote_apply.py sends them and maps the lines back).

The server reads a body as one file: a YAML stream, or one JSON document. Some files that
stream would read otherwise than `apply -f` reads them on its own are dealt with here:
- a file that is not UTF-8, holds a NUL, or (a `.json` file) is not JSON gets no object on a
  state directory, only that one problem: it is said here, at its own place, and the other
  files are still sent (as a dry run) for their problems, all said in the files' order;
- a `.json` file given alone is sent as JSON (read strictly, as `apply -f` reads it); among
  other files it goes in the YAML stream only when YAML reads it as JSON does (JSON is
  YAML's flow style, but YAML reads `1e5` as a string and refuses a surrogate pair's escape):
  else it is refused, naming the file, rather than recorded as something else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devcell.errors import ManifestError, Problem

REQUESTS = ("request.yaml", "request.json")
"""The names the server gives the body in its problems (its media type's)."""

MISREAD = ("YAML reads this JSON file otherwise than JSON does, and a server is sent it in one "
           "YAML stream with the other files: apply it on its own (or on the server's machine)")


def unreadable(source: Any) -> list[Problem]:
    """The problem that stops a file being read at all (`apply -f` says only it), or none."""
    from devcell.manifests import jsonsafe, validate
    from devcell.manifests.yamlsafe import YamlSyntaxError

    try:
        text = source.data.decode("utf-8")
    except UnicodeDecodeError:
        return validate.parse_source(source)[1]
    if "\x00" in text:
        return validate.parse_source(source)[1]
    if validate.is_json(source):
        try:
            jsonsafe.parse_document(text)
        except YamlSyntaxError:
            return validate.parse_source(source)[1]
    return []


def misread(source: Any) -> bool:
    """A JSON file YAML reads otherwise (it is readable: unreadable() found nothing)."""
    from devcell.manifests import jsonsafe, validate
    from devcell.manifests.yamlsafe import YamlSyntaxError

    text = source.data.decode("utf-8")
    try:
        as_yaml = [d.data for d in validate.parse_documents(text)]
    except YamlSyntaxError:
        return True
    return as_yaml != [d.data for d in jsonsafe.parse_document(text)]


class Stream:
    """Several files as one YAML stream (or one JSON file as itself), and where each file's
    lines are in it."""

    def __init__(self, sources: list[Any]) -> None:
        from devcell.manifests import validate

        parts: list[bytes] = []
        self.starts: list[tuple[int, str]] = []  # (first line in the stream, file shown)
        self.keys: list[str] = []  # each file's absolute path ("-": standard input)
        self.json = len(sources) == 1 and validate.is_json(sources[0])
        line = 1
        for source in sources:
            data = source.data if source.data.endswith(b"\n") or not source.data \
                else source.data + b"\n"
            if parts:
                parts.append(b"---\n")
                line += 1
            self.starts.append((line, source.display))
            self.keys.append(source.key)
            parts.append(data)
            line += data.count(b"\n")
        self.data = b"".join(parts)

    def origins(self, paths: list[str]) -> list[tuple[int, str]]:
        """(line, path) for the server (store.client_sets): from each line on, the stream's
        documents were read from that path given to `apply -f` (absolute; a folder for each
        file found in it; `-`: standard input), a path only where it changes."""
        import os

        roots = [os.path.abspath(p) for p in paths if p != "-"]
        out: list[tuple[int, str]] = []
        for (line, _), key in zip(self.starts, self.keys, strict=True):
            root = "-" if key == "-" else next(
                (r for r in roots if key == r or key.startswith(r.rstrip(os.sep) + os.sep)),
                key)
            if not out or out[-1][1] != root:
                out.append((line, root))
        return out

    def file_at(self, line: int) -> tuple[str, int]:
        """The file a line of the stream came from, and the line in it."""
        start, shown = self.starts[0] if self.starts else (1, REQUESTS[0])
        for first, display in self.starts:
            if first <= line:
                start, shown = first, display
        return shown, line - start + 1

    def located(self, problem: Problem) -> Problem:
        """The server's problem at its own file and line (and a place its message names,
        e.g. where an object defined twice was first defined)."""
        import re

        if problem.file not in REQUESTS or not self.starts:
            return problem

        def place(found: re.Match[str]) -> str:
            shown, line = self.file_at(int(found.group(1)))
            return f"{shown}:{line}"

        message = re.sub(r"\brequest\.(?:yaml|json):(\d+)", place, problem.message)
        if problem.line is None:
            return problem._replace(file=self.starts[0][1] if len(self.starts) == 1
                                    else problem.file, message=message)
        shown, line = self.file_at(problem.line)
        return problem._replace(file=shown, line=line, message=message)


class Sent:
    """The files of one command line, as the server is sent them."""

    def __init__(self, sources: list[Any]) -> None:
        self.order = {s.display: i for i, s in reversed(list(enumerate(sources)))}
        self.local = [(i, p) for i, s in enumerate(sources) for p in unreadable(s)]
        broken = {i for i, _ in self.local}
        if len(sources) - len(broken) > 1:
            from devcell.manifests import validate

            self.local += [(i, Problem(s.display, MISREAD)) for i, s in enumerate(sources)
                           if i not in broken and validate.is_json(s) and misread(s)]
            self.local.sort(key=lambda found: found[0])
        kept = {i for i, _ in self.local}
        self.stream = Stream([s for i, s in enumerate(sources) if i not in kept])

    def ask(self, call: Callable[[bytes, bool, bool], dict[str, Any]]) -> dict[str, Any]:
        """The server's answer to `call(body, as_json, dry_run_only)`; every problem (the
        server's and those found here) raised at the user's own files, in their order."""
        try:
            if not self.local:
                return call(self.stream.data, self.stream.json, False)
            if self.stream.starts:
                call(self.stream.data, self.stream.json, True)  # for its problems only
        except ManifestError as exc:
            raise ManifestError(self._merged([self.stream.located(p)
                                              for p in exc.problems])) from None
        raise ManifestError(self._merged([]))

    def _merged(self, served: list[Problem]) -> list[Problem]:
        """The server's problems in its order, each of a file given earlier said first."""
        out: list[Problem] = []
        pending = list(self.local)
        for problem in served:
            at = self.order.get(problem.file, len(self.order))
            while pending and pending[0][0] < at:
                out.append(pending.pop(0)[1])
            out.append(problem)
        return out + [problem for _, problem in pending]
