"""Where a process runs its model's forwards: a device, the CUDA stream the process created for them at
start-up, and the bytes its inputs and outputs cross between host and device memory.

On the CPU every part is a no-op: no stream, inputs stay where they were built, results are read with
``.numpy()`` and nothing is counted, because nothing crosses. On CUDA, inputs (token ids, positions, the
tree mask, cache indices) go up from pinned host memory with non-blocking copies on the process's stream;
a forward's logits come down the same way into a pinned buffer, after which the stream is synchronised
once: the only wait of a forward. Each process has its own stream, so a verifier's forwards and the
draft workers' can overlap on one GPU (concurrently under MPS, time-sliced without it: docs/gpu.md).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..core.device import is_cuda, resolve_device
from .backend import Traffic


class Placement:
    def __init__(self, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.name = device
        self.cuda = is_cuda(device)
        # created once, at start-up: every forward of this process is queued on it
        self.stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        self.traffic = Traffic()
        self.waits = 0  # times the host waited for results from the device

    @classmethod
    def start(cls, spec: str) -> Placement:
        """The placement of --device `spec` on this machine (ConfigError: a GPU asked for but not there)."""
        return cls(resolve_device(spec))

    def running(self) -> contextlib.AbstractContextManager:
        """Run what follows on the process's stream (nothing to do on the CPU)."""
        return torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext()

    def adopt(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module's weights on the device, ready before the first forward on the stream."""
        if not self.cuda:
            return module
        module = module.to(self.device)
        torch.cuda.synchronize(self.device)  # the copies ran on the default stream; forwards run on ours
        return module

    def up(self, tensor: torch.Tensor) -> torch.Tensor:
        """An input built on the host, on the device: pinned, then a non-blocking copy on the stream."""
        if not self.cuda:
            return tensor
        self.traffic.h2d += tensor.nbytes
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def down(self, tensor: torch.Tensor) -> np.ndarray:
        """A result as float32 numpy (a fresh buffer each time: the caller keeps the array)."""
        return self.down_all(tensor.float())[0]

    def down_all(self, *tensors: torch.Tensor) -> list[np.ndarray]:
        """Results as numpy, in their own dtypes: on CUDA non-blocking copies into pinned buffers, then one
        synchronisation of the stream for all of them (`waits` counts those)."""
        if not self.cuda:
            return [t.numpy() for t in tensors]
        hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
        for host, t in zip(hosts, tensors):
            host.copy_(t, non_blocking=True)
        self.stream.synchronize()
        self.traffic.d2h += sum(h.nbytes for h in hosts)
        self.waits += 1
        return [h.numpy() for h in hosts]

    def token(self, tensor: torch.Tensor) -> int:
        """One token id on the host (a wait of its own, for the 8 bytes of a long)."""
        return int(self.down_all(tensor.reshape(1))[0][0])
