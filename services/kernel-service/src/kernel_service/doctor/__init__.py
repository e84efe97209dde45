"""``kernel-service doctor``: whether scores can be trusted on the deployment it runs against (issue 54).

Every fault the project's scores have had showed only on a particular deployment (a second GPU's worker
giving false verdicts through a shared ``/dev/shm``, a short kernel read 12x slow on a host busy
compiling, faulting kernels spoiling neighbours under MPS on a multi-GPU host), and each was found by
judging a handful of known kernels on that host. The doctor does that in minutes: it starts the service
in-process with the settings ``serve`` would use (or talks to one at ``--url``), reads the environment,
and judges shipped kernels on every device through ``POST /v1/evaluate``:

- ``sandbox``: a probe submission tries the host's loopback, a file and a secret of the service's, and
  ``/dev/shm`` (``probe.py``);
- ``honest_self``: honest references against themselves, within a band;
- ``known_speedup`` (GPU): a real speedup against an independent timer in the same run, within 5%;
- ``cheats_no_reward``: outputs cached across calls, a patched timer, work left on a side stream (GPU);
- ``fault_beside_honest``: faulting submissions among honest ones, no neighbour harmed;
- ``busy_host`` (GPU, not ``--quick``): a short honest kernel with builds running beside it, within 10%.

Each is a ``checks.Check`` (name, what it runs, its pass rule, what to do when it fails); ``plans.py``
holds each path's kernels and bands; the kernels ship as package data (``data/``). The report is a
pydantic model (``report.DoctorReport``), rendered as a table ending in one verdict line.
"""

from .report import DoctorReport
from .run import DoctorOptions, run_doctor

__all__ = ["DoctorOptions", "DoctorReport", "run_doctor"]
