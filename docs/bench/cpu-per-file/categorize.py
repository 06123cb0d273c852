#!/usr/bin/env python3
"""Put each perf sample of one process in a category by its call stack.

Usage: perf script -i perf.data -F comm,pid,tid,ip,sym,dso | categorize.py [PID]
(perf record --call-graph dwarf; with PID, only that process's samples). Each sample's stack is read leaf first and
the first frame that some rule matches decides (rules tried in order), so
malloc under hyper counts as allocation, a sendmsg under quinn as a syscall,
and a HashMap insert under the Azure SDK as HTTP.
"""
import re
import sys
from collections import Counter

# (category, regex over one frame's symbol); order matters: first match wins,
# scanning the rules in order and, for each rule, all frames of the stack.
RULES = [
    ("SHA-256 (whole-file hash)", r"sha2::sha256|sha256_block"),
    ("checksum (MD5 / CRC-64 of Put Blob/Block)", r"md5::|crc_fast|crc64"),
    ("zstd (compression trials and chunks)", r"ZSTD_|zstd::|zstd_safe|HIST_count|XXH64"),
    ("logging / tracing", r"tracing_subscriber|tracing_core::|tracing::span::|fmt::format::"),
    ("allocation (malloc/free, page faults)", r"^(_int_malloc|_int_free|malloc|cfree|free|realloc|_int_realloc|malloc_consolidate|unlink_chunk.*|__libc_malloc|__GI___libc_malloc|__GI___libc_free|sysmalloc|clear_page_erms|exc_page_fault|__rust_alloc|__rust_dealloc|tcache.*|alloc_perturb|calloc|__libc_calloc)$"),
    ("scheduling / wake-ups (epoll, futex, context switch, timers)", r"finish_task_switch|schedule|futex|epoll|try_to_wake_up|timerfd|hrtimer|parking_lot|__x64_sys_futex|ep_poll|tokio::runtime::(park|time|scheduler::multi_thread::(park|idle))|x2apic|native_write_msr"),
    ("AES-GCM / TLS (packet crypto, handshake)", r"aes_gcm|gcm_|aws_lc|rustls|aead_|OPENSSL|ChaCha|x25519|ecdsa|p256"),
    ("UDP send/receive syscalls (kernel)", r"udp_|__sys_sendmsg|__sys_recvmmsg|___sys_|sock_sendmsg|sock_recvmsg|ip_|__dev_queue_xmit|tun_|skb|net_rx|__netif|dev_hard_start|loopback_xmit|ip6_"),
    ("TCP to storage (kernel)", r"tcp_|__sys_sendto|__sys_recvfrom|inet_"),
    ("HTTP request/response (hyper, reqwest, Azure SDK, headers)", r"hyper::|reqwest::|azure_|typespec|http::header|http::|url::|h2::|percent_encoding|form_urlencoded|time::format|base64"),
    ("QUIC (quinn, quinn-proto)", r"quinn"),
    ("relay/client code (protocol, pipeline, staging)", r"relay_|blob_relay|relay_client|relay_server"),
    ("copies (memmove, memset)", r"memmove|memcpy|memset|copy_user|_copy_(to|from)_iter"),
    ("Tokio runtime", r"tokio::"),
    ("file I/O (kernel)", r"vfs_|ext4_|filemap|__x64_sys_(read|openat|statx|newfstat|close)|do_sys_open|path_"),
]
COMPILED = [(c, re.compile(p)) for c, p in RULES]
OTHER_K = "other kernel"
OTHER_U = "other user space"


def classify(frames):
    for sym, _dso in frames:
        for cat, rx in COMPILED:
            if rx.search(sym):
                return cat
    leaf_dso = frames[0][1] if frames else ""
    return OTHER_K if "kernel" in leaf_dso else OTHER_U


def samples(lines, pid=None):
    frames = []
    keep = True
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames and keep:
                yield frames
            frames = []
            continue
        if not line.startswith(("\t", " ")):
            # The sample's header: "comm pid/tid".
            m = re.search(r"\s(\d+)/\d+", line)
            keep = pid is None or (m is not None and m.group(1) == pid)
            continue
        m = re.match(r"\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)$", line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            frames.append((sym, m.group(2)))
    if frames and keep:
        yield frames


def main():
    pid = sys.argv[1] if len(sys.argv) > 1 else None
    counts = Counter()
    for frames in samples(sys.stdin, pid):
        counts[classify(frames)] += 1
    total = sum(counts.values())
    print(f"| category | samples | share |")
    print(f"|---|---:|---:|")
    for cat, n in counts.most_common():
        print(f"| {cat} | {n} | {100.0 * n / total:.1f} % |")
    print(f"| total | {total} | |")


if __name__ == "__main__":
    main()
