"""Process isolation layers for a worker, and a report of which ones are active.

Two places apply them:

* **Parent side** (``launch_prefix``): wrap the worker command in ``bwrap`` (private mount, PID and network
  namespaces, a read-only root, the service's work dir hidden except the worker's own dirs) or, where
  bubblewrap is missing, ``unshare`` (PID + network + mount namespaces with a private ``/proc``).
  ``worker_environment`` gives the worker an allow-listed environment, never the service's secrets.
* **Child side** (``harden_worker``, called first thing in the worker, before torch starts threads):
  rlimits (no core dumps, file size, process count, optional address space) and Landlock: writes only
  beneath the worker's temp and build dirs, reads only beneath system and Python dirs, no TCP connect or
  bind (ABI >= 4), signals and abstract unix sockets scoped to the worker's own processes (ABI >= 6).
  Landlock is a few syscalls through ctypes, needs no privilege and works inside or outside namespaces,
  so it is the layer with the most protection per line; the namespaces add defence in depth.

Every layer degrades gracefully: what could not be applied is named in ``IsolationReport.fallbacks``.
The launcher is chosen by running its launch (``try_launch``: the very flags and mounts of a worker's),
never a lighter command: inside a container that masks parts of /proc (Docker's and podman's defaults),
namespaces work but a fresh /proc cannot be mounted, so ``auto`` then takes the launcher without its PID
namespace rather than a launch that fails at the first worker (README: "Isolation inside a container").
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Launcher = Literal["bwrap", "unshare", "none"]

# ---- report -------------------------------------------------------------------------------------


class IsolationReport(BaseModel):
    """Which isolation layers protect a worker (sent back in the worker's ``ready`` message)."""

    launcher: Launcher = "none"
    pid_namespace: bool = False
    net_namespace: bool = False
    mount_namespace: bool = False
    ipc_namespace: bool = False
    #: A /dev/shm of the worker's own (bwrap mounts it; under unshare the worker does: ``private_shm``).
    private_shm: bool = False
    landlock_abi: int = 0
    landlock_fs: bool = False
    landlock_net: bool = False
    landlock_scoped_signals: bool = False
    no_new_privs: bool = False
    rlimits: dict[str, int] = Field(default_factory=dict)
    fallbacks: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        layers: list[str] = []
        if self.launcher != "none":
            ns = [n for n in ("pid", "net", "mount", "ipc") if getattr(self, f"{n}_namespace")]
            layers.append(f"{self.launcher}({','.join(ns)})")
        if self.private_shm:
            layers.append("private-shm")
        if self.landlock_fs:
            layers.append(f"landlock-v{self.landlock_abi}")
        layers += [f"{k}={v}" for k, v in self.rlimits.items()]
        return ", ".join(layers) or "none"


# ---- parent side: namespaces --------------------------------------------------------------------


def _cap_sys_admin() -> bool:
    """Whether this process may create namespaces without a user namespace (root in a container often
    may not: Docker and podman drop CAP_SYS_ADMIN)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 21 & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _unshare_base(exe: str, pid_namespace: bool = True) -> list[str]:
    # A new PID namespace needs its own /proc: without it cuInit fails (CUDA_ERROR_OPERATING_SYSTEM, 304)
    # and torch silently sees no GPU (measured on the H100 host, bench/results/unshare_cuda_probe.txt).
    if pid_namespace:
        cmd = [exe, "--pid", "--fork", "--kill-child", "--net", "--mount", "--mount-proc"]
    else:
        cmd = [exe, "--fork", "--kill-child", "--net", "--mount"]
    if os.geteuid() != 0 or not _cap_sys_admin():
        cmd.append("--map-root-user")
    return cmd


#: The variable that tells a worker which namespaces its launch made (``policy_from_env``).
NAMESPACES_ENV = "KS_SANDBOX_NAMESPACES"

#: What each launcher gives a worker: its namespaces (``pid`` always with a /proc of its own).
NAMESPACES: dict[Launcher, tuple[str, ...]] = {
    "bwrap": ("pid", "net", "mount", "ipc", "uts"),
    "unshare": ("pid", "net", "mount"),
    "none": (),
}

#: Whether the probe found that a launcher works only without its PID namespace (and own /proc): a
#: container that masks paths of its /proc (Docker's and podman's defaults) refuses a fresh proc mount.
_without_pid: dict[Launcher, bool] = {}

#: The probe's code, run under the launch: the worker's own /proc must be there and writable (the CUDA
#: driver reads and writes it) and its dirs writable, as in a real worker.
_PROBE = (
    "import os, sys; open(f'/proc/{os.getpid()}/comm', 'w').write('ks-probe'); open(sys.argv[1], 'w').close()"
)


def namespaces(launcher: Launcher, pid_namespace: bool | None = None) -> tuple[str, ...]:
    """The namespaces a worker started by ``launch_prefix(launcher)`` is in (as probed here)."""
    if pid_namespace is None:
        pid_namespace = not _without_pid.get(launcher, False)
    return tuple(n for n in NAMESPACES[launcher] if pid_namespace or n != "pid")


def _describe(launcher: Launcher, pid_namespace: bool) -> str:
    return f"{launcher} {'with' if pid_namespace else 'without'} a PID namespace"


def try_launch(launcher: Launcher, pid_namespace: bool = True, timeout: float = 30.0) -> str | None:
    """Run what a worker's launch runs (``launch_prefix``: the same flags and mounts, a throwaway work
    dir hidden and its worker dir bound back, this Python) with a tiny program; None when it worked,
    else why not (the launcher's own words)."""
    if shutil.which(launcher) is None:
        return f"{launcher} not installed"
    with tempfile.TemporaryDirectory(prefix="ks-sandbox-probe-") as d:
        root = Path(d)
        work = root / "workers" / "probe"
        work.mkdir(parents=True)  # as the pool makes a worker's dir before its launch
        cmd = launch_prefix(launcher, writable=[work], hidden=[root], pid_namespace=pid_namespace)
        try:
            res = subprocess.run(
                [*cmd, sys.executable, "-c", _PROBE, str(work / "written")],
                capture_output=True,
                timeout=timeout,
                check=False,
                cwd=work,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{_describe(launcher, pid_namespace)} fails here: {exc}"
        if res.returncode == 0 and (work / "written").exists():
            return None
        err = res.stderr.decode(errors="replace").strip().splitlines()
        said = err[-1] if err else f"exit {res.returncode}"
        return f"{_describe(launcher, pid_namespace)} fails here: {said}"


@cache
def available_launcher(preferred: str = "auto") -> tuple[Launcher, tuple[str, ...]]:
    """The best launcher whose launch really works here (probed once: ``try_launch`` runs exactly what a
    worker's launch runs), and why better ones were skipped.

    ``auto`` tries bwrap, then unshare, each with a PID namespace, then each without one (a container
    that masks parts of /proc refuses a fresh proc mount, which a PID namespace needs), then none.
    A named launcher is tried in full only: a downgrade is for ``auto`` to make, not for a setting.
    """
    order: list[tuple[Launcher, bool]]
    if preferred == "bwrap":
        order = [("bwrap", True)]
    elif preferred == "unshare":
        order = [("unshare", True)]
    else:
        order = [("bwrap", True), ("unshare", True), ("bwrap", False), ("unshare", False)]
    why: list[str] = []
    for launcher, pid in order:
        failure = try_launch(launcher, pid)
        if failure is None:
            _without_pid[launcher] = not pid
            return launcher, tuple(why)
        if failure not in why:
            why.append(failure)
    if len(order) == 1 and shutil.which(order[0][0]) and try_launch(order[0][0], False) is None:
        why.append(f"{_describe(order[0][0], False)} works: sandbox='auto' would use it")
    return "none", tuple(why)


def _python_dirs() -> list[Path]:
    """This Python's install and every directory on its import path: what a worker started with it reads."""
    dirs = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent]
    return [*dirs, *(Path(p) for p in sys.path if p)]


def _under_tmp(paths: Iterable[Path]) -> list[Path]:
    """The existing ``paths`` inside /tmp, outermost only, each once."""
    tmp = Path("/tmp").resolve()
    found = sorted({p.resolve() for p in paths if p.exists() and tmp in p.resolve().parents})
    return [p for i, p in enumerate(found) if not any(q in p.parents for q in found[:i])]


def launch_prefix(
    launcher: Launcher,
    *,
    writable: Iterable[Path],
    hidden: Iterable[Path] = (),
    pid_namespace: bool | None = None,
) -> list[str]:
    """Command prefix that starts the worker inside ``launcher``'s namespaces.

    ``writable``: the worker's temp dir and build cache (bound read-write). ``hidden``: dirs replaced by an
    empty tmpfs and files by /dev/null (the service's work dir, API keys file, other tenants' data);
    ``writable`` paths inside a hidden dir are bound back after it is hidden. Only bwrap hides paths.
    ``pid_namespace``: None, as ``available_launcher`` found it works here (with one where not probed).
    """
    if launcher == "none":
        return []
    if pid_namespace is None:
        pid_namespace = not _without_pid.get(launcher, False)
    if launcher == "unshare":
        exe = shutil.which("unshare")
        assert exe is not None
        return _unshare_base(exe, pid_namespace)
    exe = shutil.which("bwrap")
    assert exe is not None
    cmd = [exe, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm"]
    if pid_namespace:
        cmd += ["--proc", "/proc", "--unshare-pid"]
    else:
        # The host's /proc, writable as outside: under ``--ro-bind / /`` it would be read-only, and the
        # CUDA driver writes files of its own process there (see apply_landlock).
        cmd += ["--bind", "/proc", "/proc"]
    cmd += ["--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    cmd += ["--tmpfs", "/tmp"]
    # What runs the worker and lies under /tmp (a virtualenv or a checkout there) is bound back read-only:
    # hidden with the rest of /tmp, the worker could not even start its Python.
    for p in _under_tmp(_python_dirs()):
        cmd += ["--ro-bind", str(p), str(p)]
    for p in hidden:
        p = Path(p).resolve()
        if p.is_dir():
            cmd += ["--tmpfs", str(p)]
        elif p.exists():
            cmd += ["--ro-bind", "/dev/null", str(p)]
    for p in writable:
        p = Path(p).resolve()
        p.mkdir(parents=True, exist_ok=True)
        cmd += ["--bind", str(p), str(p)]
    return [*cmd, "--"]


#: Variables a worker inherits from the service, each by its exact name: what Python, compilers and CUDA
#: need. Everything else is dropped, whatever its name (a secret may be called anything, ``KS_DB_PASSWORD``
#: or ``TORCH_HUB_CREDENTIALS`` included); the service hands its own settings to a worker explicitly
#: (``extra``: devices, threads, sandbox settings, MPS pipes).
ENV_ALLOW = frozenset(
    {
        "PATH", "LANG", "LC_ALL", "TERM", "TZ", "VIRTUAL_ENV",
        "PYTHONPATH", "PYTHONHASHSEED",
        "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
        "CC", "CXX", "MAX_JOBS",
        "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING", "CUDA_DEVICE_ORDER", "TORCH_CUDA_ARCH_LIST",
        "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
        "KS_ARENA", "KS_OWN_BASELINE",  # transport.ARENA_ENV (an experiment); OWN_BASELINE_ENV (the service's setting)
    }
)  # fmt: skip


def worker_environment(
    parent: Mapping[str, str], tmp: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The worker's environment: the named variables of ``parent``, then ``extra``. No secret of the
    service reaches a submission unless the service names it.

    HOME, TMPDIR and the Triton/Inductor/CUDA JIT caches point into the worker's temp dir (the only place it may
    write besides the build cache).
    """
    env = {k: v for k, v in parent.items() if k in ENV_ALLOW}
    env.update(
        {
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "TRITON_CACHE_DIR": str(tmp / "triton-cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
            "CUDA_CACHE_PATH": str(tmp / "cuda-cache"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
        }
    )
    env.update(dict(extra or {}))
    return env


# ---- child side: rlimits + Landlock -------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

_READ = FS_READ_FILE | FS_READ_DIR
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(v))


def default_readable() -> list[Path]:
    """System and Python dirs a worker must read (to import torch, run compilers, open the GPU)."""
    roots = [
        "/usr",
        "/lib",
        "/lib32",
        "/lib64",
        "/bin",
        "/sbin",
        "/etc",
        "/opt",
        "/sys",
        "/proc",
        "/dev",
        "/run",
    ]
    paths = [Path(p) for p in roots]
    paths += [Path(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    paths.append(Path(sys.executable).resolve().parent.parent)
    # sys.path minus a script's own dir (sys.path[0]): that may be anywhere, e.g. next to a secret.
    paths += [Path(p) for p in sys.path[1:] if p and Path(p).is_dir()]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.append(Path(os.environ[var]))
    return paths


@dataclass
class HardenPolicy:
    """What ``harden_worker`` applies. ``writable``: temp + build dirs; ``readable``: extra read roots."""

    writable: list[Path]
    readable: list[Path] = field(default_factory=list)
    fsize_bytes: int | None = 1 << 30
    nproc: int | None = None
    address_space: int | None = None
    landlock: bool = True
    deny_tcp: bool = True
    scope_signals: bool = True
    #: The namespaces the launch made (``namespaces``); None: all of the launcher's.
    namespaces: tuple[str, ...] | None = None


def set_rlimits(policy: HardenPolicy, report: IsolationReport) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    report.rlimits["core"] = 0
    if policy.fsize_bytes is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG, no kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (policy.fsize_bytes, policy.fsize_bytes))
        report.rlimits["fsize"] = policy.fsize_bytes
    if policy.nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (policy.nproc, policy.nproc))
        report.rlimits["nproc"] = policy.nproc
        if os.geteuid() == 0:
            report.fallbacks.append(
                "RLIMIT_NPROC does not bind root: a fork bomb is only stopped by the timeout"
            )
    if policy.address_space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (policy.address_space, policy.address_space))
        report.rlimits["as"] = policy.address_space


def apply_landlock(policy: HardenPolicy, report: IsolationReport) -> None:
    """Restrict this process (and its future children) with Landlock; irreversible.

    Must run before other threads exist: Landlock applies to the calling thread and what it creates.
    """
    abi = landlock_abi()
    report.landlock_abi = abi
    if abi < 1:
        report.fallbacks.append("Landlock unavailable: file system and network not restricted in-process")
        return
    fs = (1 << 13) - 1  # ABI 1 rights
    if abi >= 2:
        fs |= FS_REFER
    if abi >= 3:
        fs |= FS_TRUNCATE
    if abi >= 5:
        fs |= FS_IOCTL_DEV
    fs &= ~FS_EXECUTE  # executing system binaries (compilers) stays allowed; reading them is governed
    net = NET_BIND_TCP | NET_CONNECT_TCP if policy.deny_tcp and abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if policy.scope_signals and abi >= 6 else 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    rfd = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if rfd < 0:
        report.fallbacks.append(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
        return
    try:
        rules = [(p, fs & _READ) for p in [*default_readable(), *policy.readable]]
        for p in policy.writable:
            Path(p).mkdir(parents=True, exist_ok=True)  # a missing dir would silently grant nothing
        rules += [(p, fs) for p in policy.writable]
        dev_rights = fs & (_READ | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
        rules += [(Path("/dev"), dev_rights), (Path("/dev/shm"), fs)]
        # CUDA's driver writes files of its own process in /proc while it initialises: without this,
        # cuInit fails with 304 (measured on the H100 host). Only this process's dir, only file writes.
        rules += [(Path(f"/proc/{os.getpid()}"), fs & (_READ | FS_WRITE_FILE | FS_TRUNCATE))]
        for path, rights in rules:
            _add_path_rule(libc, rfd, path, rights)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            report.fallbacks.append(f"no_new_privs failed: {os.strerror(ctypes.get_errno())}")
            return
        report.no_new_privs = True
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            report.fallbacks.append(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
            return
    finally:
        os.close(rfd)
    report.landlock_fs = True
    report.landlock_net = bool(net)
    report.landlock_scoped_signals = bool(scoped & SCOPE_SIGNAL)
    if not net:
        report.fallbacks.append(f"Landlock ABI {abi} < 4: TCP not restricted in-process")
    if not scoped:
        report.fallbacks.append(f"Landlock ABI {abi} < 6: signals to other processes not scoped")


def _add_path_rule(libc: ctypes.CDLL, rfd: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a missing optional root (e.g. /lib32) grants nothing
    try:
        if not path.is_dir():
            rights &= _FILE_RIGHTS  # files take file rights only (EINVAL otherwise)
        rule = _PathBeneath(rights, fd)
        libc.syscall(
            ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(rfd), _RULE_PATH_BENEATH, ctypes.byref(rule), 0
        )
    finally:
        os.close(fd)


def harden_worker(policy: HardenPolicy, launcher: Launcher = "none") -> IsolationReport:
    """Apply the in-child layers to this process; returns what is active (never raises for a missing layer)."""
    report = IsolationReport(launcher=launcher)
    ns = NAMESPACES[launcher] if policy.namespaces is None else policy.namespaces
    report.pid_namespace, report.net_namespace = "pid" in ns, "net" in ns
    report.mount_namespace, report.ipc_namespace = "mount" in ns, "ipc" in ns
    report.private_shm = launcher == "bwrap" or _shm_mounted
    set_rlimits(policy, report)
    if policy.landlock:
        try:
            apply_landlock(policy, report)
        except OSError as exc:  # pragma: no cover - defensive: never let hardening kill the worker
            report.fallbacks.append(f"Landlock failed: {exc}")
    else:
        report.fallbacks.append("Landlock disabled by configuration")
    if launcher == "none":
        report.fallbacks.append("no namespaces: the worker shares the host's PID and network namespaces")
    elif not report.pid_namespace:
        report.fallbacks.append(
            "no PID namespace: the worker sees the processes beside the service (its signals are scoped "
            "only by Landlock ABI >= 6)"
        )
    if not report.private_shm:
        report.fallbacks.append("no private /dev/shm: the worker shares the host's")
    return report


#: ``mount(2)`` flags of a worker's own ``/dev/shm``.
_MS_NOSUID, _MS_NODEV = 2, 4
_shm_mounted = False  # set by private_shm in this process (a worker), read by harden_worker


def private_shm() -> str | None:
    """Mount an empty tmpfs on ``/dev/shm`` in this process's own mount namespace (call it only under a
    launcher that made one); the reason when that failed, else None.

    Why: the CUDA driver keeps inter-process events (the judge's *go*, a side's *done*) in POSIX shared
    memory (one event's IPC handle made ``/dev/shm/cuda.shm.0.263.1`` on the H200 host). Every worker in a
    PID namespace of its own has the same PIDs (its judge is PID 1, its zygote 2, ...), and with the host's
    ``/dev/shm`` two workers on two GPUs opened each other's events: a side started before its inputs were
    written (wrong outputs, slow input preparation) whenever another GPU's worker was busy: 7 of 12 honest
    jobs correct on two GPUs at once, 12 of 12 on either GPU alone, and 12 of 12 on both with a private
    ``/dev/shm`` (2x H200, BENCHMARKS.md). The worker, its zygote and its sides share this one.
    """
    global _shm_mounted
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), b"mode=1777")
    if rc != 0:
        return f"a private /dev/shm could not be mounted: {os.strerror(ctypes.get_errno())}"
    _shm_mounted = True
    return None


def policy_from_env(tmp: Path, env: Mapping[str, str] = os.environ) -> HardenPolicy:
    """The policy the pool passed through ``KS_SANDBOX_*`` variables (paths joined by ``os.pathsep``)."""

    def paths(name: str) -> list[Path]:
        return [Path(p) for p in env.get(name, "").split(os.pathsep) if p]

    def opt_int(name: str) -> int | None:
        v = env.get(name)
        return int(v) if v else None

    return HardenPolicy(
        writable=[tmp, *paths("KS_SANDBOX_WRITABLE")],
        readable=paths("KS_SANDBOX_READABLE"),
        fsize_bytes=opt_int("KS_SANDBOX_FSIZE") or 1 << 30,
        nproc=opt_int("KS_SANDBOX_NPROC"),
        address_space=opt_int("KS_SANDBOX_AS"),
        landlock=env.get("KS_SANDBOX_LANDLOCK", "1") != "0",
        namespaces=None
        if env.get(NAMESPACES_ENV) is None
        else tuple(n for n in env[NAMESPACES_ENV].split(",") if n),
    )


# ---- leftover processes -------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphans of this process's descendants reparent to it (not to init), so that a daemonised
    grandchild (double fork + setsid, which escapes a process-group kill) stays findable and killable."""
    try:
        return bool(_libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


_PR_SET_PDEATHSIG = 1


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``Popen``: the child gets SIGKILL when this process dies (``kill -9``
    included), and kills itself at once if this process died before the hook ran.

    The kernel sends it when the *thread* that forked the child ends: spawn from a thread that lives as
    long as the process's use of the child (the event loop's). None off Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = _libc().prctl  # resolved here: the child, forked from a threaded process, only calls it
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def die_with_parent() -> bool:
    """Get SIGKILL when the parent process dies (call it first thing in a child that must not outlive it).
    A parent already gone by then (this process was reparented to init or a subreaper) cannot be told
    from a live one, so a child that starts slowly should also watch its pipes."""
    try:
        return bool(_libc_once().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


@cache
def _libc_once() -> ctypes.CDLL:
    """libc, loaded once: a process that forks calls it in the child without loading anything there."""
    return _libc()


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process visible here, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name, which is in parentheses and may contain spaces.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            out[int(entry)] = int(fields[1])
    return out


def child_pids(pid: int | None = None) -> list[int]:
    """Direct children of ``pid`` (default: this process), from /proc."""
    me = os.getpid() if pid is None else pid
    return [p for p, parent in parent_pids().items() if parent == me]


def kill_leftover_processes(rounds: int = 5, keep: set[int] | frozenset[int] = frozenset()) -> int:
    """SIGKILL and reap every descendant still alive after a job (call it after each job in a subreaper
    worker); returns how many were killed. The worker should be recycled when this is not 0."""
    killed = 0
    for _ in range(rounds):
        kids = [p for p in child_pids() if p not in keep]
        if not kids:
            break
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed
