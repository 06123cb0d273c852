#!/usr/bin/env python3
"""CPU per 100 Mbit/s of verified goodput, per run and median, from wanbench
results.json files: python3 table.py before after after-crc64"""
import json
import statistics
import sys

for run_dir in sys.argv[1:]:
    rows = {}
    for r in json.load(open(f"{run_dir}/results.json")):
        p = r["profile"]
        key = f"{p['rtt_ms']:g} ms / {p['loss'] * 100:g} % / {p['rate_mbit']:g} Mbit/s, {r['workload']}"
        units = r["seconds"] * r["goodput_mbit"] / 100  # (100 Mbit/s) x seconds
        rows.setdefault(key, []).append(
            (r["goodput_mbit"], r["client_cpu_s"] / units, r["relay_cpu_s"] / units,
             r["azurite_cpu_s"], r["queue_loss_pct"]))
    for key, runs in rows.items():
        med = lambda i: statistics.median(x[i] for x in runs)  # noqa: E731
        print(f"{run_dir}: {key}: goodput {med(0):.1f} Mbit/s "
              f"({', '.join(f'{x[0]:.1f}' for x in runs)}); "
              f"client {med(1):.3f} ({', '.join(f'{x[1]:.3f}' for x in runs)}), "
              f"relay {med(2):.3f} ({', '.join(f'{x[2]:.3f}' for x in runs)}) cores per 100 Mbit/s; "
              f"Azurite {med(3):.2f} CPU s; queue loss {max(x[4] for x in runs):.2f} % at most")
