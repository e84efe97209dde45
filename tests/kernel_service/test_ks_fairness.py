"""Fair turns between runs sharing a service: the scheduler alone, then through real HTTP."""

from __future__ import annotations

import asyncio

import ks_sources as S
import pytest
from kernel_service.workers.scheduling import FairScheduler

from benchmark_runner.client import ServiceClient
from benchmark_runner.service.server import RunningServer


async def _grant_order(requests: list[str], slots: int = 1) -> list[str]:
    """Callers ask in the given order while every slot is taken; the order in which they get one."""
    sched = FairScheduler(slots)
    order: list[str] = []
    release = asyncio.Event()

    async def hold(caller: str) -> None:
        async with sched.slot(caller):
            order.append(caller)
            await release.wait()

    async def one(caller: str) -> None:
        async with sched.slot(caller):
            order.append(caller)
            await asyncio.sleep(0)

    holders = [asyncio.create_task(hold("first")) for _ in range(slots)]
    await asyncio.sleep(0)
    waiters = []
    for caller in requests:
        waiters.append(asyncio.create_task(one(caller)))
        await asyncio.sleep(0)  # queued in this order
    release.set()
    await asyncio.gather(*holders, *waiters)
    return order[slots:]


def test_waiting_callers_take_turns_in_rotation() -> None:
    order = asyncio.run(_grant_order(["A"] * 5 + ["B"] * 2 + ["C"]))
    assert order == ["A", "B", "C", "A", "B", "A", "A", "A"]


def test_one_caller_keeps_its_own_order_and_cancelled_waiters_free_nothing() -> None:
    async def main() -> tuple[list[int], dict[str, int]]:
        sched = FairScheduler(1)
        order: list[int] = []
        gate = asyncio.Event()

        async def job(i: int) -> None:
            async with sched.slot("A"):
                order.append(i)
                if i == 0:
                    await gate.wait()

        tasks = [asyncio.create_task(job(i)) for i in range(4)]
        await asyncio.sleep(0.01)
        tasks[2].cancel()  # waiting: removed from the queue, the slot count is untouched
        await asyncio.sleep(0)
        assert sched.waiting == {"A": 2}
        gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        async with sched.slot("B"):  # one slot, free again
            pass
        return order, sched.waiting

    order, waiting = asyncio.run(main())
    assert order == [0, 1, 3] and waiting == {}
    with pytest.raises(ValueError, match="slots: expected at least 1"):
        FairScheduler(0)


def test_a_second_run_is_not_queued_behind_a_first_runs_backlog(kernel_server: RunningServer) -> None:
    """Run A puts 8 evaluations in flight, then run B sends 2 (each client names its run in X-Run-Id):
    with turns at the 2 CPU workers, B's answers come back before A's backlog is done."""

    slow = S.SOL_MATMUL_OK.replace("import torch\n", "import time\nimport torch\n", 1).replace(
        "        return torch.mm",
        "        time.sleep(0.01)  # every evaluation holds its worker ~0.7 s\n        return torch.mm",
    )

    def body(i: int) -> dict[str, object]:  # distinct sources: no result-cache hits
        return {
            "reference": S.REF_MATMUL,
            "solution": f"{slow}\n# submission {i}\n",
            "options": {**S.FAST, "perf_trials": 60},
        }

    async def main() -> list[str]:
        done: list[str] = []
        async with (
            ServiceClient(kernel_server.url, run_id="run-A") as a,
            ServiceClient(kernel_server.url, run_id="run-B") as b,
        ):

            async def submit(client: ServiceClient, name: str, i: int) -> None:
                res = await client.post("/v1/evaluate", body(i))
                assert res["outcome"] == "correct", res
                done.append(name)

            backlog = [asyncio.create_task(submit(a, "A", i)) for i in range(8)]
            await asyncio.sleep(0.3)  # A's eight are queued at the service
            await asyncio.gather(*backlog, submit(b, "B", 100), submit(b, "B", 101))
        return done

    done = asyncio.run(main())
    assert sorted(done) == ["A"] * 8 + ["B"] * 2
    last_b = max(i for i, name in enumerate(done) if name == "B")
    assert last_b <= 6, f"run B waited behind run A's backlog: completion order {done}"
