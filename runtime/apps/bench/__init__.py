"""`specsched bench`: the same workload under every arm (ours and outside peers), medians and ratios from one run."""
