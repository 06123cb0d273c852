"""What deploy/monitoring/relay-alerts.yml must fire, computed independently
of Prometheus from the recorded samples: each rule's expression evaluated in
Python at every evaluation time (PromQL's rules for what it uses: instant
lookups, range windows, counter resets, rate()'s extrapolation,
histogram_quantile, *_over_time, `sum by`), then its `for:`.

Three answers, not two. A window boundary that falls on a sample is closed
in Prometheus 2 and open in Prometheus 3, and a value within 1 % of a
threshold depends on float details: where the two window conventions
disagree, or a value is that close, the answer is "unsure" and no check is
written for that alert at that time. Everywhere else the expected set of
firing alerts is exact, and promtool must agree with it (alert_test.py).

The rules are modelled by name; `check_rules` refuses a rules file whose
expressions or thresholds are not the ones modelled here, so a changed rule
cannot silently be tested against the old one. Standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
MARGIN = 0.01  # relative: closer to a threshold than this is unsure
T, F, U = "fires", "quiet", "unsure"

Labels = tuple  # sorted (name, value) pairs


@dataclass
class Series:
    metric: str
    labels: dict
    values: list  # per sample: float, or None (no sample: absent or stale)


class Recording:
    """Samples k = 0..n-1 at k * interval seconds, as promtool reads them."""

    def __init__(self, series: dict[str, list], interval: float):
        self.interval = interval
        self.n = max((len(v) for v in series.values()), default=0)
        self.series = []
        for key, values in series.items():
            m = SERIES.match(key)
            if not m:
                raise ValueError(f"not a series name: {key}")
            self.series.append(Series(m.group(1), dict(LABEL.findall(m.group(2))), list(values)))

    def select(self, metric: str, **match: str) -> list[Series]:
        return [s for s in self.series
                if s.metric == metric and all(s.labels.get(k) == v for k, v in match.items())]

    def window(self, s: Series, k: int, range_s: float, closed: bool) -> list[tuple[float, float]]:
        """(time, value) of the samples a range selector [range_s] sees at
        sample k: [t - range, t] (Prometheus 2) or (t - range, t] (3)."""
        r = round(range_s / self.interval)
        lo = k - r if closed else k - r + 1
        return [(j * self.interval, s.values[j]) for j in range(max(lo, 0), k + 1) if s.values[j] is not None]


def extrapolated(points: list[tuple[float, float]], t: float, range_s: float, rate: bool) -> float | None:
    """rate() / increase() of a counter, as Prometheus' extrapolatedRate
    computes it (resets added back; extrapolated to the window's edges when
    the first and last samples are near them, not below a zero counter)."""
    if len(points) < 2:
        return None
    start, end = t - range_s, t
    result = points[-1][1] - points[0][1]
    prev = points[0][1]
    for _, v in points[1:]:
        if v < prev:
            result += prev
        prev = v
    to_start = points[0][0] - start
    to_end = end - points[-1][0]
    sampled = points[-1][0] - points[0][0]
    avg = sampled / (len(points) - 1)
    if result > 0 and points[0][1] >= 0:
        to_zero = sampled * (points[0][1] / result)
        to_start = min(to_start, to_zero)
    threshold = avg * 1.1
    span = sampled + (to_start if to_start < threshold else avg / 2) + (to_end if to_end < threshold else avg / 2)
    result *= span / sampled
    return result / range_s if rate else result


def summed(rec: Recording, k: int, closed: bool, metric: str, by: tuple, range_s: float, rate: bool,
           **match: str) -> dict[Labels, float]:
    """sum by (BY) (rate|increase(METRIC{MATCH}[RANGE]))."""
    out: dict[Labels, float] = {}
    for s in rec.select(metric, **match):
        v = extrapolated(rec.window(s, k, range_s, closed), k * rec.interval, range_s, rate)
        if v is None:
            continue
        key = tuple(sorted((b, s.labels[b]) for b in by if b in s.labels))
        out[key] = out.get(key, 0.0) + v
    return out


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return math.nan
    # Prometheus makes cumulative counts monotonic before it looks.
    fixed, top = [], 0.0
    for le, c in buckets:
        top = max(top, c)
        fixed.append((le, top))
    total = fixed[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, end, count = 0.0, fixed[b][0], fixed[b][1]
    if b > 0:
        start = fixed[b - 1][0]
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    return start + (end - start) * (rank / count)


def instant(rec: Recording, k: int, metric: str, **match: str) -> dict[Labels, float]:
    """An instant selector at sample k: the sample there (the recordings mark
    a vanished series stale at once, so there is never an older one to use)."""
    return {tuple(sorted(s.labels.items())): s.values[k] for s in rec.select(metric, **match)
            if s.values[k] is not None}


JOB = {"job": "blob-relay"}
BY = ("job", "instance")


def down(rec, k, closed):
    return {ls: v for ls, v in instant(rec, k, "up", **JOB).items()}


def storage_unreachable(rec, k, closed):
    return instant(rec, k, "blob_relay_storage_reachable", **JOB)


def storage_failures(rec, k, closed):
    return summed(rec, k, closed, "blob_relay_failures_total", BY, 600, False, **JOB, **{"class": "storage"})


def storage_retries(rec, k, closed):
    return summed(rec, k, closed, "blob_relay_azure_retries_total", BY, 300, True, **JOB)


def refusals(rec, k, closed):
    return summed(rec, k, closed, "blob_relay_rejections_total", (*BY, "reason"), 300, True, **JOB)


def commit_latency(rec, k, closed):
    per: dict[Labels, list] = {}
    for s in rec.select("blob_relay_commit_seconds_bucket", **JOB):
        v = extrapolated(rec.window(s, k, 300, closed), k * rec.interval, 300, True)
        if v is None:
            continue
        key = tuple(sorted((b, s.labels[b]) for b in BY))
        per.setdefault(key, []).append((float(s.labels["le"]), v))
    out = {}
    for key, buckets in per.items():
        q = quantile(0.99, buckets)
        if not math.isnan(q):
            out[key] = q
    return out


def budget_saturated(rec, k, closed):
    out = {}
    for s in rec.select("blob_relay_budget_in_use_bytes", **JOB):
        key = tuple(sorted(s.labels.items()))
        budget = [b for b in rec.select("blob_relay_budget_bytes", **JOB) if tuple(sorted(b.labels.items())) == key]
        used = [v for _, v in rec.window(s, k, 300, closed)]
        limit = [v for b in budget for _, v in rec.window(b, k, 300, closed)]
        if used and limit and max(limit) > 0:
            out[key] = (sum(used) / len(used)) / max(limit)
    return out


def busy(rec, k, closed):
    return summed(rec, k, closed, "blob_relay_failures_total", BY, 600, False, **JOB, **{"class": "relay", "code": "busy"})


@dataclass
class Rule:
    expr: str  # as in relay-alerts.yml, whitespace collapsed
    value: object  # (Recording, k, closed) -> {labels: value}
    op: str  # "==" or ">"
    threshold: float


RULES = {
    "BlobRelayDown": Rule('up{job="blob-relay"} == 0', down, "==", 0),
    "BlobRelayStorageUnreachable": Rule('blob_relay_storage_reachable{job="blob-relay"} == 0', storage_unreachable,
                                        "==", 0),
    "BlobRelayStorageFailures": Rule('sum by (job, instance) (increase(blob_relay_failures_total{job="blob-relay", '
                                     'class="storage"}[10m])) > 0', storage_failures, ">", 0),
    "BlobRelayStorageRetries": Rule('sum by (job, instance) (rate(blob_relay_azure_retries_total{job="blob-relay"}'
                                    '[5m])) > 0.1', storage_retries, ">", 0.1),
    "BlobRelayRefusalsRising": Rule('sum by (job, instance, reason) (rate(blob_relay_rejections_total'
                                    '{job="blob-relay"}[5m])) > 0.05', refusals, ">", 0.05),
    "BlobRelayCommitLatencyHigh": Rule('histogram_quantile(0.99, sum by (job, instance, le) (rate('
                                       'blob_relay_commit_seconds_bucket{job="blob-relay"}[5m])) ) > 10',
                                       commit_latency, ">", 10),
    "BlobRelayBudgetSaturated": Rule('avg_over_time(blob_relay_budget_in_use_bytes{job="blob-relay"}[5m]) / '
                                     'max_over_time(blob_relay_budget_bytes{job="blob-relay"}[5m]) > 0.8',
                                     budget_saturated, ">", 0.8),
    "BlobRelayBusy": Rule('sum by (job, instance) (increase(blob_relay_failures_total{job="blob-relay", '
                          'class="relay", code="busy"}[10m])) > 0', busy, ">", 0),
}


@dataclass
class Alert:
    name: str
    for_s: float
    labels: dict  # the rule's own labels (severity)


def parse_rules(text: str) -> list[tuple[Alert, str]]:
    """The alerting rules of relay-alerts.yml: name, for:, labels, expr. A
    small reader for that file's shape (the alerts stage runs on a bare
    python3, without a YAML library)."""
    rules: list[tuple[Alert, str]] = []
    cur: dict | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)- alert: (\S+)", line)
        if m:
            cur = {"name": m.group(2), "for": 0.0, "labels": {}, "expr": ""}
            rules.append(cur)  # type: ignore[arg-type]
        elif cur is not None:
            s = line.strip()
            if s.startswith("expr:"):
                body = s[len("expr:"):].strip()
                if body in ("|", ">"):
                    indent = len(line) - len(line.lstrip())
                    parts = []
                    while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                                  len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                        i += 1
                        parts.append(lines[i].strip())
                    body = " ".join(p for p in parts if p)
                cur["expr"] = body
            elif s.startswith("for:"):
                cur["for"] = duration(s[len("for:"):].strip())
            elif s.startswith("severity:"):
                cur["labels"]["severity"] = s[len("severity:"):].strip()
        i += 1
    return [(Alert(r["name"], r["for"], r["labels"]), r["expr"]) for r in rules]  # type: ignore[index]


def duration(text: str) -> float:
    total = 0.0
    for n, unit in re.findall(r"(\d+)([smh])", text):
        total += int(n) * {"s": 1, "m": 60, "h": 3600}[unit]
    return total


def normalized(expr: str) -> str:
    e = re.sub(r"\s+", " ", expr).strip()
    return re.sub(r"\(\s+", "(", re.sub(r"\s+\)", " )", e)).replace(" )", ")")


def check_rules(text: str) -> list[Alert]:
    """The rules of the file, each one this module models; else ValueError."""
    alerts = []
    for alert, expr in parse_rules(text):
        rule = RULES.get(alert.name)
        if rule is None:
            raise ValueError(f"{alert.name}: a rule alert_oracle.py does not model")
        if normalized(expr) != normalized(rule.expr):
            raise ValueError(f"{alert.name}: expression {normalized(expr)!r} is not the modelled "
                             f"{normalized(rule.expr)!r}: update alert_oracle.py")
        alerts.append(alert)
    missing = set(RULES) - {a.name for a in alerts}
    if missing:
        raise ValueError(f"rules missing from the file: {sorted(missing)}")
    return alerts


def verdict(rule: Rule, value: float | None) -> str:
    if value is None:
        return F
    if rule.op == "==":
        return T if value == rule.threshold else F
    if rule.threshold == 0:
        return T if value > 0 else F
    if value > rule.threshold * (1 + MARGIN):
        return T
    if value <= rule.threshold * (1 - MARGIN):
        return F
    return U


def conditions(rec: Recording, rule: Rule) -> dict[Labels, list[str]]:
    """Per output label set, the expression's truth at every sample."""
    per_k = []
    for k in range(rec.n):
        closed, opened = rule.value(rec, k, True), rule.value(rec, k, False)
        per_k.append((closed, opened))
    keys = sorted({key for c, o in per_k for key in (*c, *o)})
    out = {}
    for key in keys:
        row = []
        for closed, opened in per_k:
            a, b = verdict(rule, closed.get(key)), verdict(rule, opened.get(key))
            row.append(a if a == b else U)
        out[key] = row
    return out


def firing(cond: list[str], for_samples: int) -> list[str]:
    """An alert fires at sample k when its expression held at every
    evaluation from k - for to k (evaluations on the sample grid)."""
    out = []
    for k in range(len(cond)):
        if k < for_samples:
            out.append(F)
            continue
        run = cond[k - for_samples:k + 1]
        out.append(F if F in run else T if all(c == T for c in run) else U)
    return out


def expected(rec: Recording, alerts: list[Alert]) -> dict[str, dict[Labels, list[str]]]:
    """Per alert, per label set of the alert (its expression's labels plus
    the rule's), fires / quiet / unsure at every sample."""
    out = {}
    for alert in alerts:
        rule = RULES[alert.name]
        m = round(alert.for_s / rec.interval)
        per = {}
        for key, cond in conditions(rec, rule).items():
            labels = dict(key)
            labels.pop("__name__", None)
            labels.update(alert.labels)
            per[tuple(sorted(labels.items()))] = firing(cond, m)
        out[alert.name] = per
    return out
