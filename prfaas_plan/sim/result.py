"""The outcome of a run: :class:`SimResult`, its summary figures, and their running totals.

:class:`Totals` folds records into the figures of :meth:`SimResult.summary` a chunk at a time;
:class:`Quantiles` gives exact percentiles, or t-digest ones (``fastdigest``) in constant memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.sim.arrivals import CHUNK_REQUESTS
from prfaas_plan.sim.policies import Policy
from prfaas_plan.sim.ring import PATH_NAMES

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.sim.outputs import Records
    from prfaas_plan.tabular import Columns


class Quantiles:
    """Count, sum and quantiles of a stream of values (NaN skipped): exact (every value kept), or
    a t-digest (``fastdigest``, 1000 centroids, clamped to the observed range) in constant memory.

    A t-digest is built only once a value differs from the first (bit for bit): until then the
    stream is that value ``sizes`` times over (every quantile is it), and building the digest
    feeds it the very batches it would have had (TPOT is one value in most runs)."""

    def __init__(self, exact: bool) -> None:
        self.count, self.total = 0, 0.0
        self.kept: list[np.ndarray] | None = [] if exact else None
        self.digest = None
        self.first: np.ndarray | None = None  # the one value so far, as an array of one (no digest yet)
        self.sizes: list[int] = []  # the batches of it so far

    def add(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        self.count += v.size
        self.total += float(np.sum(v))
        if self.kept is not None:
            self.kept.append(v)
        elif v.size:
            if self.digest is None:
                first = v[:1].copy() if self.first is None else self.first
                if (v.view(np.int64) == first.view(np.int64)).all():
                    self.first = first
                    self.sizes.append(v.size)
                    return
                self._build_digest()
            self.digest.batch_update(v)

    def _build_digest(self) -> None:
        """The digest of the batches so far (all of the one value)."""
        from fastdigest import TDigest

        self.digest = TDigest()
        for size in self.sizes:
            self.digest.batch_update(np.repeat(self.first, size))

    def quantile(self, q: float) -> float:
        if not self.count:
            return np.nan
        if self.kept is not None:
            self.kept = [np.concatenate(self.kept)]
            return float(np.quantile(self.kept[0], q))
        if self.digest is None:  # (a digest of one value, clamped to the observed range, gives it)
            return float(self.first[0])
        d = self.digest
        return float(min(max(d.quantile(q), d.min()), d.max()))


class Totals:
    """Summary figures (:meth:`SimResult.summary`) accumulated chunk by chunk.

    TTFT, TPOT, wait, path and hit figures are over requests arriving in [start_s, end_s) (None:
    unbounded); completions (last token) and offered arrivals over [lo_s, hi_s), time-series rows
    with time in (lo_s, hi_s]. Means are sums over counts; percentiles exact or from a t-digest."""

    def __init__(self, lo_s: float, hi_s: float, start_s: float | None = None, end_s: float | None = None,
                 ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, exact: bool = True) -> None:
        self.lo_s, self.hi_s, self.start_s, self.end_s = lo_s, hi_s, start_s, end_s
        self.ttft_slo_s, self.tpot_slo_s = ttft_slo_s, tpot_slo_s
        self.ttft, self.tpot = Quantiles(exact), Quantiles(exact)
        self.n = self.completed = self.offered = self.remote = self.slo_ok = self.hit_requests = 0
        self.hit_tokens = self.input_tokens = 0
        self.wait_s = self.transfer_s = 0.0
        self.wait_count = 0
        self.ts_rows, self.egress_gbps, self.utilisation = 0, 0.0, 0.0
        self.remote_queue_max = self.local_queue_max = 0

    def add(self, kind: str, columns: Columns) -> None:
        """Fold a chunk of records of ``kind`` (requests, timeseries; numpy columns) in."""
        (self._requests if kind == "requests" else self._timeseries)(columns)

    def _requests(self, r: Columns) -> None:
        arrival, end = r["arrival_s"], r["end_s"]
        self.completed += int(((end >= self.lo_s) & (end < self.hi_s)).sum())
        self.offered += int(((arrival >= self.lo_s) & (arrival < self.hi_s)).sum())
        keep = np.ones(len(arrival), dtype=bool)
        if self.start_s is not None:
            keep &= arrival >= self.start_s
        if self.end_s is not None:
            keep &= arrival < self.end_s
        w = r if keep.all() else {name: values[keep] for name, values in r.items()}
        ttft, tpot = w["ttft_s"], w["tpot_s"]
        remote = w["path"] == PATH_NAMES.index("prfaas")
        wait = w["wait_s"]
        self.n += len(ttft)
        self.remote += int(remote.sum())
        self.ttft.add(ttft)
        self.tpot.add(tpot)
        self.wait_s += float(np.sum(wait[np.isfinite(wait)]))
        self.wait_count += int(np.isfinite(wait).sum())
        self.transfer_s += float(np.sum(w["transfer_s"][remote]))
        if self.ttft_slo_s is not None:
            ok = ttft <= self.ttft_slo_s
            if self.tpot_slo_s is not None:
                ok &= tpot <= self.tpot_slo_s + 1e-12
            self.slo_ok += int(ok.sum())
        hit = w["hit_tokens"]
        self.hit_tokens += int(hit.sum())
        self.input_tokens += int(w["input_tokens"].sum())
        self.hit_requests += int((hit > 0).sum())

    def _timeseries(self, ts: Columns | None) -> None:
        if ts is None:
            return
        time_s = ts["time_s"]
        on = (time_s > self.lo_s) & (time_s <= self.hi_s)
        if on.any():
            self.ts_rows += int(on.sum())
            self.egress_gbps += float(np.sum(ts["egress_gbps"][on]))
            self.utilisation += float(np.sum(ts["link_utilisation"][on]))
            self.remote_queue_max = max(self.remote_queue_max, int(ts["remote_queue"][on].max()))
            self.local_queue_max = max(self.local_queue_max, int(ts["local_queue"][on].max()))

    def figures(self) -> dict:
        n, span = self.n, self.hi_s - self.lo_s
        ttft = self.ttft
        out = {
            "requests": n, "completed": self.completed,
            "throughput_rps": self.completed / span if span > 0 else np.nan,
            "offered_rps": self.offered / span if span > 0 else np.nan,
            "unfinished": n - ttft.count,
            "offload_fraction": self.remote / n if n else np.nan,
            "ttft_mean_s": ttft.total / ttft.count if ttft.count else np.nan,
            "ttft_p50_s": ttft.quantile(0.5), "ttft_p90_s": ttft.quantile(0.9), "ttft_p99_s": ttft.quantile(0.99),
            "tpot_mean_s": self.tpot.total / self.tpot.count if self.tpot.count else np.nan,
            "tpot_p90_s": self.tpot.quantile(0.9),
            "wait_mean_s": self.wait_s / self.wait_count if self.wait_count else np.nan,
            "transfer_mean_s": self.transfer_s / self.remote if self.remote else 0.0,
        }
        if self.ttft_slo_s is not None:
            out["slo_attainment"] = self.slo_ok / n if n else np.nan
        if self.ts_rows:
            out["egress_gbps_mean"] = self.egress_gbps / self.ts_rows
            out["link_utilisation_mean"] = self.utilisation / self.ts_rows
            out["remote_queue_max"] = self.remote_queue_max
            out["local_queue_max"] = self.local_queue_max
        if n and self.input_tokens > 0:
            out["token_hit_rate"] = self.hit_tokens / self.input_tokens
            out["request_hit_rate"] = self.hit_requests / n
        return out


@dataclass(frozen=True)
class SimResult:
    """The outcome of one run.

    requests: one row per request (arrival order): arrival_s, path (``prfaas`` or ``pd_p``),
        input_tokens, hit_tokens, uncached_tokens, route_tokens, output_tokens, wait_s (prefill
        queue), prefill_s, transfer_s (KV transfer not hidden by pipelining, plus rtt/2),
        decode_wait_s, ttft_s, tpot_s, end_s (last token). NaN where a request never finished.
    timeseries: one row per ``policy.period_s``: time_s, egress_gbps, link_utilisation,
        link_capacity_gbps, active_transfers, remote_queue, local_queue, decode_queue, decode_busy
        (slots in use), decode_slots, threshold_tokens (effective t), n_pd_p, n_pd_d.

    staging: with decode staging memory on, the whole run's held decode memory (GiB per decode
        GPU: time mean, P50 and P99 of the per-tick samples; the mean as a fraction of the cache
        memory), also in every :meth:`summary`.

    A run small enough (see :func:`simulate`'s ``max_rows_in_memory``) holds both in ``frames``.
    A larger one holds ``totals``, its whole-run :meth:`summary` (percentiles from a t-digest);
    its ``requests`` and ``timeseries`` are read back from ``out_dir`` when the run wrote them there.
    """

    policy: Policy
    duration_s: float
    ttft_slo_s: float | None = None
    ttft_quantile: float = 0.9
    tpot_slo_s: float | None = None
    cache: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    frames: Records | None = None  # (requests, timeseries) kept in memory: frames built on first access
    totals: dict | None = None  # whole-run summary figures of a run that did not keep its records
    out_dir: Path | None = None  # where the run wrote requests.parquet and timeseries.parquet
    staging: dict = field(default_factory=dict)  # held decode memory figures (staging memory on), in the summary

    @property
    def requests(self) -> pd.DataFrame:
        return self._frame(0, "requests")

    @property
    def timeseries(self) -> pd.DataFrame:
        return self._frame(1, "timeseries")

    def _frame(self, index: int, kind: str) -> pd.DataFrame:
        if self.frames is not None:
            return self.frames[index]
        import pandas as pd

        return pd.read_parquet(self._file(kind))

    def columns(self, kind: str) -> Columns:
        """The records of ``kind`` (``requests``, ``timeseries``) as numpy columns, the values
        ``self.requests[name].to_numpy()`` gives (``path`` as names in an object array; no rows:
        empty object columns), without building a frame (nor importing pandas) for a run that kept
        them in memory."""
        if self.frames is None:
            frame = self._frame(0 if kind == "requests" else 1, kind)
            return {name: frame[name].to_numpy() for name in frame.columns}
        columns = self.frames.columns(kind)
        if columns is None:
            from prfaas_plan.sim.outputs import TIMESERIES_COLUMNS

            return {name: np.empty(0, dtype=object) for name in TIMESERIES_COLUMNS}
        if kind == "requests":
            columns = {**columns, "path": np.array(PATH_NAMES, dtype=object)[columns["path"]]}
        return dict(columns)

    def _file(self, kind: str) -> Path:
        if self.out_dir is None:
            raise InvalidInput(f"simulate: this run ({(self.totals or {}).get('requests', 0):,} requests) kept only its "
                            f"totals; pass out_dir= (CLI: --out) to keep its {kind} on disk, or raise max_rows_in_memory")
        return self.out_dir / f"{kind}.parquet"

    def _chunks(self, kind: str) -> Iterator[Columns | None]:
        """The records of ``kind`` (requests, timeseries) as numpy columns: all those in memory at
        once, or the file read back a chunk at a time."""
        if self.frames is not None:
            yield self.frames.columns(kind)
            return
        import pyarrow.parquet as pq

        from prfaas_plan.sim.outputs import columns_of

        for batch in pq.ParquetFile(self._file(kind)).iter_batches(batch_size=CHUNK_REQUESTS):
            yield columns_of(kind, batch.to_pandas())

    def window(self, start_s: float | None = None, end_s: float | None = None) -> pd.DataFrame:
        """Requests that arrived in [start_s, end_s) (no bound where None)."""
        r = self.requests
        keep = np.ones(len(r), dtype=bool)
        if start_s is not None:
            keep &= r.arrival_s.to_numpy() >= start_s
        if end_s is not None:
            keep &= r.arrival_s.to_numpy() < end_s
        return r[keep]

    def summary(self, start_s: float | None = None, end_s: float | None = None) -> dict:
        """Figures over requests that arrived in [start_s, end_s) (default: all requests).

        throughput_rps: requests completing (last token) in [start_s, end_s) per second (default
        window: from 0 to ``duration_s``); completed: their count. TTFT and TPOT statistics are
        over requests arriving in the window;
        slo_attainment (when a TTFT SLO is set) is the fraction with TTFT within it (and TPOT
        within the TPOT SLO). A run that kept only totals gives its whole-run figures (percentiles
        from a t-digest), and for a window reads its records back from ``out_dir`` a chunk at a time.
        """
        if self.totals is not None and start_s is None and end_s is None:
            out = dict(self.totals)
        else:
            lo = 0.0 if start_s is None else float(start_s)
            hi = self.duration_s if end_s is None else float(end_s)
            totals = Totals(lo, hi, start_s, end_s, self.ttft_slo_s, self.tpot_slo_s, exact=True)
            for kind in ("requests", "timeseries"):
                for frame in self._chunks(kind):
                    totals.add(kind, frame)
            out = totals.figures()
        out.update(self.cache)
        out.update(self.staging)
        return out

    def summary_frame(self, **kw) -> pd.DataFrame:
        """:meth:`summary` as a two-column DataFrame (metric, value); counts stay integers (the
        value column holds Python ints and floats, dtype object)."""
        import pandas as pd

        summary = self.summary(**kw)
        return pd.DataFrame({"metric": list(summary), "value": pd.Series(list(summary.values()), dtype=object)})

    def __repr__(self) -> str:
        s = self.summary()
        return (f"SimResult({self.policy.name} policy, {self.duration_s:,.0f} s of arrivals: {s['requests']:,} requests, "
                f"{s['throughput_rps']:.3f} req/s, P90 TTFT {s['ttft_p90_s']:.3f} s, egress {s['egress_gbps_mean']:.2f} Gbps)")

    def _repr_html_(self) -> str:
        from prfaas_plan.display import html_table

        units = {"_gbps": "Gbps", "_rps": "req/s", "utilisation": "fraction", "fraction": "fraction",
                 "_rate": "fraction", "_blocks": "blocks", "_s": "s"}  # the unit each metric name carries
        rows = [(k, v, next((u for part, u in units.items() if part in k), "requests"))
                for k, v in self.summary().items()]
        return html_table(f"Simulation: {self.policy.name} policy, {self.duration_s:,.0f} s of arrivals", rows)

