#!/bin/bash
# Offline checks of terraform/ and deploy/ (no Azure, no providers):
#   1. terraform fmt -check -recursive terraform/
#   2. pytest tests/terraform (HCL invariants, cloud-init rendering, deploy/)
#   3. checkov on terraform/ (zero failures; skips are justified inline)
# Venvs: ${TF_VENV:-/tmp/blob-relay-tfvenv} for pytest + python-hcl2, and
# ${TF_VENV}-checkov for checkov (it pins bc-python-hcl2, which clashes with
# python-hcl2). Exits non-zero if any step fails; the last line is pytest's
# summary.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${TF_VENV:-/tmp/blob-relay-tfvenv}
ck_venv=${venv}-checkov
cd "$repo" || exit 1

failed=()

ensure_venv() { # DIR REQUIREMENTS
    local dir=$1 req=$2 stamp
    stamp="$dir/.requirements.sha256"
    if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && sha256sum --status -c "$stamp" 2>/dev/null; then
        return 0
    fi
    python3 -m venv "$dir" || return 1
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$req" || return 1
    sha256sum "$req" >"$stamp"
}

echo "== venvs"
# Both at once: pip spends most of its time waiting on the registry.
ensure_venv "$venv" "$here/requirements.txt" &
py_pid=$!
ensure_venv "$ck_venv" "$here/requirements-checkov.txt" &
ck_pid=$!
wait "$py_pid" || failed+=("pip install (pytest)")
wait "$ck_pid" || failed+=("pip install (checkov)")

echo "== terraform fmt -check -recursive terraform/"
if command -v terraform >/dev/null; then
    TF_CLI_CONFIG_FILE=/dev/null terraform fmt -check -recursive -diff terraform/ || failed+=("terraform fmt")
else
    echo "terraform not installed" >&2
    failed+=("terraform fmt (terraform missing)")
fi

echo "== checkov"
if [ -x "$ck_venv/bin/checkov" ]; then
    ck_out=$("$ck_venv/bin/checkov" -d terraform/ --framework terraform --compact --quiet \
        --skip-download 2>&1)
    ck_rc=$?
    printf '%s\n' "$ck_out" | grep -v '^$'
    [ $ck_rc -eq 0 ] || failed+=("checkov")
    ck_summary=$(printf '%s\n' "$ck_out" | grep -E '^Passed checks:' | tail -n1)
else
    failed+=("checkov (not installed)")
    ck_summary="checkov: not run"
fi

echo "== pytest tests/terraform"
if [ -x "$venv/bin/python" ]; then
    py_log=$(mktemp)
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/terraform >"$py_log" 2>&1
    py_rc=$?
    cat "$py_log"
    py_summary=$(grep -E '(passed|failed|error|no tests ran)' "$py_log" | tail -n1 | sed 's/^=* *//; s/ *=*$//')
    rm -f "$py_log"
    [ $py_rc -eq 0 ] || failed+=("pytest")
else
    failed+=("pytest (venv missing)")
    py_summary="0 passed, 1 failed"
fi

echo "== summary"
echo "checkov: ${ck_summary:-?}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "tests/terraform/check.sh: FAILED: ${failed[*]}" >&2
fi
echo "$py_summary"
[ ${#failed[@]} -eq 0 ]
