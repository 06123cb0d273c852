"""The rehearsal's stand-in for the Azure Standard Load Balancer of
terraform/scale_set.tf: one UDP frontend (the rule's frontend_port), a backend
pool, flows spread by a hash of the 5-tuple (load_distribution = "Default")
and pinned to their backend while it is healthy, and the HTTP health probe of
azurerm_lb_probe (path, port, interval, number_of_probes read from the .tf by
render.py): a backend leaves rotation after that many consecutive failed
probes and returns after one success. A flow whose backend left rotation is
moved to a healthy one (hash over the healthy set), as new flows are.

Difference from Azure, said in docs/REHEARSAL.md: this balancer is a user-space
proxy, so the relays see the balancer's address as the source of a flow
(Azure's keeps the client's); the NSG is not modelled.

State (flows per backend, probe results, health changes) goes to --state as
JSON once a second.

Usage: python3 balancer.py --listen IP:PORT --backend IP --backend IP
       --backend-port N --probe-port N --probe-path P --interval-s N --threshold N --state FILE
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import selectors
import socket
import threading
import time
import urllib.request


class Backend:
    def __init__(self, ip: str):
        self.ip = ip
        self.healthy = False
        self.failures = 0
        self.probes = {"ok": 0, "failed": 0}
        self.changes: list = []  # [time, "up"|"down"]
        self.flows_total = 0


def probe_loop(args, backends: list[Backend], lock: threading.Lock) -> None:
    while True:
        for b in backends:
            url = f"http://{b.ip}:{args.probe_port}{args.probe_path}"
            try:
                with urllib.request.urlopen(url, timeout=min(args.interval_s, 5)) as r:
                    ok = r.status == 200
            except Exception:
                ok = False
            with lock:
                b.probes["ok" if ok else "failed"] += 1
                if ok:
                    b.failures = 0
                    if not b.healthy:
                        b.healthy = True
                        b.changes.append([time.time(), "up"])
                else:
                    b.failures += 1
                    if b.healthy and b.failures >= args.threshold:
                        b.healthy = False
                        b.changes.append([time.time(), "down"])
        time.sleep(args.interval_s)


def pick(five_tuple: tuple, healthy: list[Backend]) -> Backend | None:
    if not healthy:
        return None
    h = hashlib.sha256(repr(five_tuple).encode()).digest()
    return healthy[int.from_bytes(h[:8], "big") % len(healthy)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--backend", action="append", required=True)
    p.add_argument("--backend-port", type=int, required=True)
    p.add_argument("--probe-port", type=int, required=True)
    p.add_argument("--probe-path", required=True)
    p.add_argument("--interval-s", type=float, required=True)
    p.add_argument("--threshold", type=int, required=True)
    p.add_argument("--state", required=True)
    args = p.parse_args()
    host, port = args.listen.rsplit(":", 1)
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    front.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    front.bind((host, int(port)))
    front.setblocking(False)
    backends = [Backend(ip) for ip in args.backend]
    lock = threading.Lock()
    threading.Thread(target=probe_loop, args=(args, backends, lock), daemon=True).start()
    sel = selectors.DefaultSelector()
    sel.register(front, selectors.EVENT_READ, None)
    flows: dict = {}  # client addr -> [backend, socket, last seen]
    last_state = 0.0
    while True:
        for key, _ in sel.select(timeout=0.2):
            if key.data is None:
                while True:
                    try:
                        data, client = front.recvfrom(65535)
                    except BlockingIOError:
                        break
                    with lock:
                        healthy = [b for b in backends if b.healthy]
                        flow = flows.get(client)
                        if flow is None or not flow[0].healthy:
                            b = pick((client[0], client[1], host, int(port), "udp"), healthy)
                            if b is None:
                                continue
                            if flow is not None:
                                sel.unregister(flow[1])
                                flow[1].close()
                            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                            s.connect((b.ip, args.backend_port))
                            s.setblocking(False)
                            flow = [b, s, time.time()]
                            flows[client] = flow
                            b.flows_total += 1
                            sel.register(s, selectors.EVENT_READ, client)
                    flow[2] = time.time()
                    try:
                        flow[1].send(data)
                    except OSError:
                        pass
            else:
                client = key.data
                while True:
                    try:
                        data = key.fileobj.recv(65535)
                    except (BlockingIOError, ConnectionRefusedError):
                        break
                    try:
                        front.sendto(data, client)
                    except OSError:
                        break
        now = time.time()
        if now - last_state >= 1:
            last_state = now
            with lock:
                state = {b.ip: {"healthy": b.healthy, "probes": b.probes, "changes": b.changes,
                                "flows_total": b.flows_total,
                                "flows_now": sum(1 for f in flows.values() if f[0] is b),
                                # Each client address's last datagram: a check can
                                # count the flows a client used, including one on
                                # a source port an earlier client had (no new flow).
                                "last_seen": {f"{c[0]}:{c[1]}": f[2] for c, f in flows.items() if f[0] is b}}
                         for b in backends}
                # When this state was taken: a reader waits for one taken after
                # what it checks, rather than sleeping and hoping.
                state["_written"] = now
                state["_probe"] = {"port": args.probe_port, "path": args.probe_path,
                                   "interval_s": args.interval_s, "threshold": args.threshold}
            with open(args.state + ".new", "w") as f:
                json.dump(state, f)
            os.replace(args.state + ".new", args.state)


if __name__ == "__main__":
    main()
