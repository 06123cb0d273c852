#!/usr/bin/env python3
"""Where a Put Blob's CPU goes inside the relay, by the innermost crate on
each sample's stack (finding 10 of README.md).

    perf script -i DATA --pid RELAY_PID -F sym,ip > relay.stacks
    python3 putblob_frames.py relay.stacks

Counts only samples with `put_blob` on the stack. The HTTP connection's own
work (hyper's dispatch task, TCP) runs in a task of its own and is not among
them.
"""
import collections
import re
import sys

CRATES = re.compile(r'(typespec_client_core|azure_core|azure_storage_blob|relay_storage|reqwest|'
                    r'hyper_util|hyper|url::|http::|tower|tokio|uuid|time::|serde|quick_xml|'
                    r'base64|hmac|sha2|md5)[:>]')


def samples(path):
    cur = []
    for line in open(path):
        line = line.strip()
        if not line:
            if cur:
                yield cur
            cur = []
            continue
        parts = line.split(None, 1)
        if len(parts) == 2:
            cur.append(parts[1].replace(' (inlined)', ''))
    if cur:
        yield cur


def main():
    total = 0
    put = 0
    by_crate = collections.Counter()
    for s in samples(sys.argv[1]):
        total += 1
        if not any('put_blob' in f for f in s):
            continue
        put += 1
        crate = next((m.group(1) for f in s if (m := CRATES.search(f))), 'other')
        by_crate[crate] += 1
    print(f"{put} of {total} samples ({100 * put / total:.1f} %) have put_blob on the stack")
    print("| innermost crate | samples | share of Put Blob |")
    print("|---|---:|---:|")
    for crate, n in by_crate.most_common():
        print(f"| {crate} | {n} | {100 * n / put:.1f} % |")


if __name__ == '__main__':
    main()
