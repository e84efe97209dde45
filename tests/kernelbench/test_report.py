"""The HTML report of a real (small) run, opened in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import click
import pytest
from kernelbench_runner.benchmark import KernelBenchRunner
from kernelbench_runner.report import write_report

from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult
from benchmark_runner.testing.fake_llm import FakeLLMServer

RIGHT = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"
BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x) return x\n"
WRONG_SOFTMAX = (
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.exp()\n"
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def call(python: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_kernel", "arguments": {"python": python}}]}


@pytest.fixture(scope="module")
def run_dir(kernel_service_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with four outcomes: LLM fixed after a compile error, reference, wrong kernel, no kernel."""
    import anyio

    root = tmp_path_factory.mktemp("runs") / "r1"

    async def main() -> None:
        runner = KernelBenchRunner(service=ServiceClient(kernel_service_url), options={"backend": "torch"})
        tasks = {t.id: t for t in runner.load_tasks(None)}
        script = {"L1_2_ReLU": [call(BROKEN), call(RIGHT)], "L1_5_Softmax": [call(WRONG_SOFTMAX)]}
        gens: list[GenerationResult] = []
        with FakeLLMServer(script) as fake:
            for task_id in ("L1_2_ReLU", "L1_5_Softmax"):
                config = LLMConfig(model="fake", base_url=fake.url, max_turns=2, extra={"backend": "torch"})
                gens.append(await runner.generate(tasks[task_id], "fake", config, root / "logs" / task_id))
        ref = tasks["L1_1_Elementwise_add"]
        gens.append(
            await runner.OFFLINE_MODELS["reference"](
                runner, ref, LLMConfig(model="x"), root / "logs" / ref.id
            )
        )
        gens.append(
            GenerationResult(task_id="L2_1_Matmul_Bias_ReLU", model="fake", error="LLMError: refused")
        )
        evals = [await runner.evaluate(tasks[g.task_id], g) for g in gens]
        score = await runner.score(evals, "fake")
        (root / "generations").mkdir()
        for g in gens:
            (root / "generations" / f"{g.task_id}.json").write_text(g.model_dump_json())
        (root / "evaluations.jsonl").write_text("".join(e.model_dump_json() + "\n" for e in evals))
        (root / "score.json").write_text(score.model_dump_json())
        assert runner.service is not None
        await runner.service.aclose()

    anyio.run(main)
    return root


class DomSummary(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.svg_ids: list[str] = []
        self.rows: list[dict[str, str]] = []
        self.links: list[str] = []
        self.rects: list[dict[str, str]] = []
        self.scripts = 0
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and a.get("id"):
            self.svg_ids.append(a["id"])
        if tag == "tr" and a.get("class") == "task":
            self.rows.append(a)
        if tag == "a":
            self.links.append(a["href"])
        if tag == "rect" and "data-outcome" in a:
            self.rects.append(a)
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if a.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append(a[key])


def test_report_content_without_browser(run_dir: Path) -> None:
    page = write_report(run_dir)
    assert page == run_dir / "report.html"
    dom = DomSummary()
    dom.feed(page.read_text())
    assert {r["data-task"]: r["data-outcome"] for r in dom.rows} == {
        "L1_1_Elementwise_add": "correct",
        "L1_2_ReLU": "correct",
        "L1_5_Softmax": "incorrect",
        "L2_1_Matmul_Bias_ReLU": "no_kernel",
    }
    assert dom.scripts == 0 and dom.external == []
    for link in dom.links:  # every link resolves inside the run directory
        assert (page.parent / link).resolve().is_file(), link
    assert any(link.endswith("L1_2_ReLU/kernels/turn_0.py") for link in dom.links)
    assert any(link.endswith("L1_2_ReLU/kernels/feedback_0.json") for link in dom.links)
    feedback = json.loads((run_dir / "logs" / "L1_2_ReLU" / "kernels" / "feedback_0.json").read_text())
    assert feedback["result"]["outcome"] == "compilation_failure"
    # level 1 bar: 2 correct + 1 incorrect; level 2 bar: 1 no_kernel
    segs = {(r["data-group"], r["data-outcome"]): int(r["data-count"]) for r in dom.rects}
    assert segs == {
        ("all", "correct"): 2,
        ("all", "incorrect"): 1,
        ("all", "no_kernel"): 1,
        ("level 1", "correct"): 2,
        ("level 1", "incorrect"): 1,
        ("level 2", "no_kernel"): 1,
    }


def test_report_elsewhere_and_a_missing_run(run_dir: Path, tmp_path: Path) -> None:
    """The runner's `report RUN_ID` command is tested on a real run in test_kernelbench_cli.py."""
    out = tmp_path / "elsewhere" / "r.html"
    assert write_report(run_dir, out) == out and out.is_file()
    with pytest.raises(click.ClickException, match="no such run directory"):
        write_report(run_dir.parent / "nope")


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium); CI installs it")
def test_report_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    page = write_report(run_dir)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    assert CHROMIUM is not None
    dumped = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    dom = DomSummary()
    dom.feed(dumped)
    assert dom.svg_ids == ["speedup-histogram", "fast-p-curve", "outcomes-by-level"]
    assert len(dom.rows) == 4
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1400,1200", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
