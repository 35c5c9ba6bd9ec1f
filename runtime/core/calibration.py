"""The calibration monitor: does the draft's confidence predict acceptance?

PCT's premise is that a draft token's probability c (softmax at T = 1) estimates the chance the target
accepts it. For every draft token the target *judged*, it counts, by confidence bin, one proposal and
whether it was accepted. Judged: its parent was accepted (or it hangs off the committed prefix), and -
when sampling, where siblings are tried in order until one is accepted - no earlier sibling was
accepted (greedy compares every child with the target's argmax at once). Per job, the record holds the
bins and

    ECE = sum over bins b of (n_b / N) * | accepted_b / n_b - mean confidence_b |

the expected calibration error (Guo et al. 2017): 0 for a draft whose confidence is acceptance.
`specsched export --svg` draws the reliability diagram from the same bins.

The same counts, kept by a PCT drafter over its own verdicts, turn a confidence into a calibrated
chance of acceptance (``acceptance``): the bin's accepted share, shrunk towards c itself by `PRIOR`
pseudo-proposals, so a bin without data gives the paper's estimate c.
"""

from __future__ import annotations

import numpy as np

BINS = 10
PRIOR = 4.0   # pseudo-proposals at the raw confidence in each bin (a bin's own record outweighs it after a few)


class Calibration:
    def __init__(self) -> None:
        self.proposed = np.zeros(BINS, np.int64)
        self.accepted = np.zeros(BINS, np.int64)
        self.confidence = np.zeros(BINS)  # sum of confidences per bin

    def add(self, conf: np.ndarray | None, parents: np.ndarray, path: list[int], *, greedy: bool = True) -> None:
        if conf is None or not len(conf):
            return
        on_path = set(path)
        reached, settled = [], set()   # settled: parents whose accepted child has been met (sampled only)
        for j, p in enumerate(parents):
            p = int(p)
            if (p < 0 or p in on_path) and p not in settled:
                reached.append(j)
                if not greedy and j in on_path:
                    settled.add(p)
        conf = np.asarray(conf, np.float64)
        # NaN: a token the draft model did not propose (a Self-Draft cache candidate), so no confidence to judge
        reached = [j for j in reached if not np.isnan(conf[j])]
        conf = np.clip(np.nan_to_num(conf), 0.0, 1.0)  # a worker's numbers, not trusted
        bins = np.minimum((conf[reached] * BINS).astype(int), BINS - 1)
        np.add.at(self.proposed, bins, 1)
        np.add.at(self.confidence, bins, conf[reached])
        np.add.at(self.accepted, bins, [j in on_path for j in reached])

    def acceptance(self, conf, prior: float = PRIOR) -> np.ndarray:
        """Calibrated chances of acceptance for confidences `conf`: (accepted_b + prior·c)/(proposed_b + prior)."""
        c = np.clip(np.asarray(conf, np.float64), 0.0, 1.0)
        b = np.minimum((c * BINS).astype(int), BINS - 1)
        return (self.accepted[b] + prior * c) / (self.proposed[b] + prior)

    def to_dict(self) -> dict:
        return {"proposed": self.proposed.tolist(), "accepted": self.accepted.tolist(),
                "confidence": [round(float(c), 6) for c in self.confidence]}


def ece(bins: dict) -> float | None:
    """Expected calibration error of a record's bins (None when nothing was judged)."""
    n = np.asarray(bins.get("proposed", []), float)
    if not n.sum():
        return None
    acc, conf = np.asarray(bins["accepted"], float), np.asarray(bins["confidence"], float)
    seen = n > 0
    return float(np.sum(n[seen] / n.sum() * np.abs(acc[seen] / n[seen] - conf[seen] / n[seen])))
