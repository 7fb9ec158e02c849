"""Devices, the process-group backend and the rank's place in the world.

Owns: parsing ``--devices`` (one spec for all ranks or one per rank), resolving a rank's
device (``cuda`` alone means ``cuda:LOCAL_RANK``), choosing the backend (NCCL when every rank
is on CUDA, gloo otherwise), the device that collective buffers live on, synchronising the
device before a clock is read, and starting the process group with a short timeout.
Importing this module does not import torch.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from hetsim.errors import ConfigError

if TYPE_CHECKING:
    import torch

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


def parse_devices(text: str, world_size: int) -> tuple[str, ...]:
    """``cpu`` | ``cuda`` | ``cuda:0,cuda:1,...`` -> one device spec per rank (validated, not resolved)."""
    items = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError("--devices", "no device given")
    for item in items:
        match = _DEVICE.match(item)
        if match is None:
            raise ConfigError("--devices", f"unknown device {item!r} (use cpu, cuda or cuda:N)")
        if match.group(1) == "cpu" and match.group(2) is not None:
            raise ConfigError("--devices", f"unknown device {item!r} (cpu takes no index)")
    if len(items) == 1:
        return tuple(items) * world_size
    if len(items) != world_size:
        raise ConfigError(
            "--devices", f"{len(items)} devices for {world_size} ranks (give one for all, or one per rank)"
        )
    return tuple(items)


def resolve_device(spec: str, local_rank: int) -> str:
    """A concrete device name: ``cuda`` becomes ``cuda:LOCAL_RANK``."""
    return f"cuda:{local_rank}" if spec == "cuda" else spec


def select_backend(devices: tuple[str, ...]) -> str:
    """NCCL when every rank is on CUDA, gloo otherwise."""
    return "nccl" if devices and all(d.startswith("cuda") for d in devices) else "gloo"


@dataclass(frozen=True)
class RankEnv:
    """Where this process stands: from torchrun's (or the built-in launcher's) environment."""

    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> RankEnv | None:
        env = os.environ if environ is None else environ
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        try:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
            local = int(env.get("LOCAL_RANK", env["RANK"]))
        except ValueError:
            raise ConfigError("RANK", "RANK, WORLD_SIZE and LOCAL_RANK must be integers") from None
        if world < 1 or not 0 <= rank < world:
            raise ConfigError("RANK", f"rank {rank} is outside a world of {world}")
        return cls(rank, world, local)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torch_device(name: str) -> torch.device:
    import torch

    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--devices", f"{name} requested but CUDA is not available on this machine")
        torch.cuda.set_device(device)
    return device


def comm_device(backend: str, device: torch.device) -> torch.device:
    """Where collective buffers live: the rank's GPU under NCCL, the CPU under gloo."""
    import torch

    return device if backend == "nccl" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work before a clock is read (a no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def init_process_group(backend: str, env: RankEnv, device: torch.device, timeout_s: float) -> None:
    """``env://`` rendezvous (MASTER_ADDR, MASTER_PORT) with a short timeout for every collective."""
    import torch.distributed as dist

    kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=timeout_s),
        **kwargs,
    )
