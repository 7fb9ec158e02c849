"""Devices, the process-group backend and the rank's place in the world.

Owns: parsing ``--devices`` (one spec for all ranks or one per rank), resolving a rank's
device (``cuda`` alone means ``cuda:LOCAL_RANK``), choosing the backend (NCCL when every rank
is on CUDA, gloo otherwise), the device that collective buffers live on, synchronising the
device before a clock is read, and starting the process group with a short timeout.

A run on one machine exposes nothing to the network: the built-in launcher
(:mod:`validation.launch`) binds the rendezvous store's socket to 127.0.0.1 itself and hands it
to rank 0 (:func:`listen_loopback`, :data:`STORE_FD_ENV`; torch's TCPStore server listens on
every interface whatever host it is given), and points gloo's and NCCL's own sockets at the
loopback interface (:func:`loopback_environment`). Under torchrun the store is torchrun's, on
the addresses torchrun chooses (validation/README.md says what that exposes).
Importing this module does not import torch.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from hetsim.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

LOOPBACK = "127.0.0.1"
LOCAL_STORE_ENV = "VALIDATION_LOCAL_STORE"  # "1": the launcher's ranks, whose store listens on LOOPBACK only
STORE_FD_ENV = "VALIDATION_STORE_FD"  # rank 0's: the store's listening socket, bound by the launcher
_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")
# the oldest torch validation's ranks run on: its store (TCPStore's libuv backend, the default
# since 2.4) takes over the launcher's listening socket (master_listen_fd) only from 2.8
MIN_TORCH = (2, 8)


def check_torch_version() -> None:
    """ConfigError (``torch``) where the installed torch is older than :data:`MIN_TORCH`: its
    ranks would wait for a rendezvous that never comes until their timeout."""
    import torch

    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))  # the release: a build of 2.8.0a0 (NGC's) is 2.8
    if found is not None and (int(found[1]), int(found[2])) < MIN_TORCH:
        least = ".".join(map(str, MIN_TORCH))
        raise ConfigError("torch", f"{torch.__version__} is older than {least}, which validation's ranks "
                                   f"need (their store takes over the launcher's socket): install "
                                   f"torch>={least}")  # fmt: skip


def parse_devices(text: str, world_size: int) -> tuple[str, ...]:
    """``cpu`` | ``cuda`` | ``cuda:0,cuda:1,...`` -> one device spec per rank (validated, not resolved)."""
    items = [t.strip().lower() for t in str(text).split(",")]
    if not any(items):
        raise ConfigError("--devices", "no device given")
    if not all(items):  # a stray comma: say so rather than guess how many ranks were meant
        raise ConfigError("--devices", f"an empty item in {text!r}")
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
    """NCCL when every rank is on CUDA, gloo otherwise (a CUDA rank beside CPU ranks: gloo, its
    collective buffers on the host)."""
    return "nccl" if devices and all(d.startswith("cuda") for d in devices) else "gloo"


def check_ddp_devices(comm: str, devices: Sequence[str]) -> None:
    """DDP keeps every rank on one kind of device: ConfigError on ``--comm`` otherwise."""
    if comm == "ddp" and len({d.partition(":")[0] for d in devices}) > 1:
        raise ConfigError("--comm", "ddp needs every rank on one kind of device; use --comm flat for mixed devices")


def check_one_rank_per_gpu(devices: tuple[str, ...], local_world_size: int | None = None) -> None:
    """Refuse two ranks of one machine on one GPU (``cuda:0,cuda:0``; ``cuda,cuda:0``): NCCL
    refuses a communicator with two ranks on one device, and under gloo the two would share the
    GPU's time, which no simulated worker does. Ranks are on machines in blocks of
    ``local_world_size`` (torchrun's order; default: all on this one); ``cuda`` is
    ``cuda:LOCAL_RANK``. Needs no CUDA: it reads the names only."""
    local = len(devices) if local_world_size is None else max(1, int(local_world_size))
    seen: dict[tuple[int, str], int] = {}
    for rank, spec in enumerate(devices):
        if not spec.startswith("cuda"):
            continue
        node, local_rank = divmod(rank, local)
        name = resolve_device(spec, local_rank)
        if (node, name) in seen:
            raise ConfigError(
                "--devices",
                f"ranks {seen[(node, name)]} and {rank} are both on {name}: one rank per GPU "
                "(put the others on other GPUs or on cpu)",
            )
        seen[(node, name)] = rank


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
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def listen_loopback() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 and a free port: the rendezvous store's. The launcher
    binds it and rank 0's store serves on it (``master_listen_fd``), so the store listens on no
    other address and no other process can take the port between its choice and its use; the
    other ranks' connections wait in its backlog until rank 0 serves."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on BSDs and macOS; None if neither)."""
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), None)


def loopback_environment() -> dict[str, str]:
    """The variables that keep a one-machine run's collective sockets on loopback: gloo and NCCL
    listen on the address of the interface these name (without them, on the address the
    machine's host name resolves to, often one other machines can reach)."""
    interface = loopback_interface()
    return {} if interface is None else {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface}


def torch_device(name: str, option: str = "--devices") -> torch.device:
    """The rank's device, made current; on CUDA with :func:`exact_numerics` set (ConfigError on
    ``option`` where CUDA is asked for and missing)."""
    import torch

    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(option, f"{name} requested but CUDA is not available on this machine")
        torch.cuda.set_device(device)
        exact_numerics()
    return device


def exact_numerics() -> None:
    """Float32 arithmetic on the GPU as on the CPU, for the gradient-equality property (the
    weighted combination equals the union's gradient to 1e-5) and for ranks that must agree:
    no TF32 in matrix products or convolutions (TF32 keeps 10 bits of mantissa: relative errors
    near 1e-3), and cuDNN's deterministic algorithms only, chosen without benchmarking (the
    non-deterministic ones sum in a different order from run to run, and benchmarking picks a
    different algorithm per shape and run). It costs speed on Ampere and later GPUs: the
    measured step is of exact float32 training, which is what validation compares."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def comm_device(backend: str, device: torch.device) -> torch.device:
    """Where collective buffers live: the rank's GPU under NCCL, the CPU under gloo."""
    import torch

    return device if backend == "nccl" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work before a clock is read (a no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def init_process_group(
    backend: str, env: RankEnv, device: torch.device, timeout_s: float, environ: Mapping[str, str] | None = None
) -> None:
    """The process group with a short timeout for every collective: on the launcher's loopback
    store (:func:`local_store`) when the launcher started this rank, else ``env://`` rendezvous
    (MASTER_ADDR, MASTER_PORT; torchrun's)."""
    import torch.distributed as dist

    environ = os.environ if environ is None else environ
    timeout = timedelta(seconds=timeout_s)
    kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}  # torch >= 2.3 (pyproject.toml)
    # Not TORCH_NCCL_BLOCKING_WAIT=1: its wait polls the collective's completion with a sleep
    # (milliseconds) between polls, which a synchronous collective behind queued compute would add
    # to every step it times. A rank whose peer died is ended by the launcher, NCCL's watchdog at
    # the timeout, or validation.train's stall guard (validation/README.md, "Failure under NCCL").
    if environ.get(LOCAL_STORE_ENV) == "1":
        kwargs["store"] = local_store(env, timeout, environ)
    else:
        kwargs["init_method"] = "env://"
    dist.init_process_group(backend, rank=env.rank, world_size=env.world_size, timeout=timeout, **kwargs)


def local_store(env: RankEnv, timeout: timedelta, environ: Mapping[str, str]) -> torch.distributed.Store:
    """The rendezvous store of a run on this machine: rank 0 serves it on the socket the launcher
    bound to 127.0.0.1 (:data:`STORE_FD_ENV`), the other ranks connect to 127.0.0.1:MASTER_PORT."""
    import torch.distributed as dist

    fd = environ.get(STORE_FD_ENV) if env.rank == 0 else None
    if env.rank == 0 and not fd:
        raise ConfigError(STORE_FD_ENV, f"not set: rank 0 of a local run ({LOCAL_STORE_ENV}=1) serves the store on it")
    try:
        port = int(environ.get("MASTER_PORT", ""))
        listen_fd = int(fd) if fd else None
    except ValueError:
        raise ConfigError("MASTER_PORT", f"MASTER_PORT and {STORE_FD_ENV} must be integers") from None
    return dist.TCPStore(
        LOOPBACK, port, env.world_size, is_master=listen_fd is not None, timeout=timeout, master_listen_fd=listen_fd
    )


def exit_now(status: int) -> None:
    """End the rank without the interpreter's teardown: the process group is destroyed and every
    file written by then, but gloo's threads can still be joinable when C++ static destructors
    run, and std::terminate then aborts a finished rank ("terminate called without an active
    exception", status -6), which would fail a run that succeeded."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
