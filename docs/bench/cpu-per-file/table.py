#!/usr/bin/env python3
"""CPU per file from wanbench results: one row per run.

Usage: table.py DIR... (each DIR holds a wanbench results.json; the build is
named by the DIR's name, e.g. loopA-base-1). The storage column is Azurite's
CPU, or the stand-in's in rows run with `--storage standin`."""
import json
import os
import sys

print("| run | place | files | client µs/file | relay µs/file | storage µs/file | wall s | load (1 min) |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for d in sys.argv[1:]:
    path = os.path.join(d, "results.json")
    if not os.path.exists(path):
        path = os.path.join(d, "results.partial.json")
    for r in json.load(open(path)):
        n = r["files"]
        place = "loopback" if r.get("loopback") else "{:g} ms / {:g} / {:g} Mbit/s".format(
            r["profile"]["rtt_ms"], r["profile"]["loss"], r["profile"]["rate_mbit"])
        if r.get("standin"):
            place += ", stand-in"
        if r.get("storage_delay"):
            place += ", +{} ms".format(r["storage_delay"]["request_ms"])
        cpu = lambda k: "{:.0f}".format(1e6 * r[k] / n) if r.get(k) is not None else "–"
        print("| {} | {} | {} | {} | {} | {} | {:.1f} | {} |".format(
            os.path.basename(d.rstrip("/")), place, r["workload"], cpu("client_cpu_s"),
            cpu("relay_cpu_s"), cpu("azurite_cpu_s"), r["seconds"], r.get("loadavg_1m", "–")))
