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
    shares = [total_bytes // connections + (1 if i < total_bytes % connections else 0) for i in range(connections)]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LOOPBACK_HOST, 0))
    server.listen(connections)
    server.settimeout(timeout_s)
    port = server.getsockname()[1]
    received = [0] * connections
    kept: list[bytearray] = [bytearray() for _ in range(connections)]
    errors: list[BaseException] = []
    ready = threading.Barrier(connections + 1, timeout=timeout_s)
    done = threading.Barrier(connections + 1, timeout=timeout_s)

    def receive(conn: socket.socket, slot: int) -> None:
        try:
            conn.settimeout(timeout_s)
            head = b""
            while len(head) < TRANSFER_HEADER.size:
                chunk = conn.recv(TRANSFER_HEADER.size - len(head))
                if not chunk:
                    raise ConnectionError("closed before the header")
                head += chunk
            (expected,) = TRANSFER_HEADER.unpack(head)
            buf = bytearray(TRANSFER_BUFFER_BYTES)
            view = memoryview(buf)
            got = 0
            while got < expected:
                n = conn.recv_into(view, min(len(buf), expected - got))
                if n == 0:
                    raise ConnectionError("closed early")
                if keep_received:
                    kept[slot] += view[:n]
                got += n
            received[slot] = got
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append(exc)
        finally:
            conn.close()

    def send(share: int) -> None:
        try:
            sock = socket.create_connection((LOOPBACK_HOST, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ready.wait()
            sock.sendall(TRANSFER_HEADER.pack(share))
            view = memoryview(payload)
            left = share
            while left > 0:
                n = min(left, len(view))
                sock.sendall(view[:n])
                left -= n
            sock.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            ready.abort()

    senders = [threading.Thread(target=send, args=(s,), daemon=True) for s in shares]
    for th in senders:
        th.start()
    receivers = []
    try:
        for slot in range(connections):
            conn, _ = server.accept()
            th = threading.Thread(target=lambda c=conn, s=slot: (receive(c, s), done.wait()), daemon=True)
            th.start()
            receivers.append(th)
        ready.wait()
        t0 = time.perf_counter()
        done.wait()
        elapsed = time.perf_counter() - t0
    except (threading.BrokenBarrierError, OSError) as exc:
        raise InvalidInput(f"transfer: loopback test failed ({errors[0] if errors else exc})") from None
    finally:
        server.close()
    for th in (*senders, *receivers):
        th.join(timeout_s)
    if errors or sum(received) != total_bytes:
        raise InvalidInput(f"transfer: loopback test failed ({errors[0] if errors else 'short read'})")
    out = {"connections": connections, "bytes": total_bytes, "seconds": elapsed,
           "gbps": total_bytes * BITS_PER_BYTE / elapsed / GBPS_BITS_PER_S}
    if keep_received:
        out["received"] = [bytes(k) for k in kept]
    return out
