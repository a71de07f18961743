#!/usr/bin/env python3
"""Hold N established, idle TCP connections for the daemon CPU benchmark.

  idle_sockets.py serve ADDR PORT N     accept N connections and hold them
  idle_sockets.py connect ADDR PORT N   open N connections and hold them

Prints "ready N" once all N are established, then waits for stdin to close.
"""
import resource
import socket
import sys


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, n + 64)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))


def main():
    mode, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    raise_nofile(n)
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    held = []
    if mode == "serve":
        srv = socket.socket(fam, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(4096)
        print("listening", flush=True)
        while len(held) < n:
            c, _ = srv.accept()
            held.append(c)
    else:
        for _ in range(n):
            held.append(socket.create_connection((addr, port)))
    print(f"ready {len(held)}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
