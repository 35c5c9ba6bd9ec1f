"""The applications: every command, the live view, ToT, bench, draft training. Nothing below imports them."""
