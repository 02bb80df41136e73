"""The KV-transfer test: a cache serialised to bytes (:func:`serialise_cache`,
:func:`deserialise_cache`) and sent over loopback TCP (127.0.0.1 only) with 1..N parallel
connections (:func:`loopback_transfer`, no torch).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from prfaas_plan.bench.kernels import _torch
from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S, MIB_BYTES

LOOPBACK_HOST = "127.0.0.1"
"""The only address the transfer test binds and connects to."""

TRANSFER_BUFFER_BYTES = 1 * MIB_BYTES
"""Receive buffer per connection in the loopback transfer."""

TRANSFER_TIMEOUT_S = 60.0
"""Socket timeout of the loopback transfer: no single setting may run longer."""

TRANSFER_HEADER = struct.Struct("!Q")
"""Framing: every connection starts with the number of payload bytes it will send (uint64)."""


# --------------------------------------------------------------------------------------------
# Serialising a cache (for the transfer test)
# --------------------------------------------------------------------------------------------


def serialise_cache(cache: list[dict]) -> bytes:
    """Frame a cache as bytes: uint64 header length, a JSON header (per tensor: layer, name,
    dtype, shape, nbytes), then every tensor's raw bytes in header order (host copies)."""
    torch = _torch()
    header, blobs = [], []
    for i, layer in enumerate(cache):
        for name, t in layer.items():
            t = t.detach().contiguous().cpu()
            header.append({"layer": i, "name": name, "dtype": str(t.dtype).removeprefix("torch."),
                           "shape": list(t.shape), "nbytes": int(t.nbytes)})
            blobs.append(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    head = json.dumps(header).encode()
    return TRANSFER_HEADER.pack(len(head)) + head + b"".join(blobs)


def deserialise_cache(data: bytes) -> list[dict]:
    """Inverse of :func:`serialise_cache` (CPU tensors)."""
    torch = _torch()
    (n,) = TRANSFER_HEADER.unpack_from(data, 0)
    offset = TRANSFER_HEADER.size
    header = json.loads(data[offset: offset + n])
    offset += n
    layers: list[dict] = []
    for item in header:
        while len(layers) <= item["layer"]:
            layers.append({})
        raw = torch.frombuffer(bytearray(data[offset: offset + item["nbytes"]]), dtype=torch.uint8) \
            if item["nbytes"] else torch.empty(0, dtype=torch.uint8)
        layers[item["layer"]][item["name"]] = raw.view(getattr(torch, item["dtype"])).reshape(item["shape"])
        offset += item["nbytes"]
    return layers


# --------------------------------------------------------------------------------------------
# Loopback TCP transfer (no torch)
# --------------------------------------------------------------------------------------------


def _shares(total_bytes: int, connections: int) -> list[int]:
    """``total_bytes`` split over ``connections`` as evenly as whole bytes allow (first ones larger)."""
    return [total_bytes // connections + (1 if i < total_bytes % connections else 0) for i in range(connections)]


@dataclass
class _Loopback:
    """The shared state of one loopback test: what each receiver got, errors, the two barriers
    (all connections open; all shares read) the clock starts and stops at."""

    payload: bytes
    connections: int
    timeout_s: float
    keep_received: bool
    port: int = 0
    received: list[int] = field(default_factory=list)
    kept: list[bytearray] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    ready: threading.Barrier = field(init=False)
    done: threading.Barrier = field(init=False)

    def __post_init__(self) -> None:
        """One slot and one kept buffer per connection; both barriers for the senders and this thread."""
        self.received = [0] * self.connections
        self.kept = [bytearray() for _ in range(self.connections)]
        self.ready = threading.Barrier(self.connections + 1, timeout=self.timeout_s)
        self.done = threading.Barrier(self.connections + 1, timeout=self.timeout_s)

    def _read_header(self, conn: socket.socket) -> int:
        """The byte count a sender announces (uint64) at the start of its connection."""
        head = b""
        while len(head) < TRANSFER_HEADER.size:
            chunk = conn.recv(TRANSFER_HEADER.size - len(head))
            if not chunk:
                raise ConnectionError("closed before the header")
            head += chunk
        return TRANSFER_HEADER.unpack(head)[0]

    def receive(self, conn: socket.socket, slot: int) -> None:
        """Read one connection's share into a :data:`TRANSFER_BUFFER_BYTES` buffer (kept when
        asked), then wait at the ``done`` barrier; errors are recorded, not raised."""
        try:
            conn.settimeout(self.timeout_s)
            expected = self._read_header(conn)
            view = memoryview(bytearray(TRANSFER_BUFFER_BYTES))
            got = 0
            while got < expected:
                n = conn.recv_into(view, min(len(view), expected - got))
                if n == 0:
                    raise ConnectionError("closed early")
                if self.keep_received:
                    self.kept[slot] += view[:n]
                got += n
            self.received[slot] = got
        except BaseException as exc:  # noqa: BLE001 - reported to the caller by loopback_transfer
            self.errors.append(exc)
        finally:
            conn.close()
        self.done.wait()

    def send(self, share: int) -> None:
        """Open a connection, wait for all others at the ``ready`` barrier, send the byte count
        and ``share`` bytes of the repeated payload."""
        try:
            sock = socket.create_connection((LOOPBACK_HOST, self.port), timeout=self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.ready.wait()
            sock.sendall(TRANSFER_HEADER.pack(share))
            view = memoryview(self.payload)
            left = share
            while left > 0:
                n = min(left, len(view))
                sock.sendall(view[:n])
                left -= n
            sock.close()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller by loopback_transfer
            self.errors.append(exc)
            self.ready.abort()


def _timed_accept(server: socket.socket, link: _Loopback) -> tuple[float, list[threading.Thread]]:
    """Accept every connection (a receiver thread each) and time from all open to all read, s."""
    receivers = []
    for slot in range(link.connections):
        conn, _ = server.accept()
        th = threading.Thread(target=link.receive, args=(conn, slot), daemon=True)
        th.start()
        receivers.append(th)
    link.ready.wait()
    t0 = time.perf_counter()
    link.done.wait()
    return time.perf_counter() - t0, receivers


def loopback_transfer(payload: bytes, connections: int, total_bytes: int, timeout_s: float = TRANSFER_TIMEOUT_S,
                      keep_received: bool = False) -> dict:
    """Send ``total_bytes`` (``payload`` repeated; split evenly over ``connections`` parallel TCP
    connections) to a receiver on 127.0.0.1 and time it.

    Each connection sends a uint64 byte count, then its share; the clock runs from the moment all
    connections are open until every receiver has read its share. Returns bytes, seconds, Gbps
    and, with ``keep_received``, the bytes each connection received (for integrity tests: keep
    ``total_bytes`` small). Bounded: sockets time out after ``timeout_s``.
    """
    if connections < 1 or total_bytes < 1 or not payload:
        raise InvalidInput("transfer: connections and bytes must be positive and the payload non-empty")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LOOPBACK_HOST, 0))
    server.listen(connections)
    server.settimeout(timeout_s)
    link = _Loopback(payload, connections, timeout_s, keep_received, port=server.getsockname()[1])
    senders = [threading.Thread(target=link.send, args=(s,), daemon=True) for s in _shares(total_bytes, connections)]
    for th in senders:
        th.start()
    try:
        elapsed, receivers = _timed_accept(server, link)
    except (threading.BrokenBarrierError, OSError) as exc:
        raise InvalidInput(f"transfer: loopback test failed ({link.errors[0] if link.errors else exc})") from None
    finally:
        server.close()
    for th in (*senders, *receivers):
        th.join(timeout_s)
    if link.errors or sum(link.received) != total_bytes:
        raise InvalidInput(f"transfer: loopback test failed ({link.errors[0] if link.errors else 'short read'})")
    out = {"connections": connections, "bytes": total_bytes, "seconds": elapsed,
           "gbps": total_bytes * BITS_PER_BYTE / elapsed / GBPS_BITS_PER_S}
    if keep_received:
        out["received"] = [bytes(k) for k in link.kept]
    return out
