"""The wire basics every process shares: configuration, sampling, messages, the wire format, sockets, events.

The bottom layer: it imports nothing else of specsched's. Backends, workers, the scheduler, the engine
and the applications build on it.
"""
