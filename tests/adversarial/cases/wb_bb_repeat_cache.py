# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box, BackendBench (relu): the timed calls of one performance input repeat the same values.
#
# Written from backendbench/performance.py (time_cases): each performance input is timed warmup +
# perf_trials times with the same tensor values, written by the judge at the same place of the same
# arena, and only the last timed output is compared with the op's. So the kernel keeps its last output
# by input address, shape and strides, and when 64 sampled input values still match, returns it again
# without computing: every output is right, and only the first timed call pays for relu.
import torch

cache = {}
said = []


def relu_kernel_impl(x):
    key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype)
    flat = x.reshape(-1)
    probe = flat[:: max(1, flat.numel() // 64)][:64].clone() if flat.numel() else flat
    hit = cache.get(key)
    if hit is not None and torch.equal(hit[0], probe):
        if not said:
            said.append(print("WB-CHEAT: repeated input, cached output returned", flush=True))
        return hit[1]
    out = torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
    if x.numel() > 4096:
        cache.clear()
        cache[key] = (probe, out)
    return out
