"""Applications on the engine that are more than one command: `specsched serve` (serve/)."""
