"""``python -m benchmark_runner.demo`` (``make demo``): the whole pipeline in a few seconds, no API needed.

Runs the arithmetic example with the ``oracle`` offline model on its bundled data against its
embedded exact-match service (started on a loopback port), prints the score table and where the
artifacts are. Run it twice: the second run resumes and finds nothing left to do.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .examples.arithmetic import cli


def main(argv: list[str] | None = None) -> int:
    out = Path("runs")
    args = [
        "run",
        "--model",
        "oracle",
        "--run-id",
        "demo-arithmetic",
        "--output-dir",
        str(out),
        *(argv or []),
    ]
    print(f"$ arithmetic-runner {' '.join(args)}", file=sys.stderr)
    try:
        cli.main(args=args, prog_name="arithmetic-runner", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if code == 0:
            print(f"demo finished: artifacts in {out.resolve() / 'demo-arithmetic'}", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
