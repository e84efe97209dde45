"""A reference that keeps state from call to call (KernelBench level 3's vanilla RNNs: the hidden state each
call leaves is the next call's): its output for given inputs depends on the calls before, so the judge can
only compare the two models called in lock step (the correctness trials, as upstream does), not a timed
call's output against the reference's replay of the same inputs in a process of its own."""

from __future__ import annotations

import httpx
from ks_sources import REF_RNN, SOL_RNN, evaluate

#: The cell without its state: each call starts from zeros (right on the first call only).
SOL_FORGETS = SOL_RNN.replace(
    "self.hidden = self.hidden.to(x.device)", "self.hidden = 0 * self.hidden.to(x.device)"
)


def test_a_stateful_reference_is_judged_in_lock_step(client: httpx.Client) -> None:
    """Before the reference was asked twice for one input, the honest cell read "a timed call's output
    differs" (CUDA-L1's L3_34 did): the reference's replay of the timed inputs followed other calls."""
    honest = evaluate(client, REF_RNN, SOL_RNN)
    assert honest.outcome == "correct", honest.message
    assert honest.reference_stateful and honest.speedup is not None
    forgets = evaluate(client, REF_RNN, SOL_FORGETS)  # the lock-step trials still decide
    assert forgets.outcome == "incorrect" and "correctness trial" in forgets.message, forgets.message
    assert not forgets.reference_stateful  # not asked: the trials failed first
    stateless = evaluate(client, REF_RNN.replace("self.hidden = torch.tanh", "return torch.tanh"),
                         SOL_RNN.replace("self.hidden = torch.tanh", "return torch.tanh"))  # fmt: skip
    assert stateless.outcome == "correct" and not stateless.reference_stateful, stateless.message
