"""The rehearsal's sync stage (docs/REHEARSAL.md): `relay-client sync` from
the bench VM through the balancer, both ways, with the delete grant Terraform
writes into the tokens blob (`uploads:rwd` in rehearsal.tfvars' `tokens`). A
mixin of `rehearse.Rehearsal` (its VMs, deployer, values and named tokens).

What it shows: a small tree synced to `uploads/<prefix>`; an unchanged re-sync
reads no file and sends nothing; a file changed and one removed at the source,
then the re-sync with `--delete` replaces the one and deletes the other; every
blob read back (as the other stages do: Get Blob with the deployer's token) and
its SHA-256 equal to its source file's; a token that may write but not delete
(`uploads:rw`) and the write-only client_token asking to delete are refused and
nothing is deleted; then the prefix synced down into a fresh folder and an
unchanged re-run that fetches nothing.

What it cannot show: getting a deleted blob back. The Terraform deployment's
soft delete (`blob_soft_delete_days`) is a setting of the Azure storage account;
Azurite (behind the rehearsal's storage stand-in) implements neither soft delete
nor Undelete Blob, so a deleted blob is gone for good here. The stage lists the
prefix with `include=deleted` and says what it got, and claims no recovery.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess

import infra
from errors import StageFailed, check

RELAYS = ["relay-1", "relay-2"]
# The source tree in the bench VM and where the prefix is synced back down.
SOURCE = "/root/synctree"
DOWN = "/root/sync-down"
# Each direction's own index (docs/SYNC.md: one per destination; named here
# so a rerun of the stage on the same VM starts from nothing).
UP_INDEX = "/root/sync-up-index.sqlite"
DOWN_INDEX = "/root/sync-down-index.sqlite"
# Folder -> how many files: tens of files, a couple of folders, one empty file.
TREE = {"": 6, "logs": 10, "runs/a": 8, "runs/b": 6}
CHANGED = "runs/a/f2.bin"
REMOVED = "logs/f3.bin"
# Removed at the source afterwards, for the grants that may not delete it.
KEPT = "runs/b/f1.bin"


def letters(grant: str) -> str:
    """The access letters of one container of a tokens-file list (bare = `w`)."""
    _, colon, suffix = grant.partition(":")
    return suffix if colon else "w"


def entry_with(tokens: dict, container: str, want: str, without: str = "") -> str:
    """The name of a var.tokens entry whose grant on `container` has every
    letter of `want` and none of `without`."""
    for name, grants in tokens.items():
        for g in grants:
            if g.partition(":")[0] == container and set(want) <= set(letters(g)) and not set(without) & set(
                    letters(g)):
                return name
    raise StageFailed(f"no entry of tokens in rehearsal.tfvars grants {container}:{want} without {without or '-'}")


class SyncStage:
    def sync(self, src: str, dest: str, token: str, index: str, extra: str = "",
             timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
        """`relay-client sync SRC DEST` from the bench VM through the balancer;
        the run and its JSON summary ({} when there is none)."""
        cmd = (f"export RELAY_TOKEN={token}; exec relay-client sync {src} {dest} --index {index} {extra} "
               f"--relay {infra.LB_IP}:{self.values['relay_port']} --relay-cert-sha256 {self.pki.relay_sha256()} "
               f"--json")
        r = self.vms["bench"].run(cmd, check=False, timeout=timeout)
        self.sync_runs.append(cmd.split("; ", 1)[1].split(" --relay ")[0])
        with open(self.logs / "sync.jsonl", "a") as f:
            f.write(json.dumps({"cmd": self.sync_runs[-1], "exit": r.returncode, "stdout": r.stdout,
                                "stderr": r.stderr[-2000:]}) + "\n")
        try:
            summary = json.loads(r.stdout) if r.stdout.strip() else {}
        except json.JSONDecodeError:
            summary = {}
        return r, summary

    def synced(self, what: str, r: subprocess.CompletedProcess, summary: dict, **want) -> dict:
        """The run's `sync` summary, checked: exit 0 and each field `want` names."""
        y = summary.get("sync", {})
        check(r.returncode == 0 and y, f"{what}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-400:]}")
        got = {k: y.get(k) for k in want}
        check(got == want, f"{what}: {got} != {want} ({y})")
        return y

    def make_tree(self) -> dict[str, bytes]:
        """The source tree, written into the bench VM: {name below SOURCE: bytes}."""
        files = {}
        sizes = iter([0, 1, 4096, 65537] + [(i * 7919) % 60000 + 10 for i in range(100)])
        for folder, n in TREE.items():
            for i in range(1, n + 1):
                files[f"{folder}/f{i}.bin" if folder else f"f{i}.bin"] = os.urandom(next(sizes))
        root = self.bench_path(SOURCE)
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        return files

    def blobs_hold(self, what: str, prefix: str, want: dict[str, bytes]) -> None:
        """The prefix holds exactly `want`'s names, each blob's content (read
        back with Get Blob) and its `sha256` metadata its source's SHA-256."""
        url = f"https://{self.storage_host}/{self.values['container']}"
        names = set(self.deployer.list_blobs(url, f"{prefix}/"))
        check(names == {f"{prefix}/{n}" for n in want},
              f"{what}: the prefix holds {sorted(names)}, not {sorted(want)}")
        out = self.run / "sync-blob"
        for name, data in want.items():
            meta = self.deployer.get_blob(f"{url}/{prefix}/{name}", out)
            sha = hashlib.sha256(data).hexdigest()
            got = hashlib.sha256(out.read_bytes()).hexdigest()
            check(got == sha and meta.get("sha256") == sha,
                  f"{what}: {name}: blob {got} / metadata {meta.get('sha256')} != source {sha}")
        out.unlink(missing_ok=True)

    def relay_lines(self, pattern: str) -> int:
        """How many lines of both relays' journals match `pattern`."""
        return sum(len(re.findall(pattern, self.journal(n, "relay-server.service"))) for n in RELAYS)

    def stage_sync(self) -> str:
        v = self.values
        self.sync_runs = []
        deleter = self.named_tokens[entry_with(v["tokens"], v["container"], "rwd")]
        writer = self.named_tokens[entry_with(v["tokens"], v["container"], "rw", without="d")]
        prefix = f"sync-{secrets.token_hex(4)}"
        dest = f"{v['container']}/{prefix}"
        p = re.escape(prefix)
        commits = rf"blob={p}/[^\n]*relay_server::transfer: committed "
        fetches = rf"blob={p}/[^\n]*relay_server::transfer::fetch: sending "
        files = self.make_tree()
        n = len(files)

        # 1. The first sync sends every file; every blob is its source.
        r, s = self.sync(f"{SOURCE}/", dest, deleter, UP_INDEX)
        self.synced("the first sync", r, s, direction="upload", sent=n, deleted=0)
        self.blobs_hold("the first sync", prefix, files)

        # 2. Unchanged: no file read, nothing sent, no commit on either relay.
        before = self.relay_lines(commits)
        r, s = self.sync(f"{SOURCE}/", dest, deleter, UP_INDEX)
        self.synced("the unchanged re-sync", r, s, sent=0, bytes_read=0, skipped_unchanged=n, deleted=0)
        check(self.relay_lines(commits) == before, "the unchanged re-sync committed a blob")

        # 3. One file changed, one removed at the source; --delete replaces
        #    the one and deletes the other, and only that.
        root = self.bench_path(SOURCE)
        files[CHANGED] = os.urandom(len(files[CHANGED]) + 1000)
        (root / CHANGED).write_bytes(files[CHANGED])
        (root / REMOVED).unlink()
        del files[REMOVED]
        deletes = r"relay_server::transfer::delete: delete[^\n]*outcome=\"?deleted\b"
        gone_before = self.relay_lines(deletes)
        r, s = self.sync(f"{SOURCE}/", dest, deleter, UP_INDEX, "--delete")
        y = self.synced("the re-sync with --delete", r, s, sent=1, deleted=1, skipped_unchanged=n - 2)
        check(0 < y.get("bytes_read", 0) <= 2 * len(files[CHANGED]),
              f"the re-sync with --delete read {y.get('bytes_read')} bytes for one changed file")
        check(self.relay_lines(deletes) == gone_before + 1,
              "the relays' journals do not show exactly one delete of the prefix")
        self.blobs_hold("the re-sync with --delete", prefix, files)
        soft = self.soft_deleted(prefix, REMOVED)

        # 4. Grants that may not delete: the blob of a file removed at the
        #    source stays, and is what the download below finds.
        (root / KEPT).unlink()
        refused = self.refused_deletes(dest, writer)
        self.blobs_hold("after the refused deletes", prefix, files)

        # 5. The prefix synced down into a fresh folder, then an unchanged re-run.
        r, s = self.sync(dest, f"{DOWN}/", deleter, DOWN_INDEX)
        self.synced("the download sync", r, s, direction="download", fetched=len(files), conflicts=0)
        self.local_files_hold(DOWN, files)
        before = self.relay_lines(fetches)
        r, s = self.sync(dest, f"{DOWN}/", deleter, DOWN_INDEX)
        self.synced("the unchanged download re-sync", r, s, fetched=0, bytes_read=0,
                    skipped_unchanged=len(files))
        check(self.relay_lines(fetches) == before, "the unchanged download re-sync fetched a blob")
        return (f"{n} files in {len(TREE)} folders synced to {dest} through the balancer with a tokens-file "
                f"`{v['container']}:rwd` grant; the unchanged re-sync read 0 bytes, sent nothing, no relay "
                f"committed; {CHANGED} changed and {REMOVED} removed at the source: the re-sync with --delete sent "
                f"1 and deleted 1 (If-Match the listed ETag), every blob's sha256 equals its source's; {refused}: "
                f"nothing deleted; the prefix synced down into a fresh folder ({len(files)} fetched, each file its "
                f"blob's sha256) and an unchanged re-run fetched nothing; soft delete not shown: {soft}")

    def refused_deletes(self, dest: str, writer: str) -> str:
        """`--delete` asked for by grants that may not delete: `uploads:rw`
        reaches the relay's Delete and is refused; client_token (write only)
        may not even list DEST. Neither deletes anything; in words."""
        v = self.values
        r, s = self.sync(f"{SOURCE}/", dest, writer, UP_INDEX, "--delete")
        said = r.stdout + r.stderr
        check(r.returncode == 1 and "refused to delete" in said and s.get("sync", {}).get("deleted") == 0,
              f"`uploads:rw` asking to delete: exit {r.returncode}: {said.strip()[-400:]}")
        r2, s2 = self.sync(f"{SOURCE}/", dest, self.client_token, UP_INDEX, "--delete")
        said2 = (r2.stdout + r2.stderr).strip()
        y2 = s2.get("sync", {})
        check(r2.returncode in (1, 2) and "may not read" in said2 and not y2.get("deleted")
              and not y2.get("planned_deletes"), f"client_token asking to delete: exit {r2.returncode}: {said2[-400:]}")
        # A refused listing ends the run (exit 2) or is a gap (exit 1: the
        # destination not listed whole, so no delete is planned; each file is
        # then offered and refused, a blob with its name being there).
        how2 = (f"exit {r2.returncode}, its listing refused (`may not read`)"
                + (", a gap: no delete planned" if y2.get("gaps") else ""))
        return (f"with `{v['container']}:rw` the delete was refused (exit 1, `refused to delete`) and client_token "
                f"(write only) was refused too ({how2})")

    def local_files_hold(self, folder: str, want: dict[str, bytes]) -> None:
        """The folder in the bench VM holds exactly `want` (names and SHA-256s),
        and no partial file."""
        out = self.vms["bench"].run(f"cd {folder} && find . -type f -print0 | xargs -0 -r sha256sum").stdout
        got = {line.split(None, 1)[1].removeprefix("./"): line.split(None, 1)[0] for line in out.splitlines()}
        wanted = {name: hashlib.sha256(data).hexdigest() for name, data in want.items()}
        check(got == wanted, f"{folder}: {len(got)} files; differing from their blobs: "
              f"{sorted(k for k in set(got) | set(wanted) if got.get(k) != wanted.get(k))}")

    def soft_deleted(self, prefix: str, name: str) -> str:
        """What the storage stand-in says of the deleted blob when asked for
        deleted blobs too (List Blobs include=deleted), in words."""
        url = f"https://{self.storage_host}/{self.values['container']}"
        out = self.run / "sync-list.xml"
        code = self.deployer.request("GET", f"{url}?restype=container&comp=list&include=deleted&prefix={prefix}/",
                                     out=out)
        listed = out.read_text(errors="replace") if out.exists() else ""
        out.unlink(missing_ok=True)
        if code == 200 and f"<Name>{prefix}/{name}</Name>" not in listed:
            seen = "List Blobs include=deleted does not return it"
        elif code == 200:
            seen = "List Blobs include=deleted returns it, but Undelete Blob is not modelled"
        else:
            seen = f"List Blobs include=deleted answered HTTP {code}"
        return (f"Azurite behind the storage stand-in implements neither soft delete nor Undelete Blob ({seen}): "
                f"the recovery of docs/SYNC.md is Azure's blob_soft_delete_days, not shown here")
