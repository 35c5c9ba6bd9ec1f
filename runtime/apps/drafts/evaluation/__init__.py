"""Measuring a draft against its target: the quality bar (acceptance, tokens per verification, cost)."""
