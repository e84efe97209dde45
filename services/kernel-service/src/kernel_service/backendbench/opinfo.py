"""The opinfo suite: aten overloads and their inputs, chosen from PyTorch's OpInfo database (``op_db``)
by BackendBench's rule, so both suites test the same overloads on the same samples.

The rule (learned from meta-pytorch/BackendBench's ``suite/opinfo.py``, re-implemented): take every
OpInfo entry whose name has no dot (``nn.functional.*`` excepted) and that supports the dtype on the
device; run each of its sample inputs under a dispatch recorder; a sample counts for an overload when
the call reaches exactly that one aten overload, and calling the overload directly with the sample's
arguments gives the same result (``allclose``, 1e-2). One difference: a case passes the kernel the
arguments the overload actually received (the aten schema's form), not the Python-level ones.

Left out, each with its reason in the index (``excluded``): what BackendBench itself leaves out, random
ops (a value check cannot pass without replaying PyTorch's generator), uninitialised memory
(``empty_like``), sparse outputs, and ops with no reference kernel (``references``) in this torch.

The index (``data/opinfo_ops.json``, overload -> OpInfo names) is built by :func:`build_opinfo_index`
for one torch and device; ``python -m kernel_service.backendbench.opinfo build`` rewrites it and records
the torch it was built with. Samples are made afresh, on the evaluation device, for every evaluation.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..judging.harness import seed_all
from .cases import Case, DispatchRecorder, UnknownOpError, matches_op, overload_key
from .catalog import DATA_DIR, INDEX_FORMAT, OPINFO_INDEX, index_provenance, opinfo_index, read_index
from .traces import UPSTREAM_UNSUPPORTED

__all__ = ["OPINFO_INDEX", "index_provenance", "opinfo_index", "read_index"]  # what the index is: catalog

#: Overloads BackendBench's own op lists leave out (creation/manipulation, random), and those its
#: torchbench suite does not support (one list, in ``traces``).
UPSTREAM_LEFT_OUT = frozenset(
    {
        "cat.default",
        "copy_.default",
        "elu_backward.default",
        "new_empty.default",
        "new_empty_strided.default",
        "new_full.default",
        "new_ones.default",
        "new_zeros.default",
        "nonzero.default",
        "repeat.default",
        "split.Tensor",
        "split_with_sizes.default",
        "unsqueeze_.default",
        "bernoulli.default",
        "bernoulli.Tensor",
    }
) | frozenset(UPSTREAM_UNSUPPORTED)
#: OpInfo entries BackendBench skips by name.
UPSTREAM_SKIPPED_ENTRIES = frozenset({"nonzero_static"})

REASON_UPSTREAM = "left out by BackendBench itself (its lists of creation, random and unsupported ops)"
REASON_RANDOM = (
    "random: its values come from the generator, so only a kernel that replays PyTorch's RNG stream "
    "could match them"
)
REASON_RANDOM_IN_PLACE = (
    REASON_RANDOM + " (BackendBench passes every kernel of this in-place op: the op returns its input, "
    "so its check compares the kernel's result with itself)"
)
REASON_UNINITIALISED = "uninitialised memory: the op's output has no values to check"
REASON_SPARSE = "sparse output: the judge passes and compares strided (dense) tensors only"
REASON_TRANSPORT = "its inputs have a dtype or layout the judge cannot pass to a side process"
REASON_NO_REFERENCE = (
    "no reference kernel here: PyTorch has no Python decomposition of it in this torch and none is "
    "hand-written, so the reference baseline could not pass it"
)


def exclusion_reason(overload: torch._ops.OpOverload) -> str | None:
    """Why an overload the rule selects is not a task of the suite (None: it is one)."""
    key = overload_key(overload)
    if key in UPSTREAM_LEFT_OUT:
        return REASON_UPSTREAM
    if torch.Tag.nondeterministic_seeded in overload.tags:
        return REASON_RANDOM_IN_PLACE if overload.overloadpacket.__name__.endswith("_") else REASON_RANDOM
    packet = overload.overloadpacket.__name__
    if packet in ("empty_like", "empty", "empty_strided", "new_empty", "new_empty_strided"):
        return REASON_UNINITIALISED
    if packet.startswith("_to_sparse") or packet.startswith("to_sparse"):
        return REASON_SPARSE
    return None


# ---- the selection rule ---------------------------------------------------------------------------


@dataclass
class Traced:
    """One OpInfo sample that reaches exactly one aten overload, with the arguments that overload got."""

    overload: torch._ops.OpOverload
    index: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@lru_cache(maxsize=1)
def op_db_entries() -> dict[str, Any]:
    """OpInfo entries by full name (``max.reduction_with_dim``), as BackendBench iterates them."""
    from torch.testing._internal.common_methods_invocations import op_db  # ~5 s: numpy, expecttest

    return {
        info.full_name: info
        for info in op_db
        if ("." not in info.name or "nn.functional" in info.name)
        and info.name not in UPSTREAM_SKIPPED_ENTRIES
    }


def _identical(x: torch.Tensor, y: Any) -> bool:
    return (
        isinstance(y, torch.Tensor)
        and x.layout == y.layout == torch.strided
        and x.shape == y.shape
        and x.dtype == y.dtype
        and x.device == y.device
        and bool(torch.equal(x, y))
    )


def _close(a: Any, b: Any) -> bool:
    """BackendBench's ``allclose``: tensors within 1e-2 (NaN equal to NaN), anything else equal."""
    stack = [(a, b)]
    try:
        while stack:
            x, y = stack.pop()
            if isinstance(x, torch.Tensor):
                if _identical(x, y):  # the common case, without assert_close's cost
                    continue
                torch.testing.assert_close(x, y, equal_nan=True, atol=1e-2, rtol=1e-2)
            elif isinstance(x, (list, tuple)):
                if not isinstance(y, (list, tuple)) or len(x) != len(y):
                    return False
                stack.extend(zip(x, y, strict=True))
            elif x != y:
                return False
    except Exception:  # noqa: BLE001 - any mismatch or comparison failure means "not close"
        return False
    return True


def _seed(seed: int) -> None:
    """``set_rng_seed(seed)`` of PyTorch's test utilities (see :func:`~kernel_service.judging.harness.seed_all`)."""
    import numpy as np

    seed_all(seed)
    np.random.seed(seed)


def sample_inputs(info: Any, device: str, dtype: torch.dtype) -> Iterator[Any]:
    """``info.sample_inputs(device, dtype)``, the same samples without its per-call cost: OpInfo's
    iterator looks for the running unittest by ``inspect.stack()`` (reading the source of every frame,
    ~40 ms here) only to pick a seed; outside a test that seed is ``SEED``, set before each sample as
    OpInfo sets it. Lazy: a sample is made when it is asked for."""
    from torch.testing._internal.common_utils import SEED

    made = iter(info.sample_inputs_func(info, device, dtype, False))
    while True:
        _seed(SEED)
        try:
            sample = next(made)
        except StopIteration:
            return
        yield sample


def traced_samples(info: Any, device: str, dtype: torch.dtype) -> Iterator[Traced]:
    """The samples of ``info`` that count for an overload under BackendBench's rule (lazily)."""
    samples = sample_inputs(info, device, dtype)
    i = -1
    while True:
        try:
            sample = next(samples)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001 - an OpInfo that cannot make (more) samples here has no more
            return
        i += 1
        rec = DispatchRecorder(keep_args=True)
        try:
            with rec:
                ref = info.op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - the sample is not valid here
            continue
        if len(rec.calls) != 1:
            continue
        func, args, kwargs = rec.calls[0]
        if not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten":
            continue
        try:
            direct = func(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - the overload does not take the sample's own arguments
            continue
        if _close(ref, direct):
            yield Traced(func, i, tuple(args), dict(kwargs))


def _crosses(value: Any) -> bool:
    """Whether every tensor in ``value`` can be passed to a side process (dense, a known dtype)."""
    from ..judging.transport import DTYPES

    if isinstance(value, torch.Tensor):
        return value.layout == torch.strided and str(value.dtype).removeprefix("torch.") in DTYPES
    if isinstance(value, (list, tuple)):
        return all(_crosses(v) for v in value)
    if isinstance(value, dict):
        return all(_crosses(v) for v in value.values())
    return True


# ---- the index ------------------------------------------------------------------------------------


def selection_dtypes(info: Any, device: str, dtype: torch.dtype, fallback: torch.dtype) -> list[torch.dtype]:
    """The dtype an entry is selected with here: ``dtype`` where this device supports it for the entry;
    else ``fallback`` when the entry supports ``dtype`` on CUDA (so a CPU build holds the ops that an H100
    selects in bf16 but this CPU has no bf16 kernel for); else none."""
    if dtype in info.supported_dtypes(device):
        return [dtype]
    if (
        device != "cuda"
        and dtype in info.supported_dtypes("cuda")
        and fallback in info.supported_dtypes(device)
    ):
        return [fallback]
    return []


def build_opinfo_index(
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    fallback: torch.dtype = torch.float32,
    entries: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Scan ``op_db`` with BackendBench's rule (in ``dtype``, as BackendBench's run in bf16): the suite's
    overloads, with the OpInfo entries whose samples count for each, and the overloads the rule selects
    that are left out, with the reason. ``entries``: only these OpInfo entries (all by default)."""
    from .references import has_reference

    ops: dict[str, list[str]] = {}
    excluded: dict[str, str] = {}
    wanted = None if entries is None else set(entries)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, info in op_db_entries().items():
            if wanted is not None and name not in wanted:
                continue
            for dt in selection_dtypes(info, device, dtype, fallback):
                for traced in traced_samples(info, device, dt):
                    key = overload_key(traced.overload)
                    reason = exclusion_reason(traced.overload)
                    if reason is None and not has_reference(key):
                        reason = REASON_NO_REFERENCE
                    if reason is None and not _crosses((traced.args, traced.kwargs)):
                        reason = REASON_TRANSPORT
                    if reason is not None:
                        excluded.setdefault(key, reason)
                        continue
                    names = ops.setdefault(key, [])
                    if name not in names:
                        names.append(name)
    return {
        "format": INDEX_FORMAT,
        "torch": torch.__version__,
        "device": device,
        "dtypes": [str(dtype).removeprefix("torch."), f"{str(fallback).removeprefix('torch.')} (fallback)"],
        "built_with": f"python -m kernel_service.backendbench.opinfo build --device {device}",
        "ops": dict(sorted(ops.items())),
        "excluded": dict(sorted((k, v) for k, v in excluded.items() if k not in ops)),
    }


def checkable_here(op: str) -> bool:
    """Whether this torch has the overload and a reference kernel for it (the index may come from
    another torch: an op whose decomposition this torch lacks is left out, not scored against nothing)."""
    from .references import has_reference

    return has_reference(op)


# ---- cases ----------------------------------------------------------------------------------------


def _upcast(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        low = value.dtype in (torch.float16, torch.bfloat16, torch.float32)
        return value.to(torch.float64) if low else value
    if isinstance(value, (list, tuple)):
        return type(value)(_upcast(v) for v in value)
    if isinstance(value, dict):
        return {k: _upcast(v) for k, v in value.items()}
    return value


def _cast_like(value: Any, like: Any) -> Any:
    if isinstance(value, torch.Tensor) and isinstance(like, torch.Tensor):
        return value.to(like.dtype) if like.dtype.is_floating_point else value
    if isinstance(value, (list, tuple)) and isinstance(like, (list, tuple)) and len(value) == len(like):
        return type(value)(_cast_like(v, w) for v, w in zip(value, like, strict=True))
    return value


def well_conditioned(case: Case) -> bool:
    """Whether the op is accurate to the suite's tolerance at this sample: its result in the test dtype
    agrees with its result on the same inputs in float64. Where it does not (a sum that cancels, a
    product rounded before a subtraction), the verdict would hang on the order in which the op rounds,
    so a kernel as accurate as the op, or more, could fail: such samples are not tests."""
    from .compare import compare
    from .tensors import clone_value

    if _upcast(case.args) is case.args and _upcast(case.kwargs) is case.kwargs:
        return True
    try:
        low = case.overload(*clone_value(case.args), **clone_value(case.kwargs))
        high = case.overload(*_upcast(clone_value(case.args)), **_upcast(clone_value(case.kwargs)))
    except Exception:  # noqa: BLE001 - no float64 kernel here: nothing to hold the sample against
        return True
    mismatch, _ = compare(low, _cast_like(high, low))
    return mismatch is None


#: Ops that return the index of a value: where values tie, PyTorch leaves the index to the
#: implementation (an unstable sort), so only samples without ties along the dim have one answer.
INDEX_ON_TIES = frozenset({"sort", "topk", "kthvalue", "median", "nanmedian", "mode"})


def _argument(case: Case, name: str, default: Any) -> Any:
    for i, arg in enumerate(case.overload._schema.arguments):
        if arg.name == name:
            if i < len(case.args):
                return case.args[i]
            return case.kwargs.get(name, default)
    return default


def answer_is_unique(case: Case) -> bool:
    """False for a sample of an :data:`INDEX_ON_TIES` op whose input has equal values along the dim
    (a stable sort excepted): the op's indices there are one valid answer among several."""
    packet = case.overload.overloadpacket.__name__
    if packet not in INDEX_ON_TIES or _argument(case, "stable", False) is True:
        return True
    x = case.args[0]
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return True
    if packet in ("median", "nanmedian") and case.overload._overloadname == "default":
        return True  # the value alone: ties do not matter
    dim = _argument(case, "dim", -1)
    rows = torch.sort(x.movedim(dim, -1), dim=-1).values
    return bool((rows[..., 1:] != rows[..., :-1]).all())


def opinfo_cases(op: str, device: str, dtypes: list[torch.dtype], max_inputs: int) -> list[Case]:
    """The samples that count for ``op``, per dtype, as calls of the overload (dtypes interleaved, so a
    cap keeps every dtype represented). Left out: samples where the op is ill-conditioned
    (:func:`well_conditioned`; a dtype may lose all of them) and samples whose answer is not unique
    (:func:`answer_is_unique`), unless that would leave no sample at all."""
    index = opinfo_index()
    keys = [k for k in index if k == op or k.split(".")[0] == op]
    if not keys:
        raise UnknownOpError(f"op {op!r} is not in the opinfo suite; its ops are: {', '.join(sorted(index))}")
    names = list(dict.fromkeys(n for k in keys for n in index[k]))
    db = op_db_entries()

    def found(dtype: torch.dtype) -> Iterator[Case]:
        label = str(dtype).removeprefix("torch.")
        for name in names:
            info = db.get(name)
            if info is None or dtype not in info.supported_dtypes(device):
                continue
            for traced in traced_samples(info, device, dtype):
                if matches_op(op, traced.overload) and _crosses((traced.args, traced.kwargs)):
                    yield Case(traced.overload, traced.args, traced.kwargs, "correctness", label)

    kept = _interleave(
        [(c for c in found(dt) if well_conditioned(c) and answer_is_unique(c)) for dt in dtypes], max_inputs
    )
    if kept:  # else every sample disagrees with float64: the op's meaning depends on the dtype
        return kept
    return _interleave([found(dt) for dt in dtypes], max_inputs)


def _interleave(streams: list[Iterator[Case]], limit: int) -> list[Case]:
    """The first of each stream, then the second of each..., up to ``limit`` (streams are read lazily:
    the checks behind a filtered stream run only for the samples that are needed)."""
    merged: list[Case] = []
    active = list(streams)
    while active and len(merged) < limit:
        still = []
        for stream in active:
            case = next(stream, None)
            if case is None:
                continue
            merged.append(case)
            still.append(stream)
            if len(merged) == limit:
                break
        active = still
    return merged


#: BackendBench's own opinfo suite on one H100 (see the file's header): what ``coverage`` compares with.
BACKENDBENCH_OPS = DATA_DIR / "backendbench_opinfo_h100.txt"


def coverage(wanted: list[str], index: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Which of ``wanted`` the suite lists here, and why each other one is left out."""
    listed = [n for n in wanted if n in index["ops"] and checkable_here(n)]
    missing: dict[str, str] = {}
    for name in wanted:
        if name in listed:
            continue
        why = index.get("excluded", {}).get(name)
        if why is None:
            why = REASON_NO_REFERENCE if name in index["ops"] else "not selected on this device/torch"
        missing[name] = why
    return listed, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild or inspect the opinfo suite's index.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="scan op_db with BackendBench's rule and write the index")
    build.add_argument("--device", default="cpu", help="cpu or cuda (the device the service judges on)")
    build.add_argument("--output", type=Path, default=OPINFO_INDEX, help="[default: the bundled index]")
    cover = sub.add_parser("coverage", help="which names of an overload list the suite lists here")
    cover.add_argument("names", type=Path, nargs="?", default=BACKENDBENCH_OPS, help="one overload a line")
    cover.add_argument("--index", type=Path, default=OPINFO_INDEX)
    args = parser.parse_args(argv)
    if args.command == "build":
        index = build_opinfo_index(args.device)
        args.output.write_text(json.dumps(index, indent=1) + "\n")
        print(f"{len(index['ops'])} overloads, {len(index['excluded'])} left out -> {args.output}")
        return 0
    index = read_index(args.index)
    lines = args.names.read_text().splitlines()
    wanted = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    listed, missing = coverage(wanted, index)
    print(
        f"{len(listed)}/{len(wanted)} ({100 * len(listed) / max(len(wanted), 1):.1f}%) listed; {index_provenance()}"
    )
    for name, why in missing.items():
        print(f"  {name}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
