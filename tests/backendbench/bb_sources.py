"""Kernels the BackendBench tests submit, shared by the evaluator's and the profile's tests."""

#: Few timed calls: these tests check verdicts and answers, not timing.
FAST = {"perf_trials": 3, "warmup": 1}

CORRECT_RELU = """
import torch
def relu_kernel_impl(x):
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
"""
WRONG_RELU = """
def relu_kernel_impl(x):
    return x.abs()
"""
