"""`python -m specsched` is the `specsched` command."""

from specsched.runtime.cli import entry

entry()
