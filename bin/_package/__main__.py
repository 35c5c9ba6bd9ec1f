"""`python -m specsched` is the `specsched` command."""

from specsched.runtime.apps.cli import entry

entry()
