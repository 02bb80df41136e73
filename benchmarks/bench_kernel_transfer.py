"""The kernel-transfer method (prfaas_plan.perf.transfer), proved where the answer is known.

1. Leave one GPU out: H100's, A100's, L40S's and B200's measured kernel tables predicted from
   H200's alone; median and P90 |predicted / measured - 1| per table (op family) and dtype, next
   to the error of copying H200's latency unchanged (the baseline any method must beat).
2. H20 from H200's tables against every public kernel-level H20 measurement we cite
   (hardware_db/MEASUREMENTS.md #3, #4, #5, #6, #7/#19, #9).

Reads only the committed tables (prfaas_plan/data/hardware_db/kernels/<gpu>/<family>.npz, their
provenance.yaml) and the GPUs' published specs (hardware_db/*.yaml); nothing is fitted.

    .venv/bin/python benchmarks/bench_kernel_transfer.py [--to h100,a100-80g,l40s,b200] [--from h200]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from prfaas_plan.hardware import GPU, load_gpu
from prfaas_plan.perf import kernels as K
from prfaas_plan.perf import transfer as tr

LEAVE_OUT_TABLES = ("gemm", "moe", "context_attention", "generation_attention", "mla_context", "mla_generation",
                    "all_reduce", "all_to_all_context", "all_to_all_generation")
"""Tables compared (linear attention is left out: its kernels have no roofline worth the name)."""
MLA_DIMS = ("kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_dim")
"""Scalars stored with the MLA tables (the DeepSeek-V3 dims they were measured at)."""


def table(gpu_id: str, name: str) -> pd.DataFrame | None:
    """One committed table as a frame: its code columns decoded to names, plus MLA's scalar dims."""
    spec = K.TABLES[name]
    folder = K.table_folder(gpu_id, name)
    arrays = K.load_family(folder, spec.family) if folder is not None else None
    if arrays is None or f"{name}.latency_s" not in arrays:
        return None
    cols = {c: arrays[f"{name}.{c}"] for c in (*spec.exact, *spec.nearest, *spec.axes, "latency_s")}
    df = pd.DataFrame(cols)
    for c in spec.exact:
        df[c] = np.asarray(K.CODES[c])[df[c].to_numpy()]
    for c in MLA_DIMS:
        if f"{name}.{c}" in arrays:
            df[c] = int(arrays[f"{name}.{c}"])
    return df


def work(name: str, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str, np.ndarray | None]:
    """(FLOPs, bytes, peak dtype, tiles) of rows that share their code columns, by kernels.*_cost."""
    r = df.iloc[0]
    if name == "gemm":
        f, b, pk = K.gemm_cost(df.m, df.n, df.k, r["dtype"])
        return f, b, pk, tr.gemm_tiles(df.m, df.n)
    if name == "moe":
        f, b, pk = K.moe_cost(df.tokens, df.hidden, df.inter, df.topk, df.experts, df.moe_tp, df.moe_ep, r["dtype"])
        return f, b, pk, tr.moe_tiles(df.tokens, df.inter, df.topk, df.experts, df.moe_tp, df.moe_ep)
    if name == "context_attention":
        f, b, pk = K.context_attention_cost(df.batch, df.isl, df.heads, df.kv_heads, df.head_dim, df.window,
                                            r.kv_dtype)
        return f, b, pk, tr.context_attention_tiles(df.batch, df.isl, df.heads)
    if name == "generation_attention":
        f, b, pk = K.generation_attention_cost(df.batch, df.context, df.heads, df.kv_heads, df.head_dim, df.window,
                                               r.kv_dtype)
        return f, b, pk, None
    if name == "mla_context":
        f, b, pk = K.mla_context_cost(df.batch, df.isl, df.heads, r.qk_nope_dim, r.qk_rope_dim, r.v_dim, r.kv_dtype)
        return f, b, pk, tr.context_attention_tiles(df.batch, df.isl, df.heads)
    if name == "mla_generation":
        f, b, pk = K.mla_generation_cost(df.batch, df.context, df.heads, r.kv_lora_rank, r.qk_rope_dim, r.kv_dtype)
        return f, b, pk, None
    if name == "all_reduce":
        f, b, pk = K.all_reduce_cost(df.message_bytes, df.gpus.to_numpy(dtype=float))
        return np.zeros(len(df)), b, pk, None
    f, b, pk = K.all_to_all_cost(df.tokens, df.hidden, df.topk, df.ep.to_numpy(dtype=float))
    return np.zeros(len(df)), b, pk, None


def predict(name: str, rows: pd.DataFrame, src: GPU, dst: GPU, floor_s: float) -> np.ndarray:
    """``rows`` (one code group, with the source's ``src_latency_s``) predicted on ``dst``."""
    flops, moved, pk, tiles = work(name, rows)
    return tr.transfer_latency_s(K.TABLES[name].family, rows["src_latency_s"].to_numpy(), flops, moved, src, dst,
                                 "bf16" if pk == "link" else pk, tiles, floor_s=floor_s)


def paired(name: str, src_id: str, dst_id: str) -> pd.DataFrame | None:
    """The destination's rows that the source measured at the same shape and codes."""
    src_df, dst_df = table(src_id, name), table(dst_id, name)
    if src_df is None or dst_df is None:
        return None
    keys = [c for c in dst_df.columns if c != "latency_s"]
    src_df = src_df.rename(columns={"latency_s": "src_latency_s"})
    return dst_df.merge(src_df.groupby(keys, as_index=False)["src_latency_s"].median(), on=keys)


def errors(name: str, src_id: str, dst_id: str) -> pd.DataFrame | None:
    """Per paired row: its code group, |predicted/measured - 1| and |copied/measured - 1|."""
    pairs = paired(name, src_id, dst_id)
    if pairs is None or pairs.empty:
        return None
    src, dst, spec = load_gpu(src_id), load_gpu(dst_id), K.TABLES[name]
    src_all = table(src_id, name)
    out = []
    for codes, rows in (pairs.groupby(list(spec.exact)) if spec.exact else [((), pairs)]):
        codes = codes if isinstance(codes, tuple) else (codes,)
        if "dtype" in spec.exact and dst.fp8_dense_tflops is None and rows["dtype"].iloc[0] in ("fp8", "fp8_block"):
            continue  # that GPU has no FP8 tensor cores: the transfer refuses these rows
        same = np.ones(len(src_all), bool)
        for c, v in zip(spec.exact, codes):
            same &= (src_all[c] == v).to_numpy()
        pred = predict(name, rows, src, dst, float(src_all["latency_s"][same].min()))
        measured = rows["latency_s"].to_numpy()
        out.append(pd.DataFrame({"group": "/".join(map(str, codes)) or "-", "err": np.abs(pred / measured - 1),
                                 "copy": np.abs(rows["src_latency_s"].to_numpy() / measured - 1)}))
    return pd.concat(out) if out else None


def leave_one_out(src_id: str, dst_ids: list[str], tables=LEAVE_OUT_TABLES) -> pd.DataFrame:
    """Median and P90 error per destination GPU, table and code group (plus each table's 'all')."""
    rows = []
    for dst_id in dst_ids:
        for name in tables:
            err = errors(name, src_id, dst_id)
            if err is None:
                continue
            for group, e in [*err.groupby("group"), ("all", err)]:
                rows.append({"to": dst_id, "table": name, "codes": group, "rows": len(e),
                             "median_err": e["err"].median(), "p90_err": e["err"].quantile(0.9),
                             "copy_median_err": e["copy"].median()})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Point:
    """One public H20 kernel measurement (MEASUREMENTS.md #id) and the H200 table row it maps to."""

    ref: str
    what: str
    measured: float
    unit: str
    predicted: float


def transferred(name: str, src_id: str, dst_id: str, **shape) -> float | None:
    """Seconds the ``src_id`` row of table ``name`` at exactly ``shape`` takes on ``dst_id``; None
    where ``src_id`` has no such table or row (A100 has no FP8 GEMM, L40S no MLA table)."""
    src_all = table(src_id, name)
    if src_all is None or any(c not in src_all for c in shape):
        return None
    spec = K.TABLES[name]
    hit = np.ones(len(src_all), bool)
    for c, v in shape.items():
        hit &= (src_all[c] == v).to_numpy()
    if not hit.any():
        return None
    same = np.ones(len(src_all), bool)
    for c in spec.exact:
        same &= (src_all[c] == shape[c]).to_numpy()
    rows = src_all[hit].iloc[:1].rename(columns={"latency_s": "src_latency_s"})
    return float(predict(name, rows, load_gpu(src_id), load_gpu(dst_id), float(src_all["latency_s"][same].min()))[0])


def h20_points(src_id: str = "h200") -> list[Point]:
    """Each public H20 kernel point, predicted from ``src_id``'s table row of the same shape (NaN
    where ``src_id`` has no row of that shape)."""
    def t(name: str, **shape) -> float:
        s = transferred(name, src_id, "h20", **shape)
        return math.nan if s is None else s

    pts = []
    for size, tflops in ((2048, 120.3), (4096, 133.4), (8192, 138.6)):  # 3: torch.matmul bf16, square
        s = t("gemm", dtype="bf16", m=size, n=size, k=size)
        pts.append(Point("#3", f"bf16 GEMM {size}^3", tflops, "TFLOP/s", 2 * size**3 / s / 1e12))
    # 4: FA3 causal forward, batch 2, seqlen 2048, 16 heads of 128: 0.319 ms
    s = t("context_attention", kv_dtype="bf16", windowed="no", heads=16, kv_heads=16, head_dim=128, window=0,
          batch=2, isl=2048)
    pts.append(Point("#4", "FA3 causal b=2 s=2048 h=16 d=128", 0.319, "ms", s * 1e3))
    # 5: FlashMLA decode b=128, s_q=3 (MTP), 8192 context, 64 heads: 129 TFLOP/s. The tables have
    # one query per request, so the nearest shape is 128 query heads (FlashMLA's 3 x 64 = 192).
    s = t("mla_generation", kv_dtype="bf16", heads=128, batch=128, context=8192)
    pts.append(Point("#5", "MLA decode b=128 ctx=8192 128 q-heads", 129.0, "TFLOP/s",
                     2 * 128 * 128 * 8192 * (2 * 512 + 64) / s / 1e12))
    # 6: DeepGEMM masked grouped GEMM, 2 groups x 32 rows, n=4096, k=7168: 36 us; the same FLOPs,
    # bytes and tiles as one fp8_block GEMM [32 x 7168] @ [7168 x 8192]
    s = t("gemm", dtype="fp8_block", m=32, n=8192, k=7168)
    pts.append(Point("#6", "DeepGEMM fp8 2 groups x m=32 n=4096 k=7168", 36.0, "us", s * 1e6))
    # 7/19: streaming HBM: a bf16 GEMV 1 x 16384 x 16384 (537 MB of weights), against the H20 SM
    # copy kernel (#7, 3.3 TB/s) and GH200's coalesced read on the same 96 GB HBM3 (#19, 3.61 TB/s)
    s = t("gemm", dtype="bf16", m=1, n=16384, k=16384)
    gbps = K.gemm_cost(1, 16384, 16384, "bf16")[1] / s / 1e12
    pts += [Point("#7", "HBM stream (bf16 GEMV 16384^2)", 3.3, "TB/s", gbps),
            Point("#19", "HBM stream (bf16 GEMV 16384^2)", 3.61, "TB/s", gbps)]
    # 9: DeepEP intranode normal mode on 8 GPUs (test_intranode: 4096 tokens of 7168, top-8 of 256): 337 GB/s
    s = t("all_to_all_context", hidden=7168, topk=8, experts=256, ep=8, tokens=4096)
    pts.append(Point("#9", "DeepEP normal dispatch+combine EP8 4096 tok", 337.0, "GB/s",
                     K.all_to_all_cost(4096, 7168, 8, 8)[1] / s / 1e9))
    return pts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", default="h200")
    ap.add_argument("--to", default="h100,a100-80g,l40s,b200")
    args = ap.parse_args(argv)
    loo = leave_one_out(args.src, args.to.split(","))
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(f"Leave one GPU out: each GPU's committed tables predicted from {args.src}'s "
              f"(error = |predicted/measured - 1|; copy = {args.src}'s latency unchanged)")
        print(loo.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        pts = pd.DataFrame([vars(p) for p in h20_points(args.src)])
        pts["abs_err"] = (pts["predicted"] / pts["measured"] - 1).abs()
        print(f"\nH20 from {args.src}'s tables against the public H20 kernel points (hardware_db/MEASUREMENTS.md; "
              f"nan: {args.src} has no row of that shape)")
        print(pts.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
