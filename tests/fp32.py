"""How far two fp32 forwards of one model may differ when only their shapes differ.

A k-token forward and k one-token forwards, a padded batch row and the same row alone, a cropped cache
and a fresh one compute the same function, but the kernels (chosen per CPU: AVX2, AVX-512, AMX, and per
thread count) block and order their sums differently. Rounding then differs, never the math:

* one length-n fp32 reduction, summed in any order, is off by at most gamma_n = n*u/(1 - n*u) ~ n*u
  relative to sum |a_i b_i| (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1),
  u = 2**-24; two orders therefore differ by at most 2*n*u;
* a pre-norm transformer layer chains REDUCTIONS_PER_LAYER of them (input norm, q/k/v, q.k, p.v, o,
  post-attention norm, gate/up, down), the residual stream adds each layer's error to the next, and the
  final norm and the head add two more: depth = layers * 8 + 2;
* relative to the scale of the logits (at least 1, so tiny logits are not held to a tinier bound).

So ``tolerance = 2 * depth * n * u * max(1, max|logits|)`` with n the longest reduction (hidden,
intermediate or context length). For the 2-layer, 128-wide test models that is ~3e-4 x scale; the
differences seen on AMD AVX2 and Intel AVX-512 CPUs are 1e-6 - 2e-5, while the bugs these tests exist
for (a wrong position, a stale or missing cache row, padding or a sibling left visible) move logits by
0.05 - 1 x scale. Greedy token equality holds up to ties within this rounding: ``assert_greedy_equal``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

U = 2.0**-24
REDUCTIONS_PER_LAYER = 8


def _array(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, possibly with grad
        x = x.detach().double().numpy()
    return np.asarray(x, dtype=np.float64)


def tolerance(reference, *, layers: int, width: int) -> float:
    """The largest |a - b| two differently shaped fp32 forwards may show, for logits like `reference`."""
    depth = layers * REDUCTIONS_PER_LAYER + 2
    finite = _array(reference)
    finite = finite[np.isfinite(finite)]  # a restricted-vocabulary draft has -inf logits
    scale = max(1.0, float(np.abs(finite).max(initial=0.0)))
    return 2.0 * depth * width * U * scale


def llama_tolerance(config, reference, *, context: int = 0) -> float:
    """`tolerance` for a transformers Llama-style config (or the project's DraftConfig)."""
    hidden = getattr(config, "hidden_size", None) or config.hidden
    inner = getattr(config, "intermediate_size", None) or config.intermediate
    layers = getattr(config, "num_hidden_layers", None) or config.layers
    return tolerance(reference, layers=layers, width=max(hidden, inner, context))


def assert_close(actual, desired, *, layers: int, width: int) -> None:
    """Same logits up to fp32 rounding of a differently shaped forward (the bound above)."""
    actual, desired = _array(actual), _array(desired)
    atol = tolerance(desired, layers=layers, width=width)
    np.testing.assert_allclose(actual, desired, rtol=0, atol=atol)


def assert_greedy_equal(got: Sequence[Sequence[int]], expected: Sequence[Sequence[int]],
                        logits_after: Callable[[int, list[int]], np.ndarray], *, layers: int, width: int) -> None:
    """Greedy speculative output equals target-only output, token for token, unless the two first part at
    a tie: where sequence i first differs, the target's logits of both tokens (after the common prefix,
    `logits_after(i, prefix)`, one fresh forward) are within `tolerance` of the best one. A real divergence
    (a clear argmax missed) fails; so does any difference in how many sequences there are."""
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = list(g), list(e)
        if g == e:
            continue
        step = next((j for j, (a, b) in enumerate(zip(g, e)) if a != b), None)
        assert step is not None, f"sequence {i}: one output is a prefix of the other ({len(g)} vs {len(e)} tokens)"
        logits = _array(logits_after(i, e[:step]))
        atol = tolerance(logits, layers=layers, width=width)
        best = logits.max()
        gaps = best - logits[g[step]], best - logits[e[step]]
        assert max(gaps) <= atol, (f"sequence {i} differs at step {step}: {g[step]} vs {e[step]}, "
                                   f"{max(gaps):.3g} below the best logit (a tie would be <= {atol:.3g})")
