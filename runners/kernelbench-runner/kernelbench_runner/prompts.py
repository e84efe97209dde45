"""What the kernel agent says to the model, the tools it offers, and how replies become kernels.

The wording follows upstream KernelBench's prompt (optimise ``Model`` with custom kernels, name the
result ``ModelNew``), plus the two tools of the multi-turn loop. Changing any text here changes what
models produce: bump ``KERNELBENCH_GENERATION_VERSION`` when you do, so a resumed run does not mix
generations made under different prompts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kernel_service.judging.profile_text import profile_table

from .problems import KernelBenchTask, model_only_source

BACKEND_DISPLAY: dict[str, str] = {
    "cuda": "CUDA operators (C++/CUDA compiled with torch.utils.cpp_extension.load_inline)",
    "triton": "Triton kernels",
    "cpp": "C++ CPU operators (compiled with torch.utils.cpp_extension.load_inline)",
    "torch": "PyTorch operations",
}

#: Largest error text fed back to the model: the end of a log is where the error is.
FEEDBACK_CHARS = 2000
#: Largest profile table fed back to the model (``--feedback profile``; ~600 tokens).
PROFILE_CHARS = 2400

SYSTEM_PROMPT = """\
You are an expert GPU kernel engineer. You write custom {backend_display} to replace the PyTorch \
operators in a given architecture to get speedups. You may replace some operators and leave others \
unchanged, fuse several operators into one kernel (e.g. matmul+relu), or change the algorithm \
(e.g. online softmax). The result must compute the same outputs as the original, within tolerance.

Write a complete Python module that defines `class ModelNew(nn.Module)` with the same constructor \
arguments and forward signature as `Model`. Real code only, no pseudocode and no testing code.
{tool_help}"""

TOOL_HELP = """
You have two tools:
- `run_kernel(python, cuda=None, cpp=None)`: compiles your kernel, checks it against the reference on \
random inputs and times both. `python` is the module defining ModelNew. If you pass `cuda` and/or `cpp`, \
they are defined as the Python string variables `cuda_source` and `cpp_source` before your module runs, \
so it can call `load_inline(..., cuda_sources=cuda_source, cpp_sources=cpp_source)`. You get back \
whether it compiled, whether it is correct, and the speedup over the reference, or the error.
- `finish(python=None)`: submit your final answer (pass `python` to submit that module; without it the \
best correct kernel you ran is submitted) and stop.
You have at most {max_turns} turns. If you cannot call tools, answer with the module in a ```python block.
"""

PROFILE_HELP = """\
Each correct kernel's result also carries a profile of one untimed call of your ModelNew and of the \
reference Model: per kernel (on a CPU, per PyTorch op) its calls and time in microseconds, heaviest \
first, and the share of the call spent outside kernels (launches, Python, synchronisation: when it is \
large, fuse kernels or cut host work). Where Nsight Compute runs, your heaviest kernel's SM and DRAM \
throughput (% of peak: high DRAM with low SM means memory-bound; both low means latency- or \
occupancy-bound), achieved occupancy and registers per thread follow. The profile is advice; only the \
measured speedup counts.
"""

SINGLE_SHOT_HELP = """
Answer with the complete module in a single ```python code block.
"""

USER_PROMPT = """\
You are given the following architecture (task {task_id}):

```python
{source}
```

Optimize the architecture named Model with custom {backend_display}! Name your optimized output \
architecture ModelNew."""

RUN_KERNEL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_kernel",
        "description": "Compile, check and time a candidate ModelNew against the reference Model.",
        "parameters": {
            "type": "object",
            "properties": {
                "python": {"type": "string", "description": "Python module defining class ModelNew"},
                "cuda": {"type": ["string", "null"], "description": "CUDA source, bound to `cuda_source`"},
                "cpp": {"type": ["string", "null"], "description": "C++ source, bound to `cpp_source`"},
            },
            "required": ["python"],
        },
    },
}

FINISH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Submit the final kernel and stop. Without `python`, the best correct kernel run so far.",
        "parameters": {
            "type": "object",
            "properties": {"python": {"type": ["string", "null"], "description": "final ModelNew module"}},
        },
    },
}

TOOLS: list[dict[str, Any]] = [RUN_KERNEL_TOOL, FINISH_TOOL]


def prompt_source(task: KernelBenchTask, mode: str = "full") -> str:
    """The reference shown to the model: ``full`` (upstream's choice) or ``model`` (harness stripped)."""
    if mode == "full":
        return task.question
    if mode == "model":
        return model_only_source(task.question)
    raise ValueError(f"prompt source must be 'full' or 'model', got {mode!r}")


def system_prompt(backend: str, max_turns: int, use_tools: bool = True, profile: bool = False) -> str:
    """``profile`` (``--feedback profile``): a paragraph on reading the profile each result carries."""
    help_text = TOOL_HELP.format(max_turns=max_turns) if use_tools else SINGLE_SHOT_HELP
    if use_tools and profile:
        help_text += PROFILE_HELP
    return SYSTEM_PROMPT.format(backend_display=BACKEND_DISPLAY.get(backend, backend), tool_help=help_text)


def user_prompt(task: KernelBenchTask, backend: str, source_mode: str = "full") -> str:
    return USER_PROMPT.format(
        task_id=task.id,
        source=prompt_source(task, source_mode).rstrip(),
        backend_display=BACKEND_DISPLAY.get(backend, backend),
    )


def initial_messages(
    task: KernelBenchTask,
    backend: str,
    max_turns: int,
    use_tools: bool = True,
    source_mode: str = "full",
    profile: bool = False,
) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt(backend, max_turns, use_tools, profile)},
        {"role": "user", "content": user_prompt(task, backend, source_mode)},
    ]


# ---- replies -> kernels -----------------------------------------------------------------------------

_FENCE = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(text: str | None) -> str | None:
    """The kernel module in a plain-text reply: the last ```python block defining ModelNew, else the
    last python block, else the last fenced block of any language that defines ModelNew; ``None`` if none.
    """
    if not text:
        return None
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    python_blocks = [b for lang, b in blocks if lang in ("python", "py", "")]
    for candidates in (
        [b for b in python_blocks if "ModelNew" in b],
        python_blocks,
        [b for _, b in blocks if "ModelNew" in b],
    ):
        if candidates:
            return candidates[-1].strip() + "\n"
    if "class ModelNew" in text and "```" not in text:
        return text.strip() + "\n"
    return None


def assemble_solution(python: str, cuda: str | None = None, cpp: str | None = None) -> str:
    """One self-contained module from the tool's three parts: sources become string variables."""
    header = []
    if cuda:
        header.append(f"cuda_source = {cuda!r}")
    if cpp:
        header.append(f"cpp_source = {cpp!r}")
    if not header:
        return python
    return "# sources passed to run_kernel\n" + "\n".join(header) + "\n\n" + python


# ---- evaluation -> feedback ---------------------------------------------------------------------------


def _trim(text: str | None, limit: int = FEEDBACK_CHARS) -> str | None:
    if not text:
        return None
    text = text.strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def feedback_for(result: dict[str, Any]) -> dict[str, Any]:
    """The part of an evaluation the model sees: outcome, correctness, speedup or a trimmed error, and
    with a profile (``--feedback profile``) its table under ``profile`` (text, ``PROFILE_CHARS`` at most)."""
    outcome = str(result.get("outcome", "unknown_error"))
    out: dict[str, Any] = {"outcome": outcome, "correct": outcome == "correct"}
    if outcome == "correct":
        speedup = result.get("speedup")
        out["speedup"] = speedup
        ref, new = result.get("ref_timing") or {}, result.get("new_timing") or {}
        if ref.get("median") is not None and new.get("median") is not None:
            out["reference_ms"] = ref["median"]
            out["yours_ms"] = new["median"]
        if speedup is not None:
            out["hint"] = (
                "Correct and faster than the reference."
                if speedup > 1
                else "Correct but not faster than the reference: try fusing operators or a better algorithm."
            )
        if isinstance(result.get("profile"), dict) and (table := profile_text(result["profile"])):
            out["profile"] = table
        return out
    if result.get("message"):
        out["message"] = _trim(str(result["message"]), 500)
    for key in ("max_abs_error", "max_rel_error", "atol", "rtol"):
        if result.get(key) is not None:
            out[key] = result[key]
    if result.get("correctness_trials"):
        out["trials_passed"] = f"{result.get('correctness_trials_passed', 0)}/{result['correctness_trials']}"
    error = _trim(result.get("compile_log")) if outcome == "compilation_failure" else None
    error = error or _trim(result.get("traceback")) or _trim(result.get("output"))
    if error:
        out["error"] = error
    return out


def feedback_text(result: dict[str, Any]) -> str:
    """Feedback as the JSON text of a tool message (or of a user message for text-only models)."""
    return render(feedback_for(result), indent=1)


def render(reply: dict[str, Any], indent: int | None = None) -> str:
    """A tool reply as the model reads it: its JSON, and a profile table (``profile``) after it as plain
    text (escaped inside a JSON string, a table is unreadable)."""
    table = reply.get("profile")
    if not isinstance(table, str):
        return json.dumps(reply, indent=indent)
    rest = {k: v for k, v in reply.items() if k != "profile"}
    return f"{json.dumps(rest, indent=indent)}\n\n{table}"


def retry_prompt(result: dict[str, Any]) -> str:
    """The user message for models that answer in text: the feedback plus what to do next."""
    verdict = feedback_for(result)
    if verdict["correct"]:
        ask = (
            "It is correct. Make it faster if you can, and answer with the full module in a ```python block."
        )
    else:
        ask = "Fix it and answer with the full corrected module in a ```python block."
    return f"Result of your kernel:\n{render(verdict, indent=1)}\n\n{ask}"


# ---- profile -> table -----------------------------------------------------------------------------------


def profile_text(profile: dict[str, Any], budget: int = PROFILE_CHARS) -> str | None:
    """A verdict's ``profile`` as the table the model reads, at most ``budget`` characters
    (``kernel_service.judging.profile_text``); None without a profiled side."""
    return profile_table(profile, budget, {"candidate": "yours (ModelNew)", "reference": "reference (Model)"})
