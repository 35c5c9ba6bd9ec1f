"""specsched: scheduled speculative decoding run like an operating system runs processes."""

__version__ = "0.1.0"
