"""InferenceX's launch recipes: what the config and the scripts that ran each measured run set, by version.

SemiAnalysis InferenceX (https://github.com/SemiAnalysisAI/InferenceX) runs every benchmark from a
config key of ``.github/configs/nvidia-master.yaml`` (its search space: lengths, GPUs, expert
ranks, concurrencies) and a launch script per system, model and engine. NVIDIA's silicon CSV keeps
the runs' results, not how they were launched; these tables hold what the scripts set where it
differs from the engine's defaults (:data:`RECIPES`: token budget per step, KV-cache dtype,
running-request cap, scheduler polling, static memory share) and the workers of the disaggregated
recipes (:data:`DISAGG_RECIPES`), each with the commits that put it in force, so that
:mod:`prfaas_plan.validate` predicts a row as the recipe in force when it was measured ran it.
Every entry cites the script or config version it was read from. Times are UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prfaas_plan.vocab import GemmDtype, KvDtype, MoeKernel

if TYPE_CHECKING:
    from prfaas_plan.validate import Case

_IX = "https://github.com/SemiAnalysisAI/InferenceX/blob"
RECIPE_NODE_GPUS = 8
"""GPUs of the one node InferenceX's single-node scripts (``benchmarks/single_node/``) run on (an
8-GPU HGX H200 / B200); a row on more GPUs ran a multi-node recipe."""


def parse_utc(stamp: str) -> datetime:
    """An ISO time (``...Z``) or date as an aware UTC datetime."""
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RecipeRun:
    """One version of the InferenceX config key that runs a :class:`Recipe`'s script (an entry of
    ``.github/configs/nvidia-master.yaml``): in force from ``since`` (the commit ``commit`` that set
    it on main, or a pull request's commit whose workflow the rows' ``measured=`` stamp follows, or
    the script version's commit where that is later) until ``until`` (the next that changed its
    search space, or the pull request's merge), UTC, running ``shapes``: ``(isl, osl, tp, ep,
    concurrencies)`` each, ``tp`` the engine's GPUs and ``ep`` its expert ranks (the config's
    ``ep``, 1 where it gives none)."""

    commit: str
    since: datetime
    until: datetime
    shapes: tuple[tuple[int, int, int, int, tuple[int, ...]], ...]

    def ran(self, case: Case, span: tuple[datetime, datetime]) -> bool:
        """Whether this version was in force while the row was measured (``span``,
        :func:`~prfaas_plan.validate._measured_span`) and runs its lengths, GPUs, expert ranks and concurrency."""
        shape = (case.isl_tokens, case.osl_tokens, case.layout.gpus, case.layout.moe_ep)
        return self.since < span[1] and span[0] < self.until and \
            any((i, o, tp, ep) == shape and case.concurrency in concs for i, o, tp, ep, concs in self.shapes)


def _concs(first: int, last: int) -> tuple[int, ...]:
    """The concurrencies of a ``conc-start`` / ``conc-end`` search space: doubling from the first,
    the last always run (InferenceX utils/matrix_logic/generate_sweep_configs.py, ``step_size`` 2)."""
    out = [first]
    while out[-1] < last:
        out.append(min(2 * out[-1], last))
    return tuple(out)


def _shapes(*blocks: tuple) -> tuple[tuple[int, int, int, int, tuple[int, ...]], ...]:
    """``(lengths, tp, ep, conc-start, conc-end)`` blocks as :attr:`RecipeRun.shapes` (every
    ``(isl, osl)`` of ``lengths``)."""
    return tuple((isl, osl, tp, ep, _concs(first, last)) for lengths, tp, ep, first, last in blocks
                 for isl, osl in lengths)


def _run(commit: str, since: str, until: str, *blocks: tuple) -> RecipeRun:
    return RecipeRun(commit, parse_utc(since), parse_utc(until), _shapes(*blocks))


@dataclass(frozen=True)
class Recipe:
    """What an InferenceX launch script sets for one system, model and engine where it differs
    from the engine's defaults: the token budget per engine step (SGLang ``--chunked-prefill-size``,
    vLLM ``--max-num-batched-tokens``; ``tokens``, or ``per_isl`` times the row's ISL; None: the
    profile's ``chunked_prefill_tokens_on(gpu)``) and the KV-cache dtype (``--kv-cache-dtype``,
    SGLang's ``fp8_e4m3`` or vLLM's ``fp8``: ``kv_dtype`` "fp8"; None: the model's bf16), the most
    requests it runs (``--max-running-requests``: ``max_running``, or ``max_running_at``'s value
    for an ``(isl, osl)`` it lists) and how often its scheduler polls for new requests
    (``--scheduler-recv-interval``: ``recv_interval``, ``(least concurrency, decode steps)`` pairs,
    the last the row's concurrency reaches applies) and the share of memory weights and KV take
    (SGLang ``--mem-fraction-static``: ``mem_fraction``) and the prompt tokens a step admits whole
    prompts within (SGLang ``--max-prefill-tokens``: ``max_prefill``) and the experts' GEMM dtype where an
    environment switch selects another kernel (vLLM ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``:
    ``experts_dtype`` "mxfp4_w4a8") or the experts' kernel (vLLM ``VLLM_MXFP4_USE_MARLIN=1``:
    ``mxfp4_moe_kernel`` "marlin"); None: the engine's defaults. ``experts_tp``: the script starts
    vLLM without ``--enable-expert-parallel``, so the experts run tensor-parallel over the engine's
    GPUs whatever expert ranks the config key (and so the row) names.
    ``version`` / ``tp`` / ``precision``: only rows of that engine version / attention TP / CSV
    precision label (None: any). ``key``: the config key that runs the script, ``runs`` its
    versions (:class:`RecipeRun`), ``spec`` its speculative decoding ("none" or "mtp")."""

    system: str
    model_id: str
    engine: str
    source: str
    tokens: int | None = None
    per_isl: int | None = None
    kv_dtype: KvDtype | None = None
    max_running: int | None = None
    max_running_at: tuple[tuple[int, int, int], ...] = ()
    recv_interval: tuple[tuple[int, int], ...] = ()
    mem_fraction: float | None = None
    max_prefill: int | None = None
    experts_dtype: GemmDtype | None = None
    mxfp4_moe_kernel: MoeKernel | None = None
    experts_tp: bool = False
    version: str | None = None
    tp: int | None = None
    precision: str | None = None
    key: str | None = None
    runs: tuple[RecipeRun, ...] = ()
    spec: str = "none"

    def applies(self, row: dict, case: Case) -> bool:
        return (row["system"], case.model_id, case.engine_id) == (self.system, self.model_id, self.engine) \
            and self.version in (None, case.kernel_version) and self.tp in (None, case.layout.attn_tp) \
            and self.precision in (None, row["precision"]) and case.layout.gpus <= RECIPE_NODE_GPUS

    def ran(self, case: Case, span: tuple[datetime, datetime] | None) -> bool:
        """Whether the config ran this recipe for the row (a version of :attr:`runs` in force when it
        was measured lists its shape); a recipe without runs (its rows predate the config's file,
        2025-11-03) and a row without a measured time are taken as run."""
        return not self.runs or span is None or any(r.ran(case, span) for r in self.runs)

    @property
    def name(self) -> str:
        """The config key and the version of its script this recipe holds (``key@commit``), or its
        source where it names no key."""
        commit = re.search(r"/blob/([0-9a-f]+)/", self.source)
        return f"{self.key}@{commit.group(1)}" if self.key and commit else self.key or self.source

    def budget(self, isl_tokens: int) -> int | None:
        return self.per_isl * isl_tokens if self.per_isl is not None else self.tokens

    def running(self, isl_tokens: int, osl_tokens: int) -> int | None:
        return next((n for i, o, n in self.max_running_at if (i, o) == (isl_tokens, osl_tokens)), self.max_running)

    def recv_steps(self, concurrency: int) -> int | None:
        return next((n for least, n in reversed(self.recv_interval) if concurrency >= least), None)


_RECV_10_30 = ((1, 10), (16, 30))
"""``SCHEDULER_RECV_INTERVAL`` of InferenceX's B200 SGLang scripts: 10 decode steps, 30 from 16 clients."""

_ALL = ((1024, 1024), (1024, 8192), (8192, 1024))
_NO_1K8K = ((1024, 1024), (8192, 1024))  # 626932a11 (2026-03-28T06:38:24Z) dropped 1k/8k everywhere
# b7ae44045 (2026-05-01T20:00:46Z) moved the search spaces under ``scenarios``; the CSV's rows end before (04-22)
_MAR28, _MAY01 = "2026-03-28T06:38:24Z", "2026-05-01T20:00:46Z"
_DSR1_B200 = "dsr1-fp8-b200-sglang"
_DSR1_B200_RUNS = (_run("17d5e204f", "2025-11-03T18:05:50Z", "2025-11-10T19:55:00Z", (_ALL, 8, 1, 4, 64)),
                   _run("d8fe8f73e", "2025-11-10T19:55:00Z", "2025-11-18T20:03:38Z", (_ALL, 8, 8, 4, 64)),
                   _run("189ae51cc", "2025-11-18T20:03:38Z", "2026-01-13T20:47:13Z", (_ALL, 8, 1, 4, 64)),
                   _run("1d29967c4", "2026-01-13T20:47:13Z", _MAR28, (_ALL[:2], 8, 1, 4, 64), (_ALL[2:], 8, 1, 4, 4),
                        (_ALL[2:], 4, 1, 4, 32)),
                   _run("626932a11", _MAR28, _MAY01, (_ALL[:1], 8, 1, 4, 64), (_ALL[2:], 8, 1, 4, 4), (_ALL[2:], 4, 1, 4, 32)))
_MM_FP4 = "minimaxm2.5-fp4-b200-vllm"  # NVIDIA's MiniMax-M2.5-NVFP4 on B200 vLLM: #996's branch, then main
_MM_FP4_SHAPES_0402 = ((_ALL[:1], 2, 1, 4, 512), (_ALL[:1], 4, 1, 4, 512), (_ALL[2:], 2, 1, 4, 256),
                       (_ALL[2:], 4, 1, 4, 256))
_MM_FP4_SHAPES_0407 = ((_ALL[:1], 1, 1, 4, 4), (_ALL[:1], 2, 2, 128, 256), (_ALL[:1], 2, 2, 512, 512),
                       (_ALL[:1], 4, 1, 4, 8), (_ALL[:1], 4, 4, 32, 128), (_ALL[:1], 8, 1, 4, 4), (_ALL[2:], 1, 1, 4, 32),
                       (_ALL[2:], 1, 1, 256, 512), (_ALL[2:], 2, 2, 128, 512), (_ALL[2:], 4, 1, 4, 8), (_ALL[2:], 8, 1, 4, 4))
_KIMI_FP4 = "kimik2.5-fp4-b200-vllm"  # NVIDIA's Kimi-K2.5-NVFP4 on B200 vLLM 0.17.0
_KIMI_FP4_EP1, _KIMI_FP4_ARGS = "2026-04-14T19:53:45Z", "2026-04-20T14:22:32Z"  # 2cbaec340 (ep: 1), 6c3acebfa (args)
_GPTOSS_018 = "2026-03-27T08:01:48Z"  # cec542a9a: gptoss-fp4-h100/h200-vllm on the vllm/vllm-openai:v0.18.0 image


def _gptoss_hopper_runs(tp1: bool, tp8_8k: int) -> tuple[RecipeRun, ...]:
    """``gptoss-fp4-h200-vllm`` / ``-h100-vllm`` from the vLLM 0.18.0 image: TP 2, 4, 8 at 4-64 clients (TP 8 at 8k
    prompts up to ``tp8_8k``), and on H200 (``tp1``) TP 1 at 4 clients (1k prompts) and 4-64 (8k); 626932a11
    dropped 1k/8k."""
    def blocks(short: tuple) -> tuple:
        one = ((short, 1, 1, 4, 4), (_ALL[2:], 1, 1, 4, 64)) if tp1 else ()
        return (*one, *((short, tp, 1, 4, 64) for tp in (2, 4, 8)), (_ALL[2:], 2, 1, 4, 64), (_ALL[2:], 4, 1, 4, 64),
                (_ALL[2:], 8, 1, 4, tp8_8k))
    return (_run("cec542a9a", _GPTOSS_018, _MAR28, *blocks(_ALL[:2])), _run("626932a11", _MAR28, _MAY01, *blocks(_ALL[:1])))


_QWEN35_B200_BF16_RUNS = (_run("521d19951", "2026-02-20T05:32:41Z", _MAR28, (_ALL, 8, 1, 4, 64)),
                          _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 8, 1, 4, 64)))

RECIPES = (
    Recipe("h200_sxm", "glm-5", "sglang",
           f"{_IX}/ebb48d4bc/benchmarks/single_node/glm5_fp8_h200.sh (zai-org/GLM-5-FP8 on the lmsysorg/sglang:"
           "glm5-hopper image: --mem-fraction-static 0.85, SGLang's defaults otherwise; unchanged until 2026-05-19; "
           "the rows: 2026-03-19)", mem_fraction=0.85, key="glm5-fp8-h200-sglang",
           runs=(_run("ebb48d4bc", "2026-03-19T06:26:37Z", _MAR28, (_ALL, 8, 1, 4, 64)),
                 _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 8, 1, 4, 64)))),
    Recipe("b200_sxm", "glm-5", "sglang",
           f"{_IX}/13930ca61/benchmarks/single_node/glm5_fp8_b200.sh (--chunked-prefill-size 32768, --kv-cache-dtype "
           "fp8_e4m3, --max-running-requests CONC (the row's concurrency: no cap below it), --mem-fraction-static 0.85, "
           "--stream-interval 30, --max-prefill-tokens 32768; the FP8 checkpoint's rows: 2026-03-20)", tokens=32768,
           kv_dtype="fp8", mem_fraction=0.85, max_prefill=32768, precision="fp8", key="glm5-fp8-b200-sglang",
           runs=(_run("13930ca61", "2026-03-20T17:45:21Z", _MAR28, (_ALL, 8, 1, 4, 128)),
                 _run("626932a11", _MAR28, "2026-04-14T18:06:37Z", (_NO_1K8K, 8, 1, 4, 128)))),
    Recipe("h200_sxm", "deepseek-v3", "sglang",
           f"{_IX}/64c20b6b5/benchmarks/single_node/dsr1_fp8_h200.sh (--chunked-prefill-size 32768 and "
           "--max-running-requests 512 at 1k/1k, 256 otherwise, in every version from 2025-09-19 to 2026-06; "
           "--mem-fraction-static 0.82, --max-prefill-tokens 32768; no --kv-cache-dtype; the rows: 2026-03-25)",
           tokens=32768, max_running=256, max_running_at=((1024, 1024, 512),), mem_fraction=0.82, max_prefill=32768,
           key="dsr1-fp8-h200-sglang", runs=(_run("17d5e204f", "2025-11-03T18:05:50Z", _MAR28, (_ALL, 8, 1, 4, 64)),
                                             _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 8, 1, 4, 64)))),
    Recipe("h200_sxm", "qwen3.5-397b-a17b", "sglang",
           f"{_IX}/cfcaa84a1/benchmarks/single_node/qwen3.5_fp8_h200.sh (--chunked-prefill-size 16384, "
           "--kv-cache-dtype fp8_e4m3, --max-running-requests 128 and --mem-fraction-static 0.8 since it was added, "
           "2026-03-02)", tokens=16384, kv_dtype="fp8", max_running=128, mem_fraction=0.8,
           key="qwen3.5-fp8-h200-sglang", runs=(_run("f65d6b4b1", "2026-03-04T18:52:58Z", _MAR28, (_ALL, 8, 8, 4, 64)),
                                                _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 8, 8, 4, 64)))),
    Recipe("b200_sxm", "qwen3.5-397b-a17b", "sglang",
           f"{_IX}/c23031b7e/benchmarks/single_node/qwen3.5_fp8_b200.sh (CHUNKED_PREFILL_SIZE=32768, "
           "--kv-cache-dtype fp8_e4m3, MAX_RUNNING_REQUESTS=128, SCHEDULER_RECV_INTERVAL 10, 30 from CONC 16, "
           "MEM_FRAC_STATIC=0.82, MAX_PREFILL_TOKENS=32768, in every version from 2026-03-03 to 04-30; the FP8 "
           "checkpoint's rows, 2026-03-20 to 04-08)", tokens=32768, kv_dtype="fp8", max_running=128,
           recv_interval=_RECV_10_30, mem_fraction=0.82, max_prefill=32768, precision="fp8",
           key="qwen3.5-fp8-b200-sglang",  # 515294190 (2026-04-30) changed the script and its search space
           runs=(_run("efd49e50b", "2026-03-03T17:20:50Z", "2026-03-24T00:52:18Z", (_ALL[:1], 4, 4, 4, 16),
                      (_ALL[:1], 4, 4, 64, 64), (_ALL[1:2], 8, 1, 4, 8), (_ALL[2:], 8, 1, 4, 4), (_ALL[1:], 4, 4, 8, 64)),
                 _run("6a5dad463", "2026-03-24T00:52:18Z", _MAR28, (_ALL, 8, 1, 4, 16), (_ALL, 4, 4, 16, 128)),
                 _run("626932a11", _MAR28, "2026-04-30T19:34:40Z", (_NO_1K8K, 8, 1, 4, 16), (_NO_1K8K, 4, 4, 16, 128)))),
    Recipe("b200_sxm", "qwen3.5-397b-a17b", "sglang",
           f"{_IX}/9dc87a68c/benchmarks/single_node/qwen3.5_bf16_b200.sh (CHUNKED_PREFILL_SIZE=32768, "
           "no --kv-cache-dtype, MAX_RUNNING_REQUESTS=128, SCHEDULER_RECV_INTERVAL 10, 30 from CONC 16, "
           "MEM_FRAC_STATIC=0.82 (0.8 until 9dc87a68c, 2026-02-20T05:32:41Z), in every version from 2026-02-20 to "
           "05-12, MAX_PREFILL_TOKENS=32768; the bf16 checkpoint's rows, 2026-02-20 to 03-09)", tokens=32768,
           max_running=128, recv_interval=_RECV_10_30, mem_fraction=0.82, max_prefill=32768, precision="bf16",
           key="qwen3.5-bf16-b200-sglang", runs=_QWEN35_B200_BF16_RUNS),
    Recipe("b200_sxm", "deepseek-v3", "sglang",
           f"{_IX}/38b80a859/benchmarks/single_node/dsr1_fp8_b200.sh (TP 8: 32768, --max-running-requests 128, "
           "--scheduler-recv-interval 10, 30 from CONC 16; --kv-cache-dtype fp8_e4m3; --mem-fraction-static 0.82; every "
           "version from 2025-09-23 to 2026-06, the 2025-12 dsr1_fp8_b200_docker.sh too; MAX_PREFILL_TOKENS=32768 "
           "at 38b80a859; the rows: 2025-12-31 and 2026-03-25)", tokens=32768, kv_dtype="fp8", max_running=128,
           recv_interval=_RECV_10_30, mem_fraction=0.82, max_prefill=32768, tp=8, key=_DSR1_B200, runs=_DSR1_B200_RUNS),
    Recipe("b200_sxm", "deepseek-v3", "sglang",
           f"{_IX}/38b80a859/benchmarks/single_node/dsr1_fp8_b200.sh (TP 4: 8192, --max-running-requests 32, "
           "--scheduler-recv-interval 10; --kv-cache-dtype fp8_e4m3; --mem-fraction-static 0.95, since TP 4 came in, "
           "1d29967c4 of 2026-01-13; MAX_PREFILL_TOKENS=8192 at 38b80a859)", tokens=8192, kv_dtype="fp8", max_running=32,
           recv_interval=((1, 10),), mem_fraction=0.95, max_prefill=8192, tp=4, key=_DSR1_B200, runs=_DSR1_B200_RUNS),
    # the MTP keys: their rows are left out (validate.SPECULATIVE_RUN), so their launch settings are not held
    Recipe("b200_sxm", "deepseek-v3", "sglang",
           f"{_IX}/12ba0ae07/benchmarks/single_node/dsr1_fp8_b200_mtp.sh (EAGLE MTP, --speculative-num-steps 2 "
           "--speculative-num-draft-tokens 3; CHUNKED_PREFILL_SIZE=16384, MAX_RUNNING_REQUESTS=512)", tp=8,
           key="dsr1-fp8-b200-sglang-mtp", spec="mtp",
           runs=(_run("e62c6acdf", "2026-02-06T06:28:51Z", _MAR28, (_ALL, 8, 1, 4, 512)),
                 _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 8, 1, 4, 512)))),
    Recipe("b200_sxm", "qwen3.5-397b-a17b", "sglang",
           f"{_IX}/35d4bb367/benchmarks/single_node/qwen3.5_fp8_b200_mtp.sh (EAGLE MTP, --speculative-num-steps 3 "
           "--speculative-num-draft-tokens 4; CHUNKED_PREFILL_SIZE=32768, MAX_RUNNING_REQUESTS=$CONC)",
           precision="fp8", key="qwen3.5-fp8-b200-sglang-mtp", spec="mtp",
           runs=(_run("35d4bb367", "2026-03-20T22:08:19Z", _MAR28, (_ALL, 4, 1, 4, 256)),
                 _run("626932a11", _MAR28, _MAY01, (_NO_1K8K, 4, 1, 4, 256)))),
    Recipe("b200_sxm", "minimax-m2.5", "vllm",
           f"{_IX}/bddbf4031/benchmarks/single_node/minimaxm2.5_fp8_b200.sh (--max-num-batched-tokens "
           "$((ISL * 2)) and --kv-cache-dtype fp8, from the vLLM 0.19.0 upgrade of 2026-04-03)",
           per_isl=2, kv_dtype="fp8", version="0.19.0", key="minimaxm2.5-fp8-b200-vllm",
           # first the branch of #947 (its rows: 9 s after its last commit), until its merge
           runs=(_run("beb6a6b18", "2026-04-03T02:34:46Z", "2026-04-03T16:31:35Z", (_NO_1K8K, 2, 1, 4, 256),
                      (_ALL[:1], 2, 2, 4, 256), (_NO_1K8K, 4, 1, 4, 256), (_ALL[:1], 4, 4, 16, 64)),
                 _run("bddbf4031", "2026-04-03T16:31:35Z", "2026-04-08T18:43:09Z", (_ALL[:1], 2, 1, 4, 512),
                      (_ALL[:1], 2, 2, 4, 256), (_ALL[:1], 4, 1, 4, 512), (_ALL[:1], 4, 4, 16, 64),
                      (_ALL[2:], 2, 1, 4, 256), (_ALL[2:], 4, 1, 4, 256)),
                 _run("5d037dd4a", "2026-04-08T18:43:09Z", "2026-04-22T00:00:33Z", (_NO_1K8K, 2, 1, 4, 512),
                      (_NO_1K8K, 4, 1, 4, 512), (_ALL[:1], 2, 2, 512, 512), (_ALL[:1], 4, 4, 256, 512)),
                 _run("41ed82dc1", "2026-04-22T00:00:33Z", _MAY01, (_ALL[:1], 2, 2, 512, 512), (_ALL[:1], 4, 1, 4, 128),
                      (_ALL[:1], 4, 4, 256, 512), (_ALL[2:], 2, 1, 4, 512), (_ALL[2:], 4, 1, 4, 512)))),
    *(Recipe(system, "llama-3.1-70b", "vllm",
             f"{_IX}/{commit}/benchmarks/{script} (config.yaml: kv-cache-dtype: fp8, "
             "max-num-batched-tokens: 8192; the rows of 2025-10-29)", kv_dtype="fp8")
      for system, commit, script in (("h100_sxm", "af4ccd03f", "70b_fp8_h100_slurm.sh and 70b_fp8_h100_docker.sh"),
                                     ("h200_sxm", "9596d23d7", "70b_fp8_h200_slurm.sh"),
                                     ("b200_sxm", "4b860b78e", "70b_fp8_b200_docker.sh"))),
    Recipe("b200_sxm", "llama-3.3-70b-nvfp4", "vllm",
           f"{_IX}/4b860b78e/benchmarks/70b_fp4_b200_docker.sh (config.yaml: kv-cache-dtype: fp8, "
           "max-num-batched-tokens: 8192; --max-num-seqs 512; image vllm/vllm-openai:v0.10.2, 70b-tmpl.yml's "
           "bmk-b200-fp4; in force from 2025-10-01 to its removal on 2025-10-29, the rows' day)", kv_dtype="fp8"),
    Recipe("b200_sxm", "minimax-m2.5-nvfp4", "vllm",
           f"{_IX}/08bcde8f1/benchmarks/single_node/minimaxm2.5_fp4_b200.sh (--kv-cache-dtype fp8, no "
           "--max-num-batched-tokens: #996's branch from 2026-04-02, its vLLM nightly and then v0.19.0 image, until "
           "a9c199207 set the budget)", kv_dtype="fp8", key=_MM_FP4,
           runs=(_run("08bcde8f1", "2026-04-02T21:50:30Z", "2026-04-03T20:29:47Z", *_MM_FP4_SHAPES_0402),
                 _run("1ac963635", "2026-04-03T20:29:47Z", "2026-04-07T17:44:41Z", *_MM_FP4_SHAPES_0402),
                 _run("22ce952d0", "2026-04-07T17:44:41Z", "2026-04-07T19:13:08Z", *_MM_FP4_SHAPES_0407))),
    Recipe("b200_sxm", "minimax-m2.5-nvfp4", "vllm",
           f"{_IX}/79bd988e9/benchmarks/single_node/minimaxm2.5_fp4_b200.sh (--kv-cache-dtype fp8, "
           "--max-num-batched-tokens $((ISL * 2)), from a9c199207 on #996's branch, 2026-04-07, merged as 79bd988e9; "
           "13962fcfa added VLLM_FLOAT32_MATMUL_PRECISION=high, TF32 for the fp32 router, not modelled)",
           per_isl=2, kv_dtype="fp8", version="0.19.0", key=_MM_FP4,
           runs=(_run("a9c199207", "2026-04-07T19:13:08Z", "2026-04-08T18:55:08Z", *_MM_FP4_SHAPES_0407),
                 _run("79bd988e9", "2026-04-08T18:55:08Z", "2026-04-22T04:01:04Z",
                      (_ALL[:1], 1, 1, 4, 4), (_ALL[:1], 2, 1, 4, 512), (_ALL[:1], 2, 2, 128, 256),
                      (_ALL[:1], 2, 2, 512, 512), (_ALL[:1], 4, 1, 4, 512), (_ALL[:1], 4, 4, 32, 128),
                      (_ALL[:1], 8, 1, 4, 4), (_ALL[2:], 1, 1, 4, 32), (_ALL[2:], 1, 1, 256, 512),
                      (_ALL[2:], 2, 1, 4, 512), (_ALL[2:], 2, 2, 128, 512), (_ALL[2:], 4, 1, 4, 512),
                      (_ALL[2:], 8, 1, 4, 4)),
                 _run("13962fcfa", "2026-04-22T04:01:04Z", _MAY01,
                      (_ALL[:1], 1, 1, 4, 16), (_ALL[:1], 2, 1, 16, 16), (_ALL[:1], 2, 2, 128, 128),
                      (_ALL[:1], 2, 2, 256, 1024), (_ALL[:1], 4, 1, 4, 16), (_ALL[:1], 4, 4, 64, 128),
                      (_ALL[:1], 8, 1, 4, 8), (_ALL[2:], 1, 1, 4, 32), (_ALL[2:], 1, 1, 256, 256),
                      (_ALL[2:], 2, 2, 128, 512), (_ALL[2:], 4, 1, 4, 8), (_ALL[2:], 8, 1, 4, 4)))),
    Recipe("b200_sxm", "qwen3.5-397b-a17b-nvfp4", "sglang",
           f"{_IX}/48d35c480/benchmarks/single_node/qwen3.5_fp4_b200.sh (--quantization modelopt_fp4, "
           "CHUNKED_PREFILL_SIZE=32768, --kv-cache-dtype fp8_e4m3, MAX_RUNNING_REQUESTS=128, SCHEDULER_RECV_INTERVAL "
           "10, 30 from CONC 16, MEM_FRAC_STATIC=0.85, in every version from e1e8cb214 on #820's branch, 2026-03-29, "
           "to 9189c1884, 2026-05-01; its --mamba-ssm-dtype bfloat16 is not modelled: the state keeps the config's "
           "fp32; MAX_PREFILL_TOKENS=32768; the rows: 2026-04-08, image nightly-dev-20260402)", tokens=32768,
           kv_dtype="fp8", max_running=128, recv_interval=_RECV_10_30, mem_fraction=0.85, max_prefill=32768,
           key="qwen3.5-fp4-b200-sglang",
           # 85d02c46b took #820's branch to the nightly image the rows name; the search space held until ca9fc7d1b
           runs=(_run("85d02c46b", "2026-04-03T17:54:16Z", "2026-05-01T20:52:49Z", (_NO_1K8K, 4, 1, 4, 128)),)),
    # kimik2.5-fp4-b200-vllm: kimik2.5_fp4_b200.sh runs `vllm serve --tensor-parallel-size=$TP` without
    # --enable-expert-parallel in every version, while the key named {tp: 4, ep: 4} until 2cbaec340 ("fix bogus
    # ep ... script has no EP support"); no --kv-cache-dtype until 6c3acebfa, so vLLM took the checkpoint's
    # kv_cache_scheme (8-bit float): it resolves an unset KV dtype from a ModelOpt config since
    # vllm-project/vllm#29980 (2025-12, in v0.13.0; issue #34752 lists the unset flag as working), and these runs
    # are v0.17.0's
    Recipe("b200_sxm", "kimi-k2.5-nvfp4", "vllm",
           f"{_IX}/a58dedd5a/benchmarks/single_node/kimik2.5_fp4_b200.sh (no --enable-expert-parallel, no "
           "--kv-cache-dtype: the checkpoint's FP8 KV cache, no --max-num-batched-tokens, --max-num-seqs $CONC; the "
           "same in every version until 6c3acebfa, 2026-04-20; the rows of 2026-03-11 and 03-27)", kv_dtype="fp8",
           experts_tp=True, key=_KIMI_FP4,
           runs=(_run("a58dedd5a", "2026-03-11T16:59:36Z", _MAR28, (_ALL, 4, 4, 4, 64), (_ALL[:1], 8, 1, 4, 4),
                      (_ALL[2:], 8, 1, 4, 4)),
                 _run("626932a11", _MAR28, _KIMI_FP4_EP1, (_NO_1K8K, 4, 4, 4, 64), (_NO_1K8K, 8, 1, 4, 4)),
                 _run("2cbaec340", _KIMI_FP4_EP1, _KIMI_FP4_ARGS, (_NO_1K8K, 4, 1, 4, 64), (_NO_1K8K, 8, 1, 4, 4)))),
    Recipe("b200_sxm", "kimi-k2.5-nvfp4", "vllm",
           f"{_IX}/6c3acebfa/benchmarks/single_node/kimik2.5_fp4_b200.sh (--kv-cache-dtype fp8, "
           "--max-num-batched-tokens $((ISL * 2)), no --enable-expert-parallel; its --stream-interval 20 is not "
           "modelled)", per_isl=2, kv_dtype="fp8", experts_tp=True, key=_KIMI_FP4,
           runs=(_run("6c3acebfa", _KIMI_FP4_ARGS, _MAY01, (_NO_1K8K, 4, 1, 4, 64), (_NO_1K8K, 8, 1, 4, 4)),)),
    Recipe("b200_sxm", "gpt-oss-120b", "vllm",
           f"{_IX}/d2c2acb19/benchmarks/single_node/gptoss_fp4_b200.sh (config.yaml: kv-cache-dtype: fp8, "
           "max-num-batched-tokens: 8192; VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1, FlashInfer's TRT-LLM experts on "
           "MXFP8 activations; kv fp8 since 25506e87c, 2025-12-05, MXFP8 since 2025-09-24; the vLLM 0.15.1 rows "
           "of 2026-02-25)", kv_dtype="fp8", experts_dtype="mxfp4_w4a8", version="0.15.1",
           key="gptoss-fp4-b200-vllm",
           # d2c2acb19 took the key to vLLM 0.15.1; da5515841 moved it to 0.16.0 and cad1169b9 reverted that
           runs=tuple(_run(commit, since, until, (_ALL, 1, 1, 4, 128), (_ALL, 2, 1, 4, 128), (_ALL, 4, 1, 4, 64),
                           (_ALL[:2], 8, 1, 4, 8), (_ALL[2:], 8, 1, 4, 4))
                      for commit, since, until in (("d2c2acb19", "2026-02-25T19:02:08Z", "2026-03-10T15:49:28Z"),
                                                   ("cad1169b9", "2026-03-10T16:48:43Z", _MAR28)))),
    # Marlin since 4e52ed4c6 (2026-01-02, "Fix H100/H200 perf regression"); the runs are cec542a9a's (vLLM 0.18.0
    # image, 2026-03-27): the CSV holds none of the keys' runs between, and those before (2025-11 and 12) keep
    # vLLM's default triton_kernels experts
    *(Recipe(f"{gpu}_sxm", "gpt-oss-120b", "vllm",
             f"{_IX}/cec542a9a/benchmarks/single_node/gptoss_fp4_{gpu}.sh (VLLM_MXFP4_USE_MARLIN=1: Marlin's MXFP4 "
             "experts; config.yaml: max-num-batched-tokens: 8192; no --kv-cache-dtype; the vLLM 0.18.0 rows of "
             "2026-03-27)", tokens=8192, mxfp4_moe_kernel="marlin", key=f"gptoss-fp4-{gpu}-vllm",
             runs=_gptoss_hopper_runs(tp1, tp8_8k))
      for gpu, tp1, tp8_8k in (("h200", True, 32), ("h100", False, 16))),
)
"""InferenceX launch settings that differ from the engine's defaults, each with its script (the
version in force at the rows' ``measured=`` dates); every other InferenceX recipe of a system,
model and engine we predict leaves the engine default (vLLM's 8,192 tokens on these GPUs, SGLang's
8,192 on H100/H200: ``server_args.py``'s GPU-memory tiers; KV cache in the model's bf16), which the
profiles hold. B200 MiniMax-M2.5 on vLLM 0.17.0 is left at the defaults: its script took
``--kv-cache-dtype fp8`` on 2026-03-27, inside its rows' dates (03-11 to 03-28), and the row's
engine version does not tell which. Applied to the InferenceX runs only, and to those the
recipe's config key ran (:meth:`Recipe.ran`: a version in force at the row's ``measured=`` time
lists its lengths, GPUs and concurrency; a row no recipe ran keeps the engine defaults), counted
in ``attrs["recipe_budget"]``, ``attrs["recipe_kv_dtype"]``, ``attrs["recipe_scheduler"]`` and ``attrs["recipe_memory"]``
(:func:`~prfaas_plan.validate._as_launched`). A row that recipes launching the engine differently both ran is left out
(:data:`~prfaas_plan.validate.AMBIGUOUS_RECIPE`: B200 DeepSeek-R1 TP 8 at 4 to 64 clients on 2026-03-25, when one commit
started the STP and the MTP key, whose rows the CSV does not tell apart), and so is a row that only
an MTP key ran (:data:`~prfaas_plan.validate.SPECULATIVE_RUN`: B200 DeepSeek-R1 TP 8 at 128 to 512 clients that day, B200
Qwen3.5 TP 4 from 2026-03-20; the acceptance of its drafts on the run's prompts is not published).
The MTP keys of our models whose runs postdate the CSV's rows (Qwen3.5 on H200 from 2026-04-06, its
bf16 checkpoint on B200 from 04-17) are not held."""


@dataclass(frozen=True)
class DisaggRecipe:
    """One disaggregated InferenceX recipe (an entry of the search space of
    ``.github/configs/nvidia-master.yaml``): ``prefill_workers`` / ``decode_workers`` of
    ``prefill_ep`` / ``decode_ep`` expert ranks each, their attention data parallel where
    ``prefill_dp`` / ``decode_dp`` (the entry's ``dp-attn``), run at ``concurrency`` for ``isl`` /
    ``osl``, with speculative decoding ``spec`` ("none" or "mtp"); in the config from ``since`` (the
    commit that set it) until ``until`` (the next that changed it), UTC; ``key``: the config key
    (``dsr1-fp8-h100-dynamo-sglang``) whose search space holds it."""

    system: str
    model_id: str
    engine: str
    isl: int
    osl: int
    concurrency: tuple[int, ...]
    prefill_workers: int
    prefill_ep: int
    prefill_dp: bool
    decode_workers: int
    decode_ep: int
    decode_dp: bool
    spec: str
    since: datetime
    until: datetime
    source: str
    key: str

    def fits(self, row: dict, case: Case, span: tuple[datetime, datetime]) -> bool:
        """The row (measured in ``span``, :func:`~prfaas_plan.validate._measured_span`) ran this recipe's shape, concurrency
        and expert split while it was in the config."""
        return (row["system"], case.model_id, case.engine_id, case.isl_tokens, case.osl_tokens) == \
            (self.system, self.model_id, self.engine, self.isl, self.osl) and case.concurrency in self.concurrency \
            and (case.layout.moe_ep, case.decode_layout.moe_ep) == (self.prefill_ep, self.decode_ep) \
            and self.since < span[1] and span[0] < self.until

    @property
    def split(self) -> tuple[int, bool, int, bool]:
        """What the recipe sets that the row does not say: workers and attention DP per role."""
        return self.prefill_workers, self.prefill_dp, self.decode_workers, self.decode_dp


def _version(system: str, key: str, commit: str, since: str, until: str, rows: tuple) -> tuple[DisaggRecipe, ...]:
    """The entries of one version of a config key (``(isl, osl, spec, concurrency, prefill workers,
    prefill ep, prefill dp-attn, decode workers, decode ep, decode dp-attn)`` each)."""
    source = f"{_IX}/{commit}/.github/configs/nvidia-master.yaml ({key})"
    return tuple(DisaggRecipe(system, "deepseek-v3", "sglang", isl, osl, conc, pw, pep, pdp, dw, dep, ddp, spec,
                              parse_utc(since), parse_utc(until), source, key)
                 for isl, osl, spec, conc, pw, pep, pdp, dw, dep, ddp in rows)


def _spec(spec: str, *blocks: tuple) -> tuple:
    """Entries ``(isl, osl, concurrency, ...)`` of a search space run with speculative decoding ``spec``."""
    return tuple((isl, osl, spec, *rest) for block in blocks for isl, osl, *rest in block)


# Search-space entries shared by versions of a key (or by its STP and MTP variants): (isl, osl,
# concurrency, prefill workers, prefill ep, prefill dp-attn, decode workers, decode ep, decode dp-attn)
_TO_64, _TO_128 = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8, 16, 32, 64, 128)
_H200_1K = ((1024, 1024, (1, 4, 8, 16, 32, 64, 128, 256), 1, 1, False, 9, 1, False),
            (1024, 1024, (512, 1024, 2048), 1, 1, False, 6, 1, False),
            (1024, 1024, (128, 256, 512, 1024, 2048), 1, 8, True, 6, 8, True))
_H200_8K_STP = ((8192, 1024, (1, 4, 8), 1, 1, False, 7, 1, False), (8192, 1024, (4, 8, 16), 1, 1, False, 6, 1, False),
                (8192, 1024, (8, 16, 32), 1, 1, False, 3, 1, False),
                (8192, 1024, (32, 64, 128), 2, 1, False, 3, 1, False),
                (8192, 1024, (64, 128, 256), 1, 1, False, 1, 8, True))
_H200_8K_MTP = ((8192, 1024, (1, 4, 8), 1, 1, False, 7, 1, False),
                (8192, 1024, (2, 4, 8, 16, 32), 1, 1, False, 6, 1, False),
                (8192, 1024, (4, 8, 16, 32, 64), 1, 1, False, 3, 1, False),
                (8192, 1024, (32, 64, 128), 2, 1, False, 3, 1, False),
                (8192, 1024, (32, 64, 128, 256, 512), 1, 1, False, 1, 8, True))
_H100_1K1K_8K1K = ((1024, 1024, _TO_128, 1, 1, False, 2, 1, False), (1024, 1024, _TO_64, 1, 1, False, 1, 16, True),
                   (8192, 1024, _TO_128, 1, 1, False, 1, 1, False), (8192, 1024, _TO_64, 1, 1, False, 1, 16, True))
_B200_1K = ((1024, 1024, (4,), 1, 8, False, 1, 8, False), (1024, 1024, (16, 32, 64, 128, 256), 1, 8, False, 3, 8, False),
            (1024, 1024, (1024, 2048, 4096), 1, 8, True, 5, 8, True), (1024, 1024, (2048, 4096), 2, 8, True, 5, 8, True))
_B200_8K_FEB = ((8192, 1024, (4, 32, 64, 512), 1, 8, False, 1, 8, False), (8192, 1024, (64, 512), 1, 8, False, 4, 8, False),
                (8192, 1024, (32,), 1, 8, False, 6, 8, False), (8192, 1024, (128, 512, 1024), 1, 8, True, 1, 8, True),
                (8192, 1024, (256, 512, 1024), 2, 8, True, 1, 8, True))
_B200_8K_MAR = ((8192, 1024, (128,), 1, 1, True, 3, 1, False), (8192, 1024, (128,), 1, 1, True, 4, 1, False),
                (8192, 1024, (8, 16, 32, 64, 128), 1, 1, True, 6, 1, False), (8192, 1024, (288,), 1, 1, True, 2, 8, True),
                (8192, 1024, (160, 288), 1, 1, True, 1, 8, True), (8192, 1024, (512,), 2, 1, True, 1, 8, True),
                (8192, 1024, (1024,), 3, 1, True, 1, 8, True))
_B200_1K_MTP = ((1024, 1024, (4, 64), 1, 8, False, 1, 8, False), (1024, 1024, (4, 8, 16, 32, 128), 1, 8, False, 3, 8, False),
                (1024, 1024, (512, 4096), 1, 8, True, 5, 8, True), (1024, 1024, (1024, 2048, 4096), 2, 8, True, 5, 8, True))
_B200_1P2D_MTP = ((1024, 1024, (512, 1024, 2048), 1, 8, True, 2, 8, True),)
_B200_8K_MTP_FEB = ((8192, 1024, (16, 32, 64), 1, 8, False, 1, 8, False), (8192, 1024, (8, 256), 1, 8, False, 4, 8, False),
                    (8192, 1024, (4, 8, 16, 256), 1, 8, False, 6, 8, False), (8192, 1024, (256,), 1, 8, True, 1, 8, True),
                    (8192, 1024, (128, 512), 2, 8, True, 1, 8, True))
_H200, _H100, _B200, _B200_MTP = ("dsr1-fp8-h200-dynamo-sglang", "dsr1-fp8-h100-dynamo-sglang",
                                  "dsr1-fp8-b200-dynamo-sglang", "dsr1-fp8-b200-dynamo-sglang-mtp")
DISAGG_RECIPES = (
    *_version("h200_sxm", _H200, "f0e131f2e", "2026-02-05T20:32:56Z", "2026-02-07T22:52:22Z",
              _spec("none", _H200_1K, _H200_8K_STP)),
    *_version("h200_sxm", _H200, "fcc04aaa2", "2026-02-07T22:52:22Z", "2026-05-01T20:00:46Z",
              _spec("none", _H200_1K, _H200_8K_STP) + _spec("mtp", _H200_1K, _H200_8K_MTP)),
    *_version("h100_sxm", _H100, "76fa58252", "2026-02-10T06:26:49Z", "2026-02-13T03:10:02Z", _spec("none", _H100_1K1K_8K1K, (
        (1024, 8192, (1, 2, 4, 8, 16, 32), 1, 1, False, 2, 1, False), (1024, 8192, (1, 2, 4, 8), 1, 1, False, 1, 16, True)))),
    *_version("h100_sxm", _H100, "78d48618f", "2026-02-13T03:10:02Z", "2026-03-28T06:38:24Z", _spec("mtp", _H100_1K1K_8K1K, (
        (1024, 8192, _TO_64, 1, 1, False, 2, 1, False), (1024, 8192, _TO_64, 1, 1, False, 1, 16, True)))),
    *_version("b200_sxm", _B200, "8a02464b8", "2026-02-07T07:08:58Z", "2026-03-18T21:01:02Z",
              _spec("none", _B200_1K, _B200_8K_FEB)),
    *_version("b200_sxm", _B200, "593fb431a", "2026-03-18T21:01:02Z", "2026-05-01T20:00:46Z",
              _spec("none", _B200_1K, _B200_8K_MAR)),
    *_version("b200_sxm", _B200_MTP, "8cdf35781", "2026-02-12T04:32:06Z", "2026-02-13T19:05:35Z",
              _spec("mtp", _B200_1K_MTP, _B200_8K_MTP_FEB)),
    *_version("b200_sxm", _B200_MTP, "ee032b37f", "2026-02-13T19:05:35Z", "2026-03-18T21:01:02Z",
              _spec("mtp", _B200_1K_MTP, _B200_1P2D_MTP, _B200_8K_MTP_FEB)),
    *_version("b200_sxm", _B200_MTP, "593fb431a", "2026-03-18T21:01:02Z", "2026-05-01T20:00:46Z",
              _spec("mtp", _B200_1K_MTP, _B200_1P2D_MTP, _B200_8K_MAR)),
)
"""InferenceX's disaggregated DeepSeek-R1 recipes on SGLang (Dynamo), every version of their config
keys in force on the CSV's rows' dates (first-parent history of ``nvidia-master.yaml``; entries with
no workers of a role left out): H200 from 2026-02-05 (1 prefill worker and 9, 7, 6, 3 or 1 decode
workers of 8 GPUs, by ISL and concurrency), H100 from 2026-02-10 (TP16 workers), B200 from
2026-02-07 with its MTP key from 2026-02-12. The CSV's rows of these runs give the layouts but not
the worker counts, and its ``source_file`` rows drop ``dp-attn`` (the same runs in NVIDIA's database
dump read attention DP 8 where the recipe sets it). A row takes the workers and attention layout of
the recipes that fit it (:meth:`DisaggRecipe.fits` at its ``measured=`` time: each exact stamp
falls 3-4 s after a config commit, the run it started; a date-only stamp, its whole day) where
they agree, and is left out (:data:`~prfaas_plan.validate.AMBIGUOUS_RECIPE`) where they do not: a row does not say which of the splits
the config runs at its concurrency it measured, nor whether it decoded with MTP, so a row that an STP
and an MTP entry both fit is left out too, and one that only MTP entries fit is a
:data:`~prfaas_plan.validate.SPECULATIVE_RUN` (H100's recipes are all MTP from 2026-02-13), as for aggregated runs. The
CSV holds both: rows of one label and one ``measured=`` stamp differ 1.3-2.3x in TPOT (B200 1K/1K,
c = 32, TP8 x EP8 at 2026-03-18T21:01:05Z: 7.77 and 12.87 ms), the speed-up MTP gives."""


__all__ = ["DISAGG_RECIPES", "DisaggRecipe", "RECIPES", "RECIPE_NODE_GPUS", "Recipe", "RecipeRun", "parse_utc"]
