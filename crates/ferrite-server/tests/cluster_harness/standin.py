#!/usr/bin/env python3
"""A stand-in for `ferrite-server` in cluster mode, for the cluster harness's own tests.

It takes the options the harness gives a node, listens where a cluster node would (native, RESP
and peer listeners, shard g on base port + g), announces itself as the server does, and answers
one-line commands on its native listeners:

    id            -> "node N native G"
    starts        -> how many times a node has started on this data directory
    dial HOST:PORT -> dials that address from this node's own peer address (as the harness asks of
                     the real server; with --dial-from-any, from whatever address the kernel
                     picks), sends "who" and answers "ok REPLY", or "error WHAT" after a second
                     without one

Peer and RESP listeners answer any line with "node N peer G" / "node N resp G".
"""

import argparse
import os
import socket
import socketserver
import sys
import threading

DIAL_TIMEOUT_SECONDS = 1.0


def host_port(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--peer-listen", type=host_port, required=True)
    parser.add_argument("--advertise-host", required=True)
    parser.add_argument("--listen", type=host_port, required=True)
    parser.add_argument("--resp-listen", type=host_port, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--quiet", action="store_true", help="print nothing (readiness by listening)")
    parser.add_argument("--fail", action="store_true", help="complain on stderr and exit before ready")
    parser.add_argument("--dial-from-any", action="store_true", help="dial without binding the peer address")
    return parser.parse_args()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(address, answer):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                reply = answer(line.decode().strip())
                self.wfile.write((reply + "\n").encode())

    server = Server(address, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def dial(source_host, target):
    try:
        with socket.socket() as sock:
            if source_host is not None:
                sock.bind((source_host, 0))
            sock.settimeout(DIAL_TIMEOUT_SECONDS)
            sock.connect(host_port(target))
            sock.sendall(b"who\n")
            reply = sock.makefile().readline().strip()
            return "ok " + reply if reply else "error closed"
    except OSError as error:
        return "error " + type(error).__name__


def main():
    args = parse_args()
    if args.fail:
        print("stand-in: failing on purpose", file=sys.stderr, flush=True)
        sys.exit(3)
    os.makedirs(args.data_dir, exist_ok=True)
    starts_path = os.path.join(args.data_dir, "starts")
    starts = int(open(starts_path).read()) + 1 if os.path.exists(starts_path) else 1
    with open(starts_path, "w") as file:
        file.write(str(starts))
    node = args.node_id
    lines = [f"ferrite-server stand-in, node {node} with {args.shards} shard(s), data dir {args.data_dir}"]
    for g in range(args.shards):
        def native(command, g=g):
            if command == "id":
                return f"node {node} native {g}"
            if command == "starts":
                return str(starts)
            if command.startswith("dial "):
                source = None if args.dial_from_any else args.peer_listen[0]
                return dial(source, command[len("dial "):])
            return "error unknown command"

        native_address = (args.listen[0], args.listen[1] + g)
        resp_address = (args.resp_listen[0], args.resp_listen[1] + g)
        serve(native_address, native)
        serve(resp_address, lambda _, g=g: f"node {node} resp {g}")
        serve((args.peer_listen[0], args.peer_listen[1] + g), lambda _, g=g: f"node {node} peer {g}")
        lines.append(f"shard {g}: native {native_address[0]}:{native_address[1]}")
        lines.append(f"shard {g}: resp {resp_address[0]}:{resp_address[1]}")
    lines.append(f"node {node}: peer {args.advertise_host}:{args.peer_listen[1]}")
    lines.append("cluster: uninitialized")
    lines.append("ready.")
    print(f"stand-in node {node}: start {starts}", file=sys.stderr, flush=True)
    if not args.quiet:
        print("\n".join(lines), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
