"""Replay a Dockerfile without a Docker daemon: its steps, in a clean virtualenv, from the files it copies.

There is no Docker daemon where the tests run, so an image cannot be built. What can go wrong in one of
our images is mostly about files and Python packages: a step that needs a file the Dockerfile never
copied (or that ``.dockerignore`` keeps out of the context), a requirement missing from the dependency
layer, a package of ours looked up by name, an entrypoint that does not start. The replay checks
exactly those. It reads the Dockerfile, and for each instruction:

* ``COPY``: copies from the build context, filtered by ``.dockerignore`` as Docker filters it, into an
  empty directory standing for the image's file system (``root``);
* ``RUN``: runs the command with ``/bin/sh -c`` in the mapped ``WORKDIR``, with the image's ``ENV`` and
  ``ARG`` values and the virtualenv standing for the image's Python first on ``PATH``, so ``pip`` and
  ``python`` are that environment's; absolute paths of the image are mapped under ``root``;
* ``ENV``, ``ARG``, ``WORKDIR``, ``ENTRYPOINT``, ``CMD``, ``USER``: recorded (and mapped).

What only a real image has is not replayed, and each such step is reported in ``Image.skipped``: the
base image (``FROM``), system packages (``apt-get``), user accounts (``useradd``; the replay runs as
the test's user), and ``python3 -m venv DIR``, whose ``DIR`` becomes the clean virtualenv given to the
replay. A ``RUN`` that mixes such a command with anything else is refused, so nothing is skipped by
accident. One host-side speed-up: pip keeps its wheel cache (``PIP_NO_CACHE_DIR`` is dropped).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TextIO


class ReplayError(AssertionError):
    """A step of the Dockerfile failed, or uses what the replay (and so the reviewer) cannot vouch for."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile: continuation lines joined, comments and blank lines dropped."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(p for p in pending if p).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    if pending:
        raise ReplayError(f"line {start}: the last instruction ends with a continuation")
    return instructions


# ---- .dockerignore --------------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated relative paths (``**`` spans dirs)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def dockerignore_rules(context: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(is exception, pattern) for each line of ``context/.dockerignore``, in order."""
    path = context / ".dockerignore"
    rules: list[tuple[bool, re.Pattern[str]]] = []
    if not path.is_file():
        return rules
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        cleaned = os.path.normpath(line[1:] if negate else line).lstrip("/")
        rules.append((negate, _pattern_regex(cleaned)))
    return rules


def is_ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path, or a directory above it, decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, regex in rules:
        if any(regex.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def context_files(context: Path) -> set[str]:
    """The files Docker would send as the build context (relative paths)."""
    rules = dockerignore_rules(context)
    files: set[str] = set()
    for path in context.rglob("*"):
        if path.is_file() or path.is_symlink():
            rel = path.relative_to(context).as_posix()
            if not is_ignored(rel, rules):
                files.add(rel)
    return files


# ---- the replay -----------------------------------------------------------------------------------

#: RUN commands that only a real image can run, and what stands in for them in the replay.
SYSTEM_COMMANDS = {
    "apt-get": "system packages come with the base image",
    "rm -rf /var/lib/apt/lists/*": "apt's cache",
    "useradd": "user accounts: the replay runs as the test's user",
    "groupadd": "user accounts: the replay runs as the test's user",
}
_VENV = re.compile(r"^python3? -m venv (\S+)$")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass
class Image:
    """What the replay produced: where the image's files and Python are, and how it starts."""

    root: Path
    venv: Path
    base: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)  # image path -> host path (venvs)

    def host_path(self, image_path: str) -> Path:
        """Where an absolute path of the image lies on this machine."""
        posix = PurePosixPath(image_path)
        for prefix, host in sorted(self.paths.items(), key=lambda kv: -len(kv[0])):
            if posix == PurePosixPath(prefix) or PurePosixPath(prefix) in posix.parents:
                return host / posix.relative_to(prefix)
        return self.root / posix.relative_to("/")

    def map_text(self, text: str) -> str:
        """``text`` with the image's absolute paths (venv and directories made so far) mapped here."""
        known = [*self.paths, *(f"/{p.name}" for p in self.root.iterdir() if p.is_dir())]
        for prefix in sorted(set(known), key=len, reverse=True):
            pattern = rf"(?<![\w./-]){re.escape(prefix)}(?=[/\s:'\"]|$)"
            host = str(self.host_path(prefix))
            text = re.sub(pattern, lambda _m: host, text)  # noqa: B023 - used at once, in this iteration
        return text

    def command(self, args: list[str]) -> tuple[list[str], Path, dict[str, str]]:
        """(argv, cwd, env) of ``docker run IMAGE ARGS``: ENTRYPOINT + ARGS (CMD when there are none)."""
        argv = [*self.entrypoint, *(args or self.cmd)]
        exe = shutil.which(argv[0], path=self.env["PATH"])
        if exe is None:
            raise ReplayError(f"entrypoint {argv[0]!r} is not on the image's PATH {self.env['PATH']}")
        return [exe, *argv[1:]], self.host_path(self.workdir), dict(self.env)

    def run(self, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run the container's command to its end (see :meth:`command`)."""
        argv, cwd, env = self.command(args)
        return subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )


def _expand(value: str, variables: dict[str, str]) -> str:
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), value)


def _env_pairs(args: str) -> list[tuple[str, str]]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy form: ENV KEY value with spaces
        return [(words[0], args.split(None, 1)[1] if len(words) > 1 else "")]
    return [tuple(w.split("=", 1)) for w in words]  # type: ignore[misc]


def _exec_form(args: str) -> list[str]:
    try:
        value = json.loads(args)
    except ValueError:
        return ["/bin/sh", "-c", args]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ReplayError(f"expected a JSON list of strings, got {args!r}")
    return value


def _system_step(command: str) -> str | None:
    """Why a RUN command is not replayed, or None when it is an ordinary step to run."""
    segments = [s.strip() for s in command.split("&&")]
    reasons = []
    for seg in segments:
        reason = next((why for cmd, why in SYSTEM_COMMANDS.items() if seg.startswith(cmd)), None)
        reasons.append(reason)
    if all(reasons):
        return "; ".join(dict.fromkeys(r for r in reasons if r))
    if any(reasons):
        raise ReplayError(f"RUN {command!r} mixes system steps with others: split it so each is replayed")
    return None


def replay(
    dockerfile: Path,
    context: Path,
    root: Path,
    venv: Path,
    build_args: dict[str, str] | None = None,
    host_env: dict[str, str] | None = None,
    log: Path | None = None,
) -> Image:
    """Replay ``dockerfile`` with build context ``context`` into ``root``, Python in ``venv``.

    ``build_args`` are ``--build-arg`` values; ``host_env`` the environment the steps start from
    (default: this process's, less virtualenv and Python path variables). Raises :class:`ReplayError`
    naming the failing instruction.
    """
    build_args = dict(build_args or {})
    root.mkdir(parents=True, exist_ok=True)
    base_env = dict(os.environ if host_env is None else host_env)
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_NO_CACHE_DIR"):
        base_env.pop(var, None)
    image = Image(root=root, venv=venv)
    image.env = {**base_env, "PATH": f"{venv / 'bin'}:{base_env.get('PATH', '/usr/bin:/bin')}"}
    files = context_files(context)
    args: dict[str, str] = {}
    declared: set[str] = set()
    out = open(log, "a") if log else None  # noqa: SIM115 - closed in finally
    try:
        for ins in parse(dockerfile.read_text()):
            where = f"{dockerfile.name}:{ins.line} {ins.keyword} {ins.args}"
            variables = {**image.env, **args}
            if ins.keyword == "FROM":
                image.base = _expand(ins.args, args).split()[0]
            elif ins.keyword == "ARG":
                name, _, default = ins.args.partition("=")
                declared.add(name)
                args[name] = build_args.get(name, shlex.split(default)[0] if default else "")
            elif ins.keyword == "ENV":
                for key, value in _env_pairs(ins.args):
                    if key == "PIP_NO_CACHE_DIR":
                        continue
                    image.env[key] = _expand(image.map_text(value), variables)  # map, then expand
            elif ins.keyword == "WORKDIR":
                image.workdir = str(PurePosixPath(image.workdir) / _expand(ins.args, variables))
                image.host_path(image.workdir).mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                _copy(image, context, files, _expand(ins.args, variables), where)
            elif ins.keyword == "RUN":
                if ins.args.startswith("["):
                    raise ReplayError(f"{where}: write RUN in shell form (the replay runs it with /bin/sh)")
                _run(image, ins.args, args, where, out)
            elif ins.keyword == "USER":
                image.user = ins.args
            elif ins.keyword == "ENTRYPOINT":
                image.entrypoint = _exec_form(ins.args)
            elif ins.keyword == "CMD":
                image.cmd = _exec_form(ins.args)
            elif ins.keyword in {"EXPOSE", "LABEL"}:
                continue
            else:
                raise ReplayError(f"{where}: the replay does not know {ins.keyword}")
    finally:
        if out:
            out.close()
    unknown = set(build_args) - declared
    if unknown:
        raise ReplayError(f"build args the Dockerfile does not declare: {sorted(unknown)}")
    return image


def _copy(image: Image, context: Path, files: set[str], args: str, where: str) -> None:
    words = [w for w in shlex.split(args) if not w.startswith("--chown") and not w.startswith("--chmod")]
    if any(w.startswith("--") for w in words):
        raise ReplayError(f"{where}: COPY options other than --chown/--chmod are not replayed")
    *sources, dest = words
    dest_dir = dest.endswith("/") or len(sources) > 1
    target = image.host_path(str(PurePosixPath(image.workdir) / dest))
    for source in sources:
        src = os.path.normpath(source).lstrip("/")
        matched = sorted(f for f in files if f == src or f.startswith(src + "/") or _glob(src, f))
        if not matched:
            raise ReplayError(f"{where}: {source} is not in the build context (missing, or in .dockerignore)")
        for rel in matched:
            if rel == src and not dest_dir and not target.is_dir():  # one file to a file name
                out = target
            elif rel == src or _glob(src, rel):
                out = target / PurePosixPath(rel).name
            else:  # a directory's contents go into the destination
                out = target / PurePosixPath(rel).relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(context / rel, out)


def _glob(pattern: str, rel: str) -> bool:
    return any(c in pattern for c in "*?[") and _pattern_regex(pattern).match(rel) is not None


def _run(image: Image, command: str, args: dict[str, str], where: str, out: TextIO | None) -> None:
    why = _system_step(command)
    venv = _VENV.match(command.strip())
    if venv:  # the image's own virtualenv: the clean one given to the replay stands for it
        image.paths[venv.group(1)] = image.venv
        image.skipped.append(f"{where} (the replay's clean virtualenv is {venv.group(1)})")
        return
    if why:
        image.skipped.append(f"{where} ({why})")
        return
    env = {**image.env, **args}
    mapped = image.map_text(command)
    started = time.monotonic()
    proc = subprocess.run(
        ["/bin/sh", "-c", mapped],
        cwd=image.host_path(image.workdir),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out is not None:
        out.write(f"$ {mapped}  # {time.monotonic() - started:.1f}s\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        raise ReplayError(f"{where}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    image.ran.append(where)
