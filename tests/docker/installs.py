"""Helpers of the install-anywhere tests: fresh shells, fresh virtualenvs, this checkout's pins.

Everything is real: ``create-benchmark-runner`` writes a runner into a temporary directory outside
this checkout, its own ``make install`` and ``make test`` run in a shell that knows nothing of this
repository's virtualenv, and the Dockerfile replays install into virtualenvs made for them. pip's
wheel cache keeps this within a few minutes (packages come from it, not the network, after a first
run), and so does one virtualenv for the replays, with one torch install (``SharedVenv``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
#: The torch pin of the root Makefile (the CPU build this machine's pip has on disk).
TORCH_PIN = re.search(r"^TORCH_PIN \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)  # type: ignore[union-attr]
PASS_THROUGH = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TERM", "PYENV_ROOT", "PYENV_VERSION")


def fresh_env(**extra: str) -> dict[str, str]:
    """A new shell's environment: PATH without this checkout's venv, no Python variables, pip's config."""
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if p and Path(p) != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if k in PASS_THROUGH or k.startswith("PIP_")}
    return {**env, "PATH": ":".join(path), "PYTHONDONTWRITEBYTECODE": "1", **extra}


def sh(
    command: str | list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run a command (a string goes to ``bash -c``); the result, whatever its exit status."""
    args = ["bash", "-c", command] if isinstance(command, str) else command
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def readme_block(section: str) -> str:
    """The first ```bash block under ``## SECTION`` of the README, comment lines dropped."""
    text = (ROOT / "README.md").read_text()
    body = text[text.index(f"## {section}\n") :]
    block = body[body.index("```bash\n") + len("```bash\n") :]
    lines = block[: block.index("```")].splitlines()
    return "".join(f"{ln}\n" for ln in lines if ln.strip() and not ln.lstrip().startswith("#"))


def make_venv(path: Path) -> Path:
    """A new, empty virtualenv at ``path`` (this interpreter's Python, its bundled pip)."""
    proc = sh([sys.executable, "-m", "venv", str(path)], path.parent, fresh_env())
    assert proc.returncode == 0, proc.stderr
    return path


def our_version() -> str:
    """The library version in this checkout's pyproject.toml."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


#: What a runner image installs to build the runner itself, not to run anything: an image without a
#: runner (the service's) need not ask for it.
BUILD_BACKEND = frozenset({"setuptools>=68", "wheel"})


@dataclass
class SharedVenv:
    """The one clean virtualenv the Dockerfile replays share, in order: a fresh venv per image would cost
    a torch install (~900 MB) and the common dependencies each time.

    Sharing hides nothing as long as each image's own requirements include everything the replays
    before it installed (``installed``): whatever an image finds already there, its own files asked
    for too. The build backend of a runner image is the one allowed exception (``BUILD_BACKEND``).
    """

    venv: Path
    installed: set[str] = field(default_factory=set)

    def check_and_add(self, context: Path) -> None:
        files = [context / "build/docker" / name for name in ("torch.txt", "requirements.txt")]
        wanted = {line for f in files for line in f.read_text().splitlines() if line.strip()}
        missing = self.installed - wanted - BUILD_BACKEND
        assert not missing, (
            f"an earlier replay in this venv installed what {context} does not ask for: {missing}"
        )
        self.installed |= wanted
