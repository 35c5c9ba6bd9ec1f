"""Analysis of recorded runs: what-if re-simulation, teaching exercises, reruns."""
