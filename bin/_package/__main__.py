"""`python -m specsched` is the `specsched` command."""

from specsched.runtime.cli import main

raise SystemExit(main())
