"""The Dockerfile replay itself can fail: what a Docker build would reject, the replay rejects too.

Small Dockerfiles, real files, real shells, no pip: a step that reads a file the Dockerfile never
copied, a COPY of a file `.dockerignore` keeps out, an undeclared build arg, a system step mixed into
an ordinary one. Also Docker's `.dockerignore` rules (last match wins, `!` re-includes, a matching
directory hides what is in it) and the parsing of continued instructions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dockerfile_replay import Image, ReplayError, context_files, parse, replay


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def do(tmp_path: Path, dockerfile: str, files: dict[str, str] | None = None, **build_args: str) -> Image:
    context = write(tmp_path / "ctx", {"Dockerfile": dockerfile, **(files or {})})
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    return replay(context / "Dockerfile", context, tmp_path / "root", venv, build_args)


def test_parse_joins_continuations_and_drops_comments() -> None:
    text = '# c\nFROM python:3.11-slim\n\nRUN a \\\n    # inner comment\n    && b\nCMD ["x"]\n'
    assert [(i.keyword, i.args, i.line) for i in parse(text)] == [
        ("FROM", "python:3.11-slim", 2),
        ("RUN", "a && b", 4),
        ("CMD", '["x"]', 7),
    ]


def test_a_step_sees_only_what_was_copied(tmp_path: Path) -> None:
    files = {"copied.txt": "hello", "left.txt": "nope"}
    image = do(tmp_path, "FROM scratch\nWORKDIR /app\nCOPY copied.txt ./\nRUN cat copied.txt > out\n", files)
    assert (image.host_path("/app/out")).read_text() == "hello"
    with pytest.raises(ReplayError, match=r"Dockerfile:4 RUN cat left.txt: exit 1"):
        do(tmp_path / "2", "FROM scratch\nWORKDIR /app\nCOPY copied.txt ./\nRUN cat left.txt\n", files)


def test_dockerignore_keeps_files_out_of_copy(tmp_path: Path) -> None:
    files = {".dockerignore": "secret\n", "secret/key": "k"}
    with pytest.raises(ReplayError, match="secret is not in the build context"):
        do(tmp_path, "FROM scratch\nCOPY secret ./secret/\n", files)


def test_directory_copy_contents_env_arg_and_entrypoint(tmp_path: Path) -> None:
    files = {"pkg/a/b.txt": "b", "pkg/c.txt": "c"}
    dockerfile = (
        "FROM scratch\nARG GREETING=hi\nENV HOME_DIR=/home/u \\\n    WHO=me\nWORKDIR /app\n"
        'COPY pkg ./pkg\nRUN test -f pkg/a/b.txt && echo "$GREETING $WHO" > greeting.txt\n'
        'USER u\nWORKDIR /home/u\nENTRYPOINT ["echo"]\nCMD ["default"]\n'
    )
    image = do(tmp_path, dockerfile, files, GREETING="hello")
    assert image.host_path("/app/greeting.txt").read_text() == "hello me\n"
    assert image.env["HOME_DIR"] == "/home/u"  # not a directory of the image when it was set
    assert (image.user, image.workdir, image.entrypoint, image.cmd) == ("u", "/home/u", ["echo"], ["default"])
    assert image.run([]).stdout == "default\n" and image.run(["x"]).stdout == "x\n"


def test_system_steps_are_skipped_only_on_their_own(tmp_path: Path) -> None:
    image = do(tmp_path, "FROM scratch\nRUN apt-get update && apt-get install -y x\nRUN useradd u\n")
    assert len(image.skipped) == 2 and not image.ran
    with pytest.raises(ReplayError, match="mixes system steps"):
        do(tmp_path / "2", "FROM scratch\nRUN apt-get install -y x && touch /etc/x\n")


def test_the_images_venv_is_the_replays_venv(tmp_path: Path) -> None:
    image = do(tmp_path, "FROM scratch\nRUN python3 -m venv /opt/venv\nENV PATH=/opt/venv/bin:$PATH\n")
    assert image.env["PATH"].startswith(f"{tmp_path / 'venv'}/bin:")


def test_an_undeclared_build_arg_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match=r"does not declare: \['NOPE'\]"):
        do(tmp_path, "FROM scratch\n", NOPE="1")


def test_dockerignore_rules_follow_docker(tmp_path: Path) -> None:
    ctx = write(
        tmp_path,
        {
            ".dockerignore": "build/*\n!build/docker\n**/__pycache__\n*.egg-info\n",
            "build/lib/x.py": "",
            "build/docker/wheels/a.whl": "",
            "pkg/__pycache__/m.pyc": "",
            "pkg/m.py": "",
            "x.egg-info/PKG-INFO": "",
        },
    )
    assert context_files(ctx) == {".dockerignore", "build/docker/wheels/a.whl", "pkg/m.py"}
    other = write(tmp_path / "2", {".dockerignore": "runs\n", "runs/a/b.json": "", "runs2/a": ""})
    assert context_files(other) == {".dockerignore", "runs2/a"}  # a matching directory hides its files
