"""The kernels each path's checks run, and the bands they hold them to (and why those bands).

GPU bands are the issue's (54) and the measured ones behind them (BENCHMARKS.md): honest references
against themselves within 0.98-1.02 (level 1 on the H100: 99/100 within it, under MPS and without), a
known speedup within 5% of an independent event-timed loop in the same run (``bench/timing_fidelity.py``:
10 of 10 within bounds), a short kernel on a busy host within 10% of idle (``bench/loaded_fidelity.py``:
4.8% under MPS), honest jobs beside faults within 0.9-1.1 and faults answered within 45 s
(``tests/kernel_service/test_gpu_faults.py``). A cheat judged correct may read at most 1.05: its work is
the reference's, so anything above the honest band's noise is a gain.

CPU bands: the CPU timer is the judge's ``perf_counter`` around a pipe round trip, paired call by call
(docs/timing.md, "The CPU timer"); honest kernels read 0.96-1.05 on an idle 2-core VM, and on the same
kind of VM shared with other test runs (load 3-4 on 2 cores) the matmul and softmax references read
0.88-1.09 against themselves over 12 evaluations, a relu 0.84. So the CPU band is 0.8-1.25 (symmetric
around 1 in ratio): wide enough for a busy 2-core host, tight enough for a side that is timed wrongly
(a 2x error, a timer that one side escapes) to fall outside it. A CPU cheat may read at most the band's top.
"""

from __future__ import annotations

from .checks import Pair, Plan

CPU_BAND = (0.8, 1.25)

CPU = Plan(
    options={"correctness_trials": 3, "perf_trials": 30, "warmup": 2, "timeout_s": 120},
    honest=[
        Pair("matmul_256", "cpu_ref_matmul"),
        Pair("softmax_512x1024", "cpu_ref_softmax"),
        Pair("relu_chain_1M", "cpu_ref_chain"),
    ],
    honest_quick=1,
    self_band=CPU_BAND,
    self_band_why="CPU timer, paired calls on a possibly shared host",
    cheats=[
        Pair("cached_first_output", "cpu_ref_matmul", "cheat_cache_first_output"),
        Pair("patched_perf_counter", "cpu_ref_matmul", "cheat_patch_perf_counter"),
        Pair("cached_by_address", "cpu_ref_matmul", "cheat_cache_by_pointer"),
        Pair("patched_harness_timer", "cpu_ref_matmul", "cheat_patch_harness_timer"),
    ],
    cheats_quick=2,
    cheat_limit=CPU_BAND[1],
    faults=[
        Pair("segfault", "cpu_ref_matmul", "fault_segfault"),
        Pair("os_exit", "cpu_ref_matmul", "fault_exit"),
    ],
    faults_quick=1,
    fault_honest=[Pair("matmul_256", "cpu_ref_matmul")],
    fault_band=CPU_BAND,
    fault_within_s=60.0,
    independent_calls=30,
)

GPU = Plan(
    options={"correctness_trials": 3, "perf_trials": 100, "warmup": 10, "timeout_s": 240},
    honest=[
        Pair("matmul_4096", "gpu_ref_matmul"),
        Pair("gelu_16M", "gpu_ref_elementwise"),
        Pair("softmax_sum_8192x2048", "gpu_ref_reduction"),
    ],
    honest_quick=1,
    self_band=(0.98, 1.02),
    self_band_why="issue 54; level 1 99/100 within it on the H100",
    cheats=[
        Pair("cached_first_output", "gpu_ref_matmul", "cheat_cache_first_output"),
        Pair("side_stream", "gpu_ref_matmul", "cheat_side_stream"),
        Pair("patched_cuda_event", "gpu_ref_matmul", "cheat_patch_cuda_event"),
        Pair("cached_by_address", "gpu_ref_matmul", "cheat_cache_by_pointer"),
    ],
    cheats_quick=3,
    cheat_limit=1.05,
    faults=[
        Pair("illegal_address_in_timing", "gpu_ref_add", "gpu_fault_triton_timing", "triton"),
        Pair("illegal_address_first_call", "gpu_ref_add", "gpu_fault_triton_first", "triton"),
    ],
    faults_quick=2,  # both: with one, the service put all 6 of 3 rounds on gpu1 (2x H200); both take 1 round
    fault_honest=[
        Pair("add_4096x4096", "gpu_ref_add"),
        Pair("triton_add_4096x4096", "gpu_ref_add", "gpu_honest_triton_add", "triton"),
    ],
    fault_band=(0.9, 1.1),
    fault_within_s=45.0,
    known=[
        Pair("diag_rewrite_~30x", "gpu_ref_diag", "gpu_new_diag"),
        Pair("fused_chain_triton_~3x", "gpu_ref_chain", "gpu_new_chain_triton", "triton"),
    ],
    known_quick=1,
    known_tolerance=0.05,
    independent_calls=100,
    busy=Pair("triton_add_1x128", "gpu_ref_add_small", "gpu_honest_triton_add", "triton"),
    busy_tolerance=0.10,
)
