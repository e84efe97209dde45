"""Which ops each BackendBench suite holds, and the smoke and facto suites' sample specs: data, read
without importing torch. A runner that talks to a remote service lists a suite and names its ops with
this and ``listing.suite_ops`` alone (a torch import cost a runner process 2.6 s of its 4-6 s start on the H100); the inputs are
built from it where they are used (``suites``, in the worker).

The opinfo suite is the index ``data/opinfo_ops.json``, built for one torch by
``opinfo.build_opinfo_index`` (which lists only overloads with a reference kernel in that torch). Under
the torch it was built with, every overload it lists is checkable; under another, each is checked against
this torch (``opinfo.checkable_here``, which imports it). That check and the torchbench trace are
needed to list a suite's ops, so ``suite_ops`` lives in ``listing``: this module is data, below every
other module of the package, and imports none of them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"
OPINFO_INDEX = DATA_DIR / "opinfo_ops.json"
INDEX_FORMAT = "backendbench-opinfo-index/2"


class UnknownOpError(ValueError):
    """The op is not part of the suite (the message lists the suite's ops)."""


# ---- op families (shared by smoke and facto) --------------------------------------------------

T = dict[str, Any]


def t(*shape: int, init: str = "randn", dtype: str = "$", stride: list[int] | None = None) -> T:
    spec: T = {"T": list(shape), "dtype": dtype, "init": init}
    if stride is not None:
        spec["stride"] = stride
    return spec


#: op -> (family, default overload). The family decides which edge cases facto generates.
FAMILIES: dict[str, tuple[str, str]] = {
    "add": ("binary", "aten.add.Tensor"),
    "sub": ("binary", "aten.sub.Tensor"),
    "mul": ("binary", "aten.mul.Tensor"),
    "relu": ("unary", "aten.relu.default"),
    "neg": ("unary", "aten.neg.default"),
    "abs": ("unary", "aten.abs.default"),
    "sigmoid": ("unary", "aten.sigmoid.default"),
    "sum": ("reduction", "aten.sum.dim_IntList"),
    "mean": ("reduction", "aten.mean.dim"),
    "amax": ("reduction", "aten.amax.default"),
    "mm": ("matmul", "aten.mm.default"),
    "softmax": ("softmax", "aten.softmax.int"),
}

#: (overload or None for the family default, args, kwargs)
SampleSpec = tuple[str | None, list[Any], dict[str, Any]]

SMOKE_CORRECTNESS: dict[str, list[SampleSpec]] = {
    "add": [
        (None, [t(2, 3), t(2, 3)], {}),
        (None, [t(4, 1), t(1, 5)], {}),
        (None, [t(3, 4), t(3, 4)], {"alpha": 2}),
        (None, [t(8), 1.5], {}),
    ],
    "mul": [(None, [t(2, 3), t(2, 3)], {}), (None, [t(4, 1), t(1, 5)], {}), (None, [t(8), -0.5], {})],
    "relu": [(None, [t(2)], {}), (None, [t(16, 33)], {})],
    "sum": [
        ("aten.sum.default", [t(7, 5)], {}),
        (None, [t(4, 6), [1]], {}),
        (None, [t(3, 4, 5), [0, 2], True], {}),
    ],
    "mm": [(None, [t(8, 16), t(16, 4)], {}), (None, [t(1, 33), t(33, 7)], {})],
    "softmax": [(None, [t(4, 10), -1], {}), (None, [t(3, 5, 7), 1], {})],
}
SMOKE_PERFORMANCE: dict[str, list[SampleSpec]] = {
    "add": [(None, [t(1024, 1024), t(1024, 1024)], {})],
    "mul": [(None, [t(1024, 1024), t(1024, 1024)], {})],
    "relu": [(None, [t(1024, 1024)], {})],
    "sum": [(None, [t(1024, 1024), [1]], {})],
    "mm": [(None, [t(256, 256), t(256, 256)], {})],
    "softmax": [(None, [t(512, 1024), -1], {})],
}
SMOKE_OPS = tuple(SMOKE_CORRECTNESS)
FACTO_OPS = tuple(FAMILIES)


def installed_torch() -> str | None:
    """The installed torch's version, read without importing it (None: not installed)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def read_index(path: Path = OPINFO_INDEX) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@lru_cache(maxsize=1)
def _bundled_index() -> dict[str, Any]:
    return read_index()


def opinfo_index() -> dict[str, list[str]]:
    """overload (``add.Tensor``) -> the OpInfo entries whose samples count for it."""
    ops: dict[str, list[str]] = _bundled_index()["ops"]
    return ops


def release(version: str | None) -> str | None:
    """``2.11.0+cu130`` -> ``2.11.0``: the decompositions a reference uses are Python, the same in every
    build of a release (and a wheel's metadata may omit the build's local label that ``torch.__version__``
    shows: ``2.11.0`` for ``2.11.0+cu130`` on the H100 image)."""
    return None if version is None else version.split("+", 1)[0]


def built_for_this_torch() -> bool:
    """Whether the bundled index was built with the installed torch's release (then every op it lists
    has a reference kernel here)."""
    here = release(installed_torch())
    return here is not None and release(str(_bundled_index().get("torch"))) == here


def index_provenance() -> str:
    """Which torch, device and dtypes the index was built with, and whether that is this torch (the
    runner prints it next to the opinfo suite's op list)."""
    data = _bundled_index()
    dtypes = "+".join(data.get("dtypes", []))
    built, here = str(data.get("torch")), installed_torch()
    text = f"opinfo index built with torch {built} on {data.get('device')} ({dtypes})"
    if not built_for_this_torch():
        text += (
            f"; this is torch {here}: ops whose reference it lacks are left out, and "
            "`python -m kernel_service.backendbench.opinfo build --device cuda` rebuilds the index for it"
        )
    return text
