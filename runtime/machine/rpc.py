"""llama.cpp's RPC backend: another computer's CPU or GPU as a device of this one (docs/second-computer.md).

Three parts, none of them a protocol of our own:
- endpoints as the user writes them (`--rpc HOST:PORT[,HOST:PORT…]`);
- a short probe that speaks the first messages of ggml's RPC protocol (HELLO, DEVICE_COUNT,
  GET_DEVICE_MEMORY) from Python. ggml aborts the whole process when a worker is down, speaks another
  version or dies mid-call, so every worker is probed before ggml connects: a fault becomes one line
  naming `host:port`, and the probe's round trips are the network cost the placement plans with;
- `serve`, which runs ggml's own `ggml_backend_rpc_start_server` for `specquant worker`, over a tensor cache
  that holds only what Python verified (`runtime.machine.rpc_cache`).

A worker serves one client at a time (ggml's server loop): a second client waits until the first leaves.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import statistics
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import UserError
from runtime.machine.ggml_lib import ABORT_CALLBACK, RPC_ADD_SERVER, RPC_START_SERVER, libggml, libggml_base
from runtime.machine.rpc_cache import CACHE_QUOTA_BYTES, prepare_cache, verify_pending
from runtime.paths import cache_dir as user_cache_dir

# ggml-rpc.h of the llama.cpp that llama-cpp-python 0.3.36 vendors; a worker must speak the same major version.
PROTO_MAJOR, PROTO_MINOR = 7, 0
_ALLOC_BUFFER, _FREE_BUFFER, _BUFFER_CLEAR = 0, 4, 5  # enum rpc_cmd
_GET_DEVICE_MEMORY, _HELLO, _DEVICE_COUNT = 11, 14, 15
_CONN_CAPS = 24  # RPC_CONN_CAPS_SIZE
DEFAULT_PORT = 50052
PROBE_TIMEOUT_S = 5.0
# The speed probe: the worker clears a buffer this large on its first device, a few times. Clearing memory is
# bound by the same memory bandwidth as a decode step, so its speed beside the same clear here scales the
# placement's bandwidth for the worker's device (runtime.plan.placement, rpc_bandwidth).
SPEED_PROBE_BYTES = 256 * 1024 * 1024
# A worker that sends nothing for this long during an answer is given up on (a remote machine switched off
# leaves no connection reset behind); a long prompt on a slow worker may take this long for its first cycle.
STALL_TIMEOUT_S = 120.0
FAULT_EXIT = 75  # a process whose RPC connection failed ends with this code, after one line on stderr


class WorkerError(UserError):
    """A worker that is down, speaks another protocol version, or stopped answering; names `host:port`."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoint(text: str, what: str = "--rpc") -> Endpoint:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{what} {text.strip()!r}: expected HOST:PORT, for example 127.0.0.1:{DEFAULT_PORT}")
    return Endpoint(host.strip("[]"), int(port))


def parse_endpoints(text: str | None) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT…]` as canonical strings (what EngineSettings keeps); "" or None: none."""
    if not text or not text.strip():
        return ()
    found = [str(parse_endpoint(part)) for part in text.split(",") if part.strip()]
    if len(set(found)) != len(found):
        raise UserError(f"--rpc {text!r}: a worker is listed twice")
    return tuple(found)


@dataclass(frozen=True)
class WorkerProbe:
    """What the probe learnt of one worker: its protocol version, its devices' (free, total) memory in
    bytes, and the median round-trip time of a small request."""

    endpoint: str
    version: str
    devices: tuple[tuple[int, int], ...]
    rtt_s: float
    clear_bps: float = 0.0  # bytes per second its first device clears memory at (0: not measured)

    @property
    def free_bytes(self) -> int:
        return sum(free for free, _ in self.devices)

    def as_dict(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "version": self.version,
            "devices": [{"free_gb": round(f / 1e9, 2), "total_gb": round(t / 1e9, 2)} for f, t in self.devices],
            "rtt_ms": round(self.rtt_s * 1000, 3),
            "clear_gb_s": round(self.clear_bps / 1e9, 1),
        }


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """`n` bytes; with a `deadline` (time.monotonic()) all of them by then, so a listener that trickles a byte
    now and then cannot hold the caller longer than one timeout (a socket timeout alone restarts per recv)."""
    data = b""
    while len(data) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            sock.settimeout(left)
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionResetError("closed")
        data += part
    return data


def _call(sock: socket.socket, cmd: int, payload: bytes, reply: int, deadline: float | None = None) -> bytes:
    """One request and its reply: | cmd u8 | size u64 | payload |, answered by | size u64 | data |."""
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8, deadline))
    if size != reply:
        raise ConnectionResetError(f"a {size}-byte reply where {reply} were expected")
    return _recv_exact(sock, size, deadline)


def _clear_speed(sock: socket.socket, free: int, rtt: float) -> float:
    """Bytes per second the worker's device 0 clears a buffer at (ALLOC_BUFFER, BUFFER_CLEAR, FREE_BUFFER;
    the clears send no reply, so each is followed by a DEVICE_COUNT whose round trip is taken off)."""
    size = min(SPEED_PROBE_BYTES, free // 4)
    if size < 16 * 1024 * 1024:
        return 0.0
    ptr, got = struct.unpack("<QQ", _call(sock, _ALLOC_BUFFER, struct.pack("<IQ", 0, size), 16))
    if not ptr:
        return 0.0
    times = []
    for _ in range(5):  # the first clear also maps the pages in
        t = time.perf_counter()
        sock.sendall(struct.pack("<BQ", _BUFFER_CLEAR, 9) + struct.pack("<QB", ptr, 0))
        _call(sock, _DEVICE_COUNT, b"", 4)
        times.append(max(time.perf_counter() - t - rtt, 1e-6))
    sock.sendall(struct.pack("<BQ", _FREE_BUFFER, 8) + struct.pack("<Q", ptr))
    _call(sock, _DEVICE_COUNT, b"", 4)
    return got / min(times[1:])


_local_clear_bps: float | None = None


def local_clear_speed() -> float:
    """Bytes per second this machine clears memory at, as a CPU worker's device does (one thread's memset)."""
    global _local_clear_bps
    if _local_clear_bps is None:
        buf = ctypes.create_string_buffer(SPEED_PROBE_BYTES)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            ctypes.memset(buf, 0, SPEED_PROBE_BYTES)
            times.append(time.perf_counter() - t)
        _local_clear_bps = SPEED_PROBE_BYTES / min(times[1:])
    return _local_clear_bps


def probe_endpoint(endpoint: str, timeout: float = PROBE_TIMEOUT_S, pings: int = 8, speed: bool = False) -> WorkerProbe:
    """Connect, shake hands, read the devices and time `pings` round trips (and, with `speed`, how fast the
    first device clears memory); a WorkerError on any fault."""
    ep = parse_endpoint(endpoint)
    # One deadline for connecting and the whole handshake: a listener that accepts and stays silent (or a
    # worker busy with another client: the kernel accepts for it) is one line after `timeout`, never a hang.
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
    except ConnectionRefusedError:
        raise WorkerError(
            f"no worker is listening at {ep}: start `specquant worker` on that computer, or check the address"
        ) from None
    except TimeoutError:
        raise WorkerError(f"the worker at {ep} did not answer within {timeout:g} s") from None
    except OSError as e:
        raise WorkerError(f"cannot reach the worker at {ep}: {e.strerror or e}") from None
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            hello = _call(sock, _HELLO, bytes(_CONN_CAPS), 4 + _CONN_CAPS, deadline)
            major, minor, patch = hello[0], hello[1], hello[2]
            version = f"{major}.{minor}.{patch}"
            if major != PROTO_MAJOR or minor > PROTO_MINOR:
                raise WorkerError(
                    f"the worker at {ep} speaks RPC protocol {version}, this SpecQuant {PROTO_MAJOR}.{PROTO_MINOR}: "
                    "install the same SpecQuant version on both computers"
                )
            rtts = []
            count = 0
            for _ in range(max(pings, 1)):
                t = time.perf_counter()
                (count,) = struct.unpack("<I", _call(sock, _DEVICE_COUNT, b"", 4, deadline))
                rtts.append(time.perf_counter() - t)
            devices = []
            for i in range(count):
                free, total = struct.unpack("<QQ", _call(sock, _GET_DEVICE_MEMORY, struct.pack("<I", i), 16, deadline))
                devices.append((free, total))
            sock.settimeout(timeout)  # the speed probe's clears: each reply within `timeout`
            clear = _clear_speed(sock, devices[0][0], statistics.median(rtts)) if speed and devices else 0.0
        except TimeoutError:
            raise WorkerError(
                f"the worker at {ep} accepted the connection but did not answer within {timeout:g} s "
                "(it serves one client at a time: is another SpecQuant using it?)"
            ) from None
        except (ConnectionResetError, BrokenPipeError, struct.error):
            raise WorkerError(
                f"{ep} closed the connection during the RPC handshake: not a SpecQuant worker, "
                "or one of another version"
            ) from None
        except OSError as e:
            raise WorkerError(f"the connection to the worker at {ep} failed: {e.strerror or e}") from None
    if not devices:
        raise WorkerError(f"the worker at {ep} offers no device")
    return WorkerProbe(str(ep), version, tuple(devices), statistics.median(rtts), clear)


# --- ggml's side -----------------------------------------------------------------------------------------
_abort_hook: object = None  # the ctypes callback must outlive its registration
_registered: dict[str, WorkerProbe] = {}
_lock = threading.Lock()


def _rpc_reg() -> int:
    from runtime.machine.hardware import ensure_backends  # loads ggml's backend libraries (RPC among them) first

    ensure_backends()
    lib = libggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC") if lib is not None else None
    if not reg:
        raise UserError(
            "this SpecQuant's llama.cpp was built without its RPC backend (GGML_RPC=ON): run ./setup.sh again"
        )
    return reg


_report_aborts = True


def quiet_aborts() -> None:
    """In a child process whose parent reports the fault itself (runtime.engine.process): exit silently."""
    global _report_aborts
    _report_aborts = False


def guard_aborts(endpoints: tuple[str, ...]) -> None:
    """From now on a ggml abort (the RPC client's answer to a lost worker) ends this process with one line
    naming the workers and exit code FAULT_EXIT, instead of a backtrace and a core dump."""
    global _abort_hook
    report = _report_aborts
    base = libggml_base()
    if base is None:
        return
    names = ", ".join(endpoints)

    def on_abort(message: bytes | None) -> None:
        if report:
            why = (message or b"").decode(errors="replace").strip().splitlines()[0:1]
            detail = f" ({why[0].split(': ', 1)[-1]})" if why else ""
            os.write(2, f"specquant: error: the worker at {names} stopped answering{detail}\n".encode())
        os._exit(FAULT_EXIT)

    _abort_hook = ABORT_CALLBACK(on_abort)
    base.ggml_set_abort_callback(_abort_hook)


def connect(endpoints: tuple[str, ...]) -> list[WorkerProbe]:
    """Probe every worker, then register each with ggml, whose devices then appear in the inventory (as
    `RPC0`, `RPC1`, …, described by their endpoint). Once per endpoint and process."""
    facts = [_registered.get(ep) or probe_endpoint(ep, speed=True) for ep in endpoints]
    guard_aborts(endpoints)
    with _lock:
        new = [f for f in facts if f.endpoint not in _registered]
        if new:
            lib = libggml()
            assert lib is not None
            address = lib.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_add_server")
            add_server = RPC_ADD_SERVER(address)
            for f in new:
                reg = add_server(f.endpoint.encode())
                if not reg:
                    raise WorkerError(f"the worker at {f.endpoint} offers no device")
                lib.ggml_backend_register(reg)
                _registered[f.endpoint] = f
    return facts


def registered() -> dict[str, WorkerProbe]:
    """The workers this process has registered, by endpoint."""
    return dict(_registered)


def tensor_cache_dir() -> Path:
    """Where a worker keeps the tensors it received (by hash), so the next connection skips resending them."""
    return user_cache_dir() / "rpc"


def worker_cache(endpoint: Endpoint, keep: bool | None = None) -> Path | None:
    """The worker's tensor cache: by default on for a loopback worker and off for one on the network (whose
    clients write files here); `keep` True or False as the user asked (`--cache` / `--no-cache`)."""
    if keep is None:
        keep = endpoint.loopback
    return tensor_cache_dir() if keep else None


def local_devices(names: list[str] | None) -> list[tuple[str, int]]:
    """This machine's devices a worker serves: those named, else the GPUs, else the CPU (rpc-server's choice)."""
    _rpc_reg()
    lib = libggml()
    assert lib is not None
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        name = (lib.ggml_backend_dev_name(dev) or b"").decode()
        if not name.startswith("RPC"):
            found.append((name, dev, lib.ggml_backend_dev_type(dev)))
    if names:
        by_name = {n.lower(): (n, d) for n, d, _ in found}
        missing = [n for n in names if n.lower() not in by_name]
        if missing:
            have = ", ".join(n for n, _, _ in found)
            raise UserError(f"--device {','.join(missing)}: no such device here (this machine has {have})")
        return [by_name[n.lower()] for n in names]
    gpus = [(n, d) for n, d, kind in found if kind in (1, 2)]  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU
    return gpus or [(n, d) for n, d, kind in found if kind == 0][:1]


def serve_rpc(
    endpoint: Endpoint,
    threads: int,
    devices: list[tuple[str, int]],
    cache: Path | None,
    network_cache: bool = False,
    quota: int = CACHE_QUOTA_BYTES,
) -> threading.Thread:
    """Start ggml's RPC server on a daemon thread (it never returns) and hand the thread back; the caller
    waits for a signal, so Ctrl-C ends the worker at once. The tensor cache is swept first (prepare_cache)
    and its set-aside entries verified on another daemon thread; on a network address it stays off unless
    `network_cache` (the user's `--cache`)."""
    lib = libggml()
    assert lib is not None
    start = RPC_START_SERVER(lib.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_start_server"))
    if cache is not None and not endpoint.loopback and not network_cache:
        cache = None
    if cache is not None:
        sweep = prepare_cache(cache, quota)
        if sweep.pending:
            threading.Thread(target=verify_pending, args=(cache,), name="specquant-rpc-verify", daemon=True).start()
    handles = (ctypes.c_void_p * len(devices))(*[d for _, d in devices])
    args = (str(endpoint).encode(), str(cache).encode() if cache else None, threads, len(devices), handles)
    sys.stdout.flush()
    thread = threading.Thread(target=start, args=args, name="specquant-rpc-server", daemon=True)
    thread.start()
    return thread


def port_is_free(endpoint: Endpoint) -> bool:
    """Whether nothing listens on the endpoint yet: ggml's server only prints a failure and returns."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((endpoint.host, endpoint.port))
        return True
    except OSError:
        return False
