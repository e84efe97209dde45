"""The on-disk layout of a run, written so that a crash at any instant leaves it readable.

``runs/<run-id>/``::

    config.json          the run's identity (checkpoint.RunConfig), written atomically
    tasks.jsonl          every task this run was asked to do, in order
    generations.jsonl    one GenerationResult per line
    evaluations.jsonl    one EvalResult per line
    score.json           the ScoreResult, written atomically
    logs/<task-id>/      whatever ``generate`` keeps for one task

Crash safety, and why it holds:

* A record is appended with **one** ``write`` of the whole line including its ``\\n``, then
  fsynced before the caller goes on. A line therefore either ends with ``\\n`` (complete) or is the
  file's last line without one (torn: the process died mid-write, or a short write hit a full disk).
* Reading drops a torn last line; every other line must parse, else the error names file and line
  (that is real corruption, not a crash artefact, and guessing would hide it).
* Before the first append a torn tail is truncated away, so the file stays one-object-per-line.
* A failed append (``ENOSPC``, ``EFBIG``, ...) truncates the file back to where the line began
  before re-raising: earlier lines are never damaged and no half line is left behind.
* Several records of one task may exist (a re-evaluation, a retried failure); the last one wins.
* JSON files are written to a temp file, fsynced, then ``os.replace``d over the old one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from .schemas import EvalResult, GenerationResult, ScoreResult

CONFIG_FILE = "config.json"
TASKS_FILE = "tasks.jsonl"
GENERATIONS_FILE = "generations.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"
SCORE_FILE = "score.json"
LOGS_DIR = "logs"
LOCK_FILE = ".lock"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ArtifactError(RuntimeError):
    """A run directory holds something unreadable (a corrupt line, a malformed JSON file)."""


class RunLockedError(RuntimeError):
    """Another process is writing this run right now."""


def safe_name(task_id: str) -> str:
    """A file-system-safe directory name for ``task_id`` that stays distinct from other ids.

    Ids made only of safe characters are used as they are; any other id is sanitised and suffixed
    with a short hash of the original, so ``a/b`` and ``a_b`` never share a log directory.
    """
    cleaned = _UNSAFE.sub("_", task_id).strip(".") or "_"
    if cleaned == task_id and len(task_id) <= 100:
        return task_id
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned[:90]}-{digest}"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see the old file or the new one, never half."""
    text = json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from exc


def _fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class JsonlFile:
    """An append-only file of JSON objects, one per line; see the module docstring for the guarantees."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self._fd: int | None = None
        self._size = 0  # offset just past the last complete line

    # ---- reading -----------------------------------------------------------------------------

    def read(self) -> list[dict[str, Any]]:
        """All complete records. A torn last line is dropped; a bad line elsewhere raises ArtifactError."""
        return list(self.iter_records())

    def iter_records(self) -> Iterator[dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        complete = data.rfind(b"\n") + 1  # bytes after the last newline are a torn tail
        lineno = 0
        start = 0
        while start < complete:
            end = data.index(b"\n", start)
            lineno += 1
            line = data[start:end]
            start = end + 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ArtifactError(f"{self.path}:{lineno}: corrupt line ({exc}); fix or remove it") from exc
            if not isinstance(record, dict):
                raise ArtifactError(
                    f"{self.path}:{lineno}: expected a JSON object, got {type(record).__name__}"
                )
            yield record

    def torn_tail_bytes(self) -> int:
        """How many bytes after the last complete line (0 for a clean file)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        return len(data) - (data.rfind(b"\n") + 1)

    # ---- appending ---------------------------------------------------------------------------

    def open(self) -> None:
        """Open for appending; a torn tail left by a crash is truncated away first."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            good = self._last_newline_end(fd, size)
            if good != size:
                os.ftruncate(fd, good)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = good

    @staticmethod
    def _last_newline_end(fd: int, size: int) -> int:
        """Offset just past the last ``\\n`` (scanning backwards in blocks, so big files cost nothing)."""
        pos = size
        block = 1 << 16
        while pos > 0:
            start = max(0, pos - block)
            chunk = os.pread(fd, pos - start, start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
        return 0

    def append(self, record: dict[str, Any] | BaseModel) -> None:
        """Append one record durably; on any write error the file is restored to its previous length."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        if isinstance(record, BaseModel):
            text = record.model_dump_json()
        else:
            text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        line = text.encode("utf-8") + b"\n"
        fd, start = self._fd, self._size
        try:
            written = os.pwrite(fd, line, start)
            while written < len(line):  # a short write (full disk, file size limit): finish or fail
                n = os.pwrite(fd, line[written:], start + written)
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                written += n
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise OSError(exc.errno, f"cannot append to {self.path}: {exc.strerror}") from exc
        self._size = start + len(line)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class RunArtifacts:
    """Reads and writes one run directory. ``with RunArtifacts(root / run_id) as a:`` holds its lock."""

    def __init__(self, run_dir: Path, *, fsync: bool = True) -> None:
        self.run_dir = run_dir
        self.tasks = JsonlFile(run_dir / TASKS_FILE, fsync=fsync)
        self.generations = JsonlFile(run_dir / GENERATIONS_FILE, fsync=fsync)
        self.evaluations = JsonlFile(run_dir / EVALUATIONS_FILE, fsync=fsync)
        self._lock_fd: int | None = None
        self._created_logs: set[str] = set()

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def config_path(self) -> Path:
        return self.run_dir / CONFIG_FILE

    @property
    def score_path(self) -> Path:
        return self.run_dir / SCORE_FILE

    def exists(self) -> bool:
        return self.config_path.exists()

    # ---- lifecycle -----------------------------------------------------------------------------

    def create(self) -> None:
        """Make the directory and take the run's lock (released on close or process death)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / LOGS_DIR).mkdir(exist_ok=True)
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        self._take_lock(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def check_free(self) -> None:
        """Raise :class:`RunLockedError` if another process holds the run, creating nothing: a caller fails
        here before its costly set-up (a service started on every GPU), not after it. The lock itself is
        taken by :meth:`create`."""
        try:
            fd = os.open(self.run_dir / LOCK_FILE, os.O_RDONLY)
        except FileNotFoundError:
            return
        self._take_lock(fd)
        os.close(fd)  # releases it

    def _take_lock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLockedError(f"run {self.run_id!r} in {self.run_dir} is in use by pid {holder}") from None

    def delete(self) -> None:
        """Remove the whole run directory (``--overwrite``)."""
        self.close()
        shutil.rmtree(self.run_dir, ignore_errors=False)

    def close(self) -> None:
        for f in (self.tasks, self.generations, self.evaluations):
            f.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunArtifacts:
        self.create()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- records -------------------------------------------------------------------------------

    def read_config(self) -> dict[str, Any] | None:
        return read_json(self.config_path) if self.config_path.exists() else None

    def write_config(self, config: dict[str, Any]) -> None:
        write_json_atomic(self.config_path, config)

    def read_task_rows(self) -> list[dict[str, Any]]:
        return self.tasks.read()

    def append_task(self, task: BaseModel) -> None:
        self.tasks.append(task)

    def read_generations(self) -> dict[str, GenerationResult]:
        """Latest generation per task id."""
        out: dict[str, GenerationResult] = {}
        for i, row in enumerate(self.generations.iter_records(), 1):
            out[row.get("task_id", f"<record {i}>")] = self._validate(
                GenerationResult, row, self.generations, i
            )
        return out

    def read_evaluations(self) -> dict[str, EvalResult]:
        """Latest evaluation per task id."""
        out: dict[str, EvalResult] = {}
        for i, row in enumerate(self.evaluations.iter_records(), 1):
            out[row.get("task_id", f"<record {i}>")] = self._validate(EvalResult, row, self.evaluations, i)
        return out

    @staticmethod
    def _validate(model: type[Any], row: dict[str, Any], f: JsonlFile, i: int) -> Any:
        try:
            return model.model_validate(row)
        except ValueError as exc:
            raise ArtifactError(f"{f.path}: record {i} is not a valid {model.__name__}: {exc}") from exc

    def append_generation(self, generation: GenerationResult) -> None:
        self.generations.append(generation)

    def append_evaluation(self, evaluation: EvalResult) -> None:
        self.evaluations.append(evaluation)

    def write_score(self, score: ScoreResult) -> None:
        write_json_atomic(self.score_path, score.model_dump(mode="json"))

    def read_score(self) -> ScoreResult | None:
        if not self.score_path.exists():
            return None
        return ScoreResult.model_validate(read_json(self.score_path))

    def log_dir(self, task_id: str) -> Path:
        """The per-task log directory handed to ``generate`` (created on first use)."""
        name = safe_name(task_id)
        path = self.run_dir / LOGS_DIR / name
        if name not in self._created_logs:
            path.mkdir(parents=True, exist_ok=True)
            self._created_logs.add(name)
        return path
