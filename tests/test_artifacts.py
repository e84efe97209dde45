"""RunArtifacts on real files: torn tails, corrupt lines, atomic JSON, a full disk, the run lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmark_runner.artifacts import (
    ArtifactError,
    JsonlFile,
    RunArtifacts,
    RunLockedError,
    safe_name,
    write_json_atomic,
)
from benchmark_runner.schemas import EvalResult, EvalResultData, EvalStatus, GenerationResult


def _gen(task_id: str, payload: str = "42") -> GenerationResult:
    return GenerationResult(task_id=task_id, model="m", payload=payload)


def test_append_and_read_back_with_last_record_winning(tmp_path: Path) -> None:
    with RunArtifacts(tmp_path / "r") as arts:
        arts.append_generation(_gen("a", "1"))
        arts.append_generation(_gen("b", "2"))
        arts.append_generation(_gen("a", "3"))
        arts.append_evaluation(
            EvalResult(task_id="a", model="m", data=EvalResultData(status=EvalStatus.CORRECT))
        )
    lines = (tmp_path / "r" / "generations.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 4  # one object per line, newline-terminated
    arts = RunArtifacts(tmp_path / "r")
    gens = arts.read_generations()
    assert {k: g.payload for k, g in gens.items()} == {"a": "3", "b": "2"}
    assert arts.read_evaluations()["a"].data.status == EvalStatus.CORRECT


def test_torn_last_line_is_dropped_then_truncated_before_next_append(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": 2}\n{"id": 3, "tr')
    f = JsonlFile(path)
    assert f.read() == [{"id": 1}, {"id": 2}]
    assert f.torn_tail_bytes() == len(b'{"id": 3, "tr')
    f.append({"id": 4})
    f.close()
    assert path.read_bytes() == b'{"id": 1}\n{"id": 2}\n{"id":4}\n'
    assert JsonlFile(path).torn_tail_bytes() == 0


def test_torn_file_without_any_newline(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id"')
    f = JsonlFile(path)
    assert f.read() == []
    f.append({"id": 1})
    f.close()
    assert path.read_bytes() == b'{"id":1}\n'


def test_corrupt_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": 1}\nnot json\n{"id": 3}\n')
    with pytest.raises(ArtifactError, match=r"x\.jsonl:2: corrupt line"):
        JsonlFile(path).read()
    path.write_bytes(b'{"id": 1}\n[1, 2]\n')
    with pytest.raises(ArtifactError, match=r"x\.jsonl:2: expected a JSON object"):
        JsonlFile(path).read()


def test_invalid_record_names_the_model(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "generations.jsonl").write_text('{"task_id": "a", "model": "m", "bogus": 1}\n')
    with pytest.raises(ArtifactError, match="record 1 is not a valid GenerationResult"):
        RunArtifacts(run).read_generations()


def test_write_json_atomic_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_safe_name_keeps_distinct_ids_distinct() -> None:
    assert safe_name("task-1") == "task-1"
    names = {safe_name(x) for x in ["a/b", "a_b", "a b", "../a", "a\\b", "a:b"]}
    assert len(names) == 6
    for n in names:
        assert "/" not in n and not n.startswith(".")


def test_log_dir_is_created_inside_the_run(tmp_path: Path) -> None:
    with RunArtifacts(tmp_path / "r") as arts:
        d = arts.log_dir("../../escape")
        assert d.is_dir() and d.resolve().is_relative_to((tmp_path / "r" / "logs").resolve())


def test_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    with RunArtifacts(tmp_path / "r"):
        with pytest.raises(RunLockedError, match=f"in use by pid {os.getpid()}"):
            RunArtifacts(tmp_path / "r").create()
    with RunArtifacts(tmp_path / "r"):  # released on close
        pass


_FULL_DISK_CHILD = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    from benchmark_runner.artifacts import JsonlFile
    path = Path(sys.argv[1])
    limit = int(sys.argv[2])
    if limit:  # a file size limit: writes past it fail with EFBIG (a short write first)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    f = JsonlFile(path)
    ok = 0
    try:
        for i in range(100000):
            f.append({"i": i, "pad": "x" * 97})
            ok += 1
    except OSError as exc:
        print(json.dumps({"ok": ok, "errno": exc.errno, "msg": str(exc)}))
    """
)


def _fill_until_error(path: Path, limit: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(path), str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _assert_intact(path: Path, ok: int) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n"), "a partial line was left behind"
    rows = JsonlFile(path).read()
    assert [r["i"] for r in rows] == list(range(ok))


def test_file_size_limit_mid_line_truncates_the_partial_line(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (works unprivileged): the line crossing the limit is written short, then EFBIG."""
    path = tmp_path / "x.jsonl"
    res = _fill_until_error(path, 5000)  # the line crossing 5000 bytes is written short
    assert res["errno"] == 27  # EFBIG
    assert "cannot append to" in str(res["msg"])
    _assert_intact(path, int(res["ok"]))  # type: ignore[call-overload]
    ok = int(res["ok"])  # type: ignore[call-overload]
    size = path.stat().st_size
    next_line = len(json.dumps({"i": ok, "pad": "x" * 97}, separators=(",", ":"))) + 1
    assert size <= 5000 < size + next_line  # every line that fitted was kept; the one crossing was cut


def test_disk_full_on_a_tiny_tmpfs_keeps_earlier_lines(tmp_path: Path) -> None:
    """A real ENOSPC; needs root to mount a tmpfs (the RLIMIT test above covers the unprivileged case)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode
    ):
        pytest.skip("cannot mount a tmpfs here (not root); covered by the RLIMIT_FSIZE test")
    try:
        res = _fill_until_error(mnt / "x.jsonl", 0)
        assert res["errno"] == 28  # ENOSPC
        assert int(res["ok"]) > 100  # type: ignore[call-overload]
        _assert_intact(mnt / "x.jsonl", int(res["ok"]))  # type: ignore[call-overload]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
