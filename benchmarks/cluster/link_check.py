#!/usr/bin/env python3
"""What a link delivers: round-trip time and one-stream TCP throughput.

    python3 link_check.py server PORT
    python3 link_check.py client HOST PORT [--seconds S]

The server serves one client and exits (or gives up after 60 s without one). The client prints
one line, e.g. "rtt_ms=0.412 throughput_gbit=0.95": the median of 50 one-byte TCP ping-pongs
(TCP_NODELAY, after 5 unmeasured ones), and the bytes the server received during S seconds
(default 2) of one stream, over the time from the first byte sent to the server's count coming
back (so data still in buffers when the sender stops is not counted as delivered).
Standard library only; used by cluster.sh's cluster_link_check.
"""

import argparse
import socket
import statistics
import struct
import sys
import time

PINGS = 50
WARMUP = 5
CHUNK = 1 << 20


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("peer closed the connection")
        data += part
    return data


def serve(port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(1)
    listener.settimeout(60)
    conn, _ = listener.accept()
    listener.close()
    conn.settimeout(60)  # Never wait forever on a client that is gone.
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Ping-pong: echo one byte at a time until the client sends "T" (start of the stream).
    while True:
        b = recv_exact(conn, 1)
        if b == b"T":
            break
        conn.sendall(b)
    # Stream: count bytes until the client shuts down its side, then report the count.
    received = 0
    buf = bytearray(CHUNK)
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        received += n
    conn.sendall(struct.pack("!Q", received))
    conn.close()


def connect(host, port, deadline_s=10.0):
    # The server may still be starting: retry until the deadline.
    end = time.monotonic() + deadline_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def client(host, port, seconds):
    sock = connect(host, port)
    sock.settimeout(30)  # Never hang on a link that went away.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for i in range(WARMUP + PINGS):
        start = time.perf_counter()
        sock.sendall(b"p")
        recv_exact(sock, 1)
        if i >= WARMUP:
            rtts.append(time.perf_counter() - start)
    sock.sendall(b"T")
    payload = memoryview(bytearray(CHUNK))
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    (received,) = struct.unpack("!Q", recv_exact(sock, 8))
    elapsed = time.perf_counter() - start
    sock.close()
    rtt_ms = statistics.median(rtts) * 1e3
    print(f"rtt_ms={rtt_ms:.3f} throughput_gbit={received * 8 / elapsed / 1e9:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("port", type=int)
    c = sub.add_parser("client")
    c.add_argument("host")
    c.add_argument("port", type=int)
    c.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    try:
        if args.role == "server":
            serve(args.port)
        else:
            client(args.host, args.port, args.seconds)
    except (OSError, ConnectionError) as e:
        print(f"link_check {args.role}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
