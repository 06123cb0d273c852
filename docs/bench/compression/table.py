#!/usr/bin/env python3
"""Issue 34's table from wanbench results: per link and data set, the median
of each method's verified runs (time, file bytes per second, bytes on the
wire, client and relay CPU), and --compress auto against off and direct.

Usage: table.py DIR...   (each DIR holds a wanbench results.json)
"""
import json
import statistics
import sys
from collections import defaultdict


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main(dirs):
    rows = []
    for d in dirs:
        rows += json.load(open(f"{d}/results.json"))
    groups = defaultdict(list)
    for r in rows:
        p = r["profile"]
        link = f"{p['rtt_ms']:.0f} ms / {p['loss'] * 100:g} % / {p['rate_mbit']:.0f} Mbit/s"
        groups[(link, r.get("data") or "random", r["workload"], r["method"])].append(r)
    keys = sorted({k[:3] for k in groups}, key=lambda k: (k[0], k[1], k[2]))
    print("| Link | Data | Files | Method | Runs verified | Time s (median) | File Mbit/s (median, min–max) | IP bytes up, MB (median) | File / wire | Client CPU s | Relay CPU s | auto ÷ off | auto ÷ direct-bbr |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for link, data, workload in keys:
        med = {}
        for method in ["relay", "relay-off", "direct-bbr"]:
            rs = groups.get((link, data, workload, method), [])
            ok = [r for r in rs if r["verified"]]
            if not rs:
                continue
            g = [r["goodput_mbit"] for r in ok]
            med[method] = median(g)
            wire = median([r["link"]["up_forwarded_bytes"] / 1e6 for r in ok])
            file_mb = median([r["bytes"] / 1e6 for r in ok])
            name = "relay (auto)" if method == "relay" else method
            ratio_off = ratio_direct = ""
            if method == "relay":
                ratio_off = "{r_off}"
                ratio_direct = "{r_direct}"
            line = (
                f"| {link} | {data} | {workload} | {name} | {len(ok)}/{len(rs)} | "
                f"{median([r['seconds'] for r in ok]):.2f} | {median(g):.1f} ({min(g):.1f}–{max(g):.1f}) | "
                f"{wire:.0f} | {file_mb / wire:.2f} | "
                f"{median([r['client_cpu_s'] for r in ok]):.2f} | "
                f"{median([r['relay_cpu_s'] for r in ok]) if method != 'direct-bbr' else float('nan'):.2f} | "
                f"{ratio_off} | {ratio_direct} |"
            )
            med.setdefault("lines", []).append(line)
        for line in med.get("lines", []):
            r_off = med.get("relay", 0) / med["relay-off"] if med.get("relay-off") else float("nan")
            r_direct = med.get("relay", 0) / med["direct-bbr"] if med.get("direct-bbr") else float("nan")
            print(line.replace("{r_off}", f"{r_off:.2f}×").replace("{r_direct}", f"{r_direct:.2f}×").replace("nan×", "–").replace("nan", "–"))


if __name__ == "__main__":
    main(sys.argv[1:])
