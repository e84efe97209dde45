"""benchmark_runner.docker_context: our packages become wheels, everything else a public requirement.

The whole path (a runner's `make docker-context`, then the Dockerfile replayed) runs in
tests/docker/test_dockerfile_replay.py; here the rules it rests on, on real (small) wheels.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from benchmark_runner.docker_context import ContextError, build_context, split_public, wheel_requirements


def make_wheel(directory: Path, name: str, requires: list[str]) -> Path:
    """A minimal, valid pure-Python wheel of ``name`` (one module, its metadata)."""
    dist = name.replace("-", "_")
    path = directory / f"{dist}-0.2.0-py3-none-any.whl"
    info = f"{dist}-0.2.0.dist-info"
    meta = "Metadata-Version: 2.1\n" + f"Name: {name}\nVersion: 0.2.0\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}.py", "")
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


def test_ours_are_dropped_torch_split_out_duplicates_once() -> None:
    torch, public = split_public(
        ["llmbench-runner>=0.1", "LLMBench_Kernel_Service", "torch>=2.4", "numpy", "torch>=2.4", "click>=8"]
    )
    assert torch == ["torch>=2.4"]
    assert public == ["numpy", "click>=8"]


def test_requirements_only_an_extra_asks_for_are_left_out(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path,
        "llmbench-kernel-service",
        ["numpy", 'ray>=2.9; extra == "ray"', "tomli; python_version < '3.11'"],
    )
    assert wheel_requirements(wheel) == ["numpy", "tomli; python_version < '3.11'"]


def test_the_context_holds_our_wheels_and_the_public_requirements(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    lib = make_wheel(src, "llmbench-runner", ["click>=8.1", "pydantic>=2.5"])
    service = make_wheel(src, "llmbench-kernel-service", ["llmbench-runner", "torch>=2.4", "numpy"])
    project = tmp_path / "runner"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x-runner"\ndependencies = ["llmbench-runner>=0.1", "llmbench-kernel-service", "torch>=2.4", "rich"]\n'
        '[build-system]\nrequires = ["setuptools>=68"]\n'
    )
    out = project / "build/docker"
    wheels = build_context([str(lib), str(service)], out, project)
    assert sorted(w.name for w in wheels) == sorted([lib.name, service.name])
    assert (
        out / "requirements.txt"
    ).read_text() == "numpy\nclick>=8.1\npydantic>=2.5\nrich\nsetuptools>=68\n"
    assert (out / "torch.txt").read_text() == "torch>=2.4\n"


def test_a_wheel_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    stranger = make_wheel(tmp_path, "benchmark-runner", [])
    with pytest.raises(ContextError, match="not packages of this project: benchmark_runner-0.2.0"):
        build_context([str(stranger)], tmp_path / "ctx")


def test_the_command_line_reports_a_failing_source(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark_runner.docker_context",
            "--out",
            str(tmp_path / "ctx"),
            "--",
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "docker context: pip wheel" in proc.stderr
