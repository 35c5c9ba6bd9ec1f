"""Watching a run: the live Gantt view, progress lines, and the renderables they share."""
