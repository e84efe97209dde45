"""A judge builds an op's inputs once and keeps them between jobs (``case_cache``): the same op judged
again gets the very same inputs, and no kernel can change what the next kernel is judged on."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from kernel_service.backendbench.case_cache import Answer, CaseCache, key_of
from kernel_service.backendbench.evaluator import Prepared, case_cache, evaluate_batch, prepare
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench.schemas import BackendBenchEvalRequest
from kernel_service.judging.harness import probe_environment
from kernel_service.judging.judging import Judge
from kernel_service.judging.sandbox import HardenPolicy

#: Writes its input, then answers with relu of the zeroed tensor: wrong, and the input is changed.
ZEROES_ITS_INPUT = """import torch
def relu__default_kernel_impl(x):
    x.zero_()
    return torch.clamp(x, min=0)
"""


def request(op: str, **options: object) -> BackendBenchEvalRequest:
    body = {"dataset": "backendbench-opinfo", "op": op, "suite": "opinfo", "source": reference_source(op)}
    return BackendBenchEvalRequest.model_validate({**body, "options": options})


def own_judge(tmp: Path) -> Judge:
    return Judge(probe_environment(), HardenPolicy(writable=[tmp], landlock=False), tmp)


def test_an_op_judged_again_gets_the_same_inputs_built_once() -> None:
    cache = CaseCache()
    first, second = prepare(request("abs.default"), cache), prepare(request("abs.default"), cache)
    assert isinstance(first, Prepared) and isinstance(second, Prepared)
    assert second.correctness is first.correctness and len(cache) == 1
    other = prepare(request("abs.default", seed=7), cache)
    assert isinstance(other, Prepared) and other.correctness is not first.correctness  # another seed
    assert len(cache) == 2


def test_a_kernel_that_writes_its_inputs_changes_nothing_for_the_next_kernel() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        judge = own_judge(Path(tmp))
        body = {"dataset": "backendbench-opinfo", "op": "relu.default", "suite": "opinfo"}
        honest = {**body, "source": reference_source("relu.default")}
        bad, again = evaluate_batch([{**body, "source": ZEROES_ITS_INPUT}, honest], judge)["verdicts"]
        cache = case_cache(judge)
        assert len(cache) == 1  # one op, built once for both kernels
        kept = prepare(request("relu.default"), cache)
    fresh = prepare(request("relu.default"))
    assert bad["outcome"] == "incorrect"
    assert again["outcome"] == "correct", again["feedback"]
    assert isinstance(kept, Prepared) and isinstance(fresh, Prepared)
    assert len(kept.correctness) == len(fresh.correctness) == again["n_correctness_inputs"]
    for k, f in zip(kept.correctness, fresh.correctness, strict=True):  # the judge's copy is untouched
        assert torch.equal(k.args[0], f.args[0]) and k.args[0].abs().sum() > 0


def test_the_cache_keeps_the_most_recent_ops_within_its_bytes() -> None:
    kept = prepare(request("abs.default"))
    assert isinstance(kept, Prepared)
    req = request("abs.default")
    cache = CaseCache(max_bytes=1)  # nothing fits
    cache.put(key_of(req, kept.device, ["float32"]), kept.correctness, kept.perf, kept.forbidden)
    assert len(cache) == 0
    cache = CaseCache()
    for seed in range(3):
        cache.put(("op", seed), kept.correctness, kept.perf, set())
    assert cache.get(("op", 0)) is not None
    size = cache.get(("op", 0)).nbytes  # type: ignore[union-attr]
    small = CaseCache(max_bytes=2 * size)
    for seed in range(3):
        small.put(("op", seed), kept.correctness, kept.perf, set())
    assert len(small) == 2 and small.get(("op", 0)) is None and small.get(("op", 2)) is not None


#: relu that is wrong on negative inputs (passes them through).
WRONG_RELU = """import torch
def relu__default_kernel_impl(x):
    return x.clone()
"""


def test_the_ops_answers_are_kept_and_a_warm_pass_judges_kernels_without_the_reference(
    forked: list[str],
) -> None:
    body = {"dataset": "backendbench-opinfo", "op": "relu.default", "suite": "opinfo"}
    # as_strided's inputs are checked one at a time (never grouped): their answers are kept too
    strided = {**body, "op": "as_strided.default", "source": reference_source("as_strided.default")}
    with tempfile.TemporaryDirectory() as tmp:
        judge = own_judge(Path(tmp))
        first, first_strided = evaluate_batch(
            [{**body, "source": reference_source("relu.default")}, strided], judge
        )["verdicts"]
        assert first["outcome"] == first_strided["outcome"] == "correct"
        assert forked == ["reference", "candidate"]
        for op in ("relu.default", "as_strided.default"):
            kept = prepare(request(op), case_cache(judge))
            assert isinstance(kept, Prepared) and kept.answered, op  # every input's answer kept
        forked.clear()
        verdicts = evaluate_batch(
            [{**body, "source": s} for s in (ZEROES_ITS_INPUT, WRONG_RELU, reference_source("relu.default"))]
            + [strided],
            judge,
        )["verdicts"]
    # judged on the kept answers alone: no reference process; each wrong kernel still caught, and a
    # wrong kernel's verdict is reached again in a candidate process of its own (never a reference)
    assert "reference" not in forked, forked
    zeroes, wrong, honest, again_strided = verdicts
    assert again_strided["outcome"] == "correct", again_strided["feedback"]
    assert again_strided["n_correctness_inputs"] == first_strided["n_correctness_inputs"] > 1
    assert zeroes["outcome"] == "incorrect" and "input differs after the call" in zeroes["feedback"]
    assert wrong["outcome"] == "incorrect"
    assert honest["outcome"] == "correct", honest["feedback"]
    assert honest["n_correctness_inputs"] == first["n_correctness_inputs"]


def test_answers_beyond_the_byte_budget_are_not_kept() -> None:
    kept = prepare(request("abs.default"))
    assert isinstance(kept, Prepared)
    cache = CaseCache()
    cache.put(("op",), kept.correctness, kept.perf, set())
    size = cache.get(("op",)).nbytes  # type: ignore[union-attr]
    answer = Answer(kept.correctness[0].args[0].clone(), ([], {}), [None])
    tight = CaseCache(max_bytes=size)
    tight.put(("op",), kept.correctness, kept.perf, set())
    tight.keep_answers(("op",), {0: answer})
    assert tight.answers(("op",)) == {}  # over the budget: inputs kept, answer not
    cache.keep_answers(("op",), {0: answer})
    assert cache.answers(("op",)) == {0: answer} and cache.get(("op",)).nbytes > size  # type: ignore[union-attr]


#: mm on inputs it accepts and on one whose shapes do not match: the op rejects that one every time
MISMATCHED = (
    "Operator: aten.mm.default\ncnt: 2, ((T([6, 3], f32), T([3, 5], f32)), {})\n"
    "cnt: 1, ((T([6, 4], f32), T([3, 5], f32)), {})\n"
)
#: padding an input it accepts, and one it cannot allocate memory for (4 TiB): that may pass later
UNALLOCATABLE = (
    "Operator: aten.constant_pad_nd.default\ncnt: 1, ((T([3], f32), [1, 2]), {})\n"
    "cnt: 1, ((T([2], f32), [0, 1099511627776]), {})\n"
)


def test_an_input_the_op_always_rejects_is_kept_and_one_it_may_accept_later_is_not(
    forked: list[str],
) -> None:
    """A warm pass needs no reference process for an op that rejects some of its inputs (BackendBench's
    grid_sampler_3d started one in every warm suite), while a rejection that says nothing lasting about
    the input (memory ran out) is asked of the reference process again."""
    from kernel_service.backendbench.traces import parse_upstream_trace

    def body(op: str, trace: str) -> dict[str, object]:
        return {
            "dataset": "backendbench-torchbench", "op": op, "suite": "torchbench",
            "source": reference_source(op),
            "options": {"trace": parse_upstream_trace(trace), "measure_performance": False},  # untimed
        }  # fmt: skip

    mm, pad = body("mm", MISMATCHED), body("constant_pad_nd.default", UNALLOCATABLE)
    with tempfile.TemporaryDirectory() as tmp:
        judge = own_judge(Path(tmp))
        runs = []
        for _ in range(2):
            forked.clear()
            runs.append((evaluate_batch([mm], judge)["verdicts"], list(forked)))
        (cold, cold_forks), (warm, warm_forks) = runs
        forked.clear()
        padded = [evaluate_batch([pad], judge)["verdicts"][0] for _ in range(2)]
        pad_forks = list(forked)
    for verdict in (*cold, *warm, *padded):
        assert verdict["outcome"] == "correct", verdict["feedback"]
    # the input the op rejects is no test, cold or warm
    assert cold[0]["n_correctness_inputs"] == warm[0]["n_correctness_inputs"] == 1
    assert cold_forks == ["reference", "candidate"] and warm_forks == ["candidate"], (cold_forks, warm_forks)
    assert pad_forks.count("reference") == 2, pad_forks  # the input memory ran out on: asked again
