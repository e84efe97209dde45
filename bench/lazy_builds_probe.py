"""Which builds the compile worker's lazy runs reach, for each solution of a corpus, run as the compile
worker runs them: CUDA's torch with no GPU visible (``CUDA_VISIBLE_DEVICES=""``) and the judging GPUs'
``TORCH_CUDA_ARCH_LIST``, each solution in a process of its own, ``load_inline``/``load`` replaced by a
stub that notes the extension's name (nothing is compiled). It prints, per solution, the builds reached by
its import and after each run (``workers.lazy_builds.lazy_runs``: on ``meta``, then on fake CUDA tensors)
and the error of each step that raised.

Why: a build the compile pool does not reach is made on a GPU worker's clock (15-37 s each in CUDA-L1's
first release). On this machine's CPU torch the fake run reached every build it should; on the GPU host's
CUDA torch it reached none, for two reasons only a run there showed (dynamo's trace rules, a fake CUDA
tensor starting a real context): this probe is how a device call finds such a difference in seconds::

    python bench/lazy_builds_probe.py --solutions .gpudata/corpus/h100_xsm.json --tasks L1_34 L1_47 L2_20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from _sources import use_sources  # bench/ (the script's dir) is on sys.path

use_sources("kernelbench-runner")

from kernelbench_runner.solutions import load_solutions  # noqa: E402

CHILD = """
import sys
from pathlib import Path
from torch.utils import cpp_extension
from kernel_service.judging.harness import load_module
from kernel_service.workers import lazy_builds

reached = []

def stub(*args, **kwargs):
    reached.append(kwargs.get("name") or args[0])
    raise RuntimeError("probe: not built")

work = Path(sys.argv[1])
cpp_extension.load_inline = cpp_extension.load = stub  # before the import: a build at import is noted too
reference = load_module((work / "reference.py").read_text(), "reference", work)
source = (work / "solution.py").read_text()
try:
    module = load_module(source, "solution", work)  # as the compile worker imports it: no answers yet
except BaseException as exc:
    print(f"import: {type(exc).__name__}: {exc}"[:300])
    sys.exit(0)
print("import reached", list(reached))
errors, after = [], []
lazy_builds.lazy_runs(module, reference, source, work, lambda: after.append(list(reached)), errors)
print("after each run", after)
for e in errors:
    print("error:", e.strip().splitlines()[-1][:300])
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--solutions", type=Path, required=True, help="a corpus file (JSON or JSON lines)")
    parser.add_argument("--tasks", nargs="*", default=[], help="task ids (L1_34 ...); all where none")
    parser.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST the compile worker is given")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lazy-builds-probe"))
    args = parser.parse_args()
    tasks = load_solutions(args.solutions, list).tasks
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": args.arch}
    for task in tasks:
        task_id = f"L{task.level}_{task.problem_id}"
        if args.tasks and task_id not in args.tasks or task.solution is None:
            continue
        work = args.work / task_id
        work.mkdir(parents=True, exist_ok=True)
        (work / "reference.py").write_text(task.reference_code)
        (work / "solution.py").write_text(task.solution.code)
        try:
            got = subprocess.run([sys.executable, "-c", CHILD, str(work)], env=env, capture_output=True,
                                 text=True, timeout=120)  # fmt: skip
            out = got.stdout.strip() or got.stderr.strip()[-300:]
        except subprocess.TimeoutExpired:
            out = "timed out after 120 s"
        print(f"== {task_id}\n{out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
