"""The bad-input table: what a new user's mistakes do to every command.

Each case runs the real ``prfaas-plan`` in a subprocess (10 s timeout, a fresh working folder
under a temp dir) and gets a verdict:

* ``ok``: exit code 2, exactly one line on stderr, no traceback, and no file left behind;
* ``accepted``: a case that is valid input with a documented meaning (exit code 0);
* ``FAIL (...)``: anything else (a hang, a traceback, another exit code, several lines, a file
  left behind), with the reason.

Run: python benchmarks/bad_inputs.py [--only SUBSTRING] [--jobs N]
(prints the table and a count per verdict; exit code 1 when any case fails).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "prfaas-plan"
TIMEOUT_S = 10.0
LONG_ARG = "a" * 100_000  # longer than any file name the OS allows


@dataclass(frozen=True)
class Case:
    """One command line (``{t}``: the fixtures folder, ``{long}``: a 100,000-character word);
    ``accepted``: valid input that must exit 0."""

    name: str
    args: str
    accepted: bool = False


@dataclass(frozen=True)
class Outcome:
    case: Case
    exit_code: int | None  # None: killed at the timeout
    wall_s: float
    stderr_lines: list[str]
    left_behind: list[str]

    @property
    def verdict(self) -> str:
        traceback = any("Traceback" in line for line in self.stderr_lines)
        if self.exit_code is None:
            return f"FAIL (hang > {TIMEOUT_S:g} s)"
        if traceback:
            return "FAIL (traceback)"
        if self.case.accepted:
            return "accepted" if self.exit_code == 0 else f"FAIL (exit {self.exit_code}, expected 0)"
        if self.exit_code != 2:
            return f"FAIL (exit {self.exit_code})"
        if len(self.stderr_lines) != 1:
            return f"FAIL ({len(self.stderr_lines)} stderr lines)"
        if self.left_behind:
            return f"FAIL (left {', '.join(self.left_behind)})"
        return "ok"


def _cases() -> list[Case]:
    c = Case
    grid = "sweep {t}/grid.yaml -o out.parquet --no-progress --executor serial"
    return [
        # models / hardware
        c("models: bad --format", "models --format xml"),
        c("models: --model-db missing", "models --model-db {t}/missing"),
        c("models: --model-db is a file", "models --model-db {t}/file.txt"),
        c("models: --model-db with a binary YAML", "models --model-db {t}/bindb"),
        c("models: --model-db with an empty YAML", "models --model-db {t}/emptydb"),
        c("models: --model-db with a list YAML", "models --model-db {t}/listdb"),
        c("models: stray argument", "models extra"),
        c("models: 100k-char --model-db", "models --model-db {long}"),
        c("hardware: bad --format", "hardware --format yaml"),
        c("hardware: --hardware-db missing", "hardware --hardware-db {t}/missing"),
        c("hardware: --hardware-db with a binary YAML", "hardware --hardware-db {t}/bindb"),
        c("hardware: --hardware-db with an unknown field", "hardware --hardware-db {t}/badhwdb"),
        # kv
        c("kv: no model", "kv"),
        c("kv: unknown model", "kv no-such-model"),
        c("kv: empty model id", "kv ''"),
        c("kv: 100k-char model id", "kv {long}"),
        c("kv: --context 32Q", "kv minimax-m2.5 --context 32Q"),
        c("kv: --context 0", "kv minimax-m2.5 --context 0"),
        c("kv: --context -5", "kv minimax-m2.5 --context=-5"),
        c("kv: --context nan", "kv minimax-m2.5 --context nan"),
        c("kv: --context inf", "kv minimax-m2.5 --context inf"),
        c("kv: --context empty", "kv minimax-m2.5 --context ''"),
        c("kv: --context only commas", "kv minimax-m2.5 --context ,,"),
        c("kv: --context 1e6", "kv minimax-m2.5 --context 1e6"),
        c("kv: --context 0.5 tokens", "kv minimax-m2.5 --context 0.5"),
        c("kv: --context 1.5 tokens", "kv minimax-m2.5 --context 1.5"),
        c("kv: --context huge", "kv minimax-m2.5 --context 99999999999999999999K"),
        c("kv: --context 0.5K (512 tokens)", "kv minimax-m2.5 --context 0.5K", accepted=True),
        c("kv: bad --kv-dtype", "kv minimax-m2.5 --kv-dtype fp4"),
        c("kv: bad --engine", "kv minimax-m2.5 --engine trt"),
        c("kv: --tp 0", "kv minimax-m2.5 --tp 0"),
        c("kv: --tp -1", "kv minimax-m2.5 --tp=-1"),
        c("kv: --tp 3 with 4 KV heads", "kv mimo-v2-flash --tp 3"),
        c("kv: --tp 3 with 8 KV heads", "kv minimax-m2.5 --tp 3"),
        c("kv: --tp 16 with 8 KV heads (replicated)", "kv minimax-m2.5 --tp 16", accepted=True),
        c("kv: --tp 1000000", "kv minimax-m2.5 --tp 1000000"),
        c("kv: --tp abc", "kv minimax-m2.5 --tp abc"),
        c("kv: --block-tokens 0", "kv minimax-m2.5 --block-tokens 0"),
        c("kv: --block-tokens -16", "kv minimax-m2.5 --block-tokens=-16"),
        c("kv: binary YAML", "kv {t}/binary.yaml"),
        c("kv: binary JSON", "kv {t}/binary.json"),
        c("kv: empty YAML", "kv {t}/empty.yaml"),
        c("kv: empty JSON", "kv {t}/empty.json"),
        c("kv: YAML list", "kv {t}/list.yaml"),
        c("kv: YAML scalar", "kv {t}/scalar.yaml"),
        c("kv: malformed YAML", "kv {t}/malformed.yaml"),
        c("kv: missing YAML", "kv {t}/nofile.yaml"),
        c("kv: folder named .yaml", "kv {t}/dir.yaml"),
        c("kv: model YAML with an unknown field", "kv {t}/model-unknown-key.yaml"),
        c("kv: HF num_attention_heads 0", "kv {t}/hf/heads0/config.json"),
        c("kv: HF num_attention_heads a string", "kv {t}/hf/headsstr/config.json"),
        c("kv: HF num_key_value_heads 0", "kv {t}/hf/kvheads0/config.json"),
        c("kv: HF hidden_size a string", "kv {t}/hf/hiddenstr/config.json"),
        c("kv: HF num_hidden_layers -1", "kv {t}/hf/layersneg/config.json"),
        c("kv: HF full_attention_interval 0", "kv {t}/hf/interval0/config.json"),
        c("kv: HF config is a JSON list", "kv {t}/hf/list/config.json"),
        c("kv: HF malformed JSON", "kv {t}/hf/malformed/config.json"),
        c("kv: HF model_type unsupported", "kv {t}/hf/gpt2/config.json"),
        c("kv: HF DSA index_topk 0", "kv {t}/hf/topk0/config.json"),
        c("kv: HF DSA without index_n_heads", "kv {t}/hf/noidxheads/config.json"),
        c("kv: model YAML dsa without index_topk", "kv {t}/model-dsa-no-topk.yaml"),
        c("kv: --model-db is a file", "kv minimax-m2.5 --model-db {t}/file.txt"),
        # bandwidth
        c("bandwidth: --gpus 0", "bandwidth minimax-m2.5 --gpus 0"),
        c("bandwidth: --gpus -8", "bandwidth minimax-m2.5 --gpus=-8"),
        c("bandwidth: --gpus abc", "bandwidth minimax-m2.5 --gpus abc"),
        c("bandwidth: --gpus huge", "bandwidth minimax-m2.5 --gpus 99999999999"),
        c("bandwidth: --cluster-gpus 0", "bandwidth minimax-m2.5 --cluster-gpus 0"),
        c("bandwidth: --cluster-gpus huge", "bandwidth minimax-m2.5 --cluster-gpus 99999999999999"),
        c("bandwidth: --link-gbps 0", "bandwidth minimax-m2.5 --link-gbps 0"),
        c("bandwidth: --link-gbps -1", "bandwidth minimax-m2.5 --link-gbps=-1"),
        c("bandwidth: --link-gbps nan", "bandwidth minimax-m2.5 --link-gbps nan"),
        c("bandwidth: --link-gbps inf", "bandwidth minimax-m2.5 --link-gbps inf"),
        c("bandwidth: --link-efficiency 1.5", "bandwidth minimax-m2.5 --link-efficiency 1.5"),
        c("bandwidth: --link-efficiency 0", "bandwidth minimax-m2.5 --link-efficiency 0"),
        c("bandwidth: --link-efficiency nan", "bandwidth minimax-m2.5 --link-efficiency nan"),
        c("bandwidth: unknown --hardware", "bandwidth minimax-m2.5 --hardware h2000"),
        c("bandwidth: binary --hardware", "bandwidth minimax-m2.5 --hardware {t}/binary.yaml"),
        c("bandwidth: --context 32Q", "bandwidth minimax-m2.5 --context 32Q"),
        c("bandwidth: --hardware-db missing", "bandwidth minimax-m2.5 --hardware-db {t}/missing"),
        # profile
        c("profile: --tpot-ms nan", "profile kimi-linear-1t --tpot-ms nan"),
        c("profile: --tpot-ms inf", "profile kimi-linear-1t --tpot-ms inf"),
        c("profile: --tpot-ms 0", "profile kimi-linear-1t --tpot-ms 0"),
        c("profile: --tpot-ms -5", "profile kimi-linear-1t --tpot-ms=-5"),
        c("profile: --gpus 0", "profile kimi-linear-1t --gpus 0"),
        c("profile: --gpus -8", "profile kimi-linear-1t --gpus=-8"),
        c("profile: --gpus huge", "profile kimi-linear-1t --gpus 99999999999"),
        c("profile: unknown --hardware", "profile kimi-linear-1t --hardware nosuch"),
        c("profile: --context 32Q", "profile kimi-linear-1t --context 32Q"),
        c("profile: unknown model", "profile nosuch-model"),
        c("profile: binary model", "profile {t}/binary.yaml"),
        # plan (scenario)
        c("plan: unknown scenario", "plan no-such"),
        c("plan: 100k-char scenario", "plan {long}"),
        c("plan: binary scenario", "plan {t}/binary.yaml"),
        c("plan: binary scenario without suffix", "plan {t}/binary.bin"),
        c("plan: empty scenario", "plan {t}/empty.yaml"),
        c("plan: scenario is a list", "plan {t}/list.yaml"),
        c("plan: malformed scenario", "plan {t}/malformed.yaml"),
        c("plan: missing scenario file", "plan {t}/nofile.yaml"),
        c("plan: scenario is a folder", "plan {t}/dir.yaml"),
        c("plan: unknown scenario key", "plan {t}/sc-unknown-key.yaml"),
        c("plan: unknown nested key", "plan {t}/sc-nested-unknown.yaml"),
        c("plan: negative GPUs in scenario", "plan {t}/sc-neg-gpus.yaml"),
        c("plan: GPUs not a multiple of the instance", "plan {t}/sc-ragged-gpus.yaml"),
        c("plan: absurd GPUs in scenario", "plan {t}/sc-huge-gpus.yaml"),
        c("plan: unknown model in scenario", "plan {t}/sc-unknown-model.yaml"),
        c("plan: engine profile with --max-prefill-tokens 0", "plan {t}/sc-engine-prefill-cap-0.yaml"),
        c("plan: unknown GPU in scenario", "plan {t}/sc-unknown-gpu.yaml"),
        c("plan: binary model in scenario", "plan {t}/sc-binary-model.yaml"),
        c("plan: MXFP8 activations on Hopper", "plan {t}/sc-mx-on-hopper.yaml -o out.json"),
        c("plan: --load 0", "plan paper-case-study --load 0"),
        c("plan: --load 1.5", "plan paper-case-study --load 1.5"),
        c("plan: --load nan", "plan paper-case-study --load nan"),
        c("plan: --load -0.5", "plan paper-case-study --load=-0.5"),
        c("plan: bad --mode", "plan paper-case-study --mode fast"),
        c("plan: --link-gbps -1", "plan paper-case-study --link-gbps=-1"),
        c("plan: --link-gbps nan", "plan paper-case-study --link-gbps nan"),
        c("plan: --link-gbps inf", "plan paper-case-study --link-gbps inf"),
        c("plan: --out under a file", "plan paper-case-study --mode paper --out {t}/file.txt/plan.json"),
        c("plan: --out in a missing folder", "plan paper-case-study --mode paper --out {t}/missing/plan.json"),
        c("plan: --out is a folder", "plan paper-case-study --mode paper --out {t}/folder"),
        c("plan: --out under /proc", "plan paper-case-study --mode paper --out /proc/plan.json"),
        c("plan: --out 100k chars", "plan paper-case-study --mode paper --out {long}"),
        c("plan: --trace missing", "plan paper-case-study --trace {t}/nofile.jsonl"),
        c("plan: --trace binary", "plan paper-case-study --trace {t}/binary.bin"),
        c("plan: --trace empty", "plan paper-case-study --trace {t}/empty.jsonl"),
        c("plan: --trace is a folder", "plan paper-case-study --trace {t}/folder"),
        c("plan: --trace 100k chars", "plan paper-case-study --trace {long}"),
        c("plan: --prefix-cache-blocks -1", "plan paper-case-study --trace {t}/trace.jsonl --prefix-cache-blocks=-1"),
        c("plan: --prefix-cache-blocks without --trace", "plan paper-case-study --prefix-cache-blocks 8"),
        # plan (quick form)
        c("plan: no scenario and no --model", "plan"),
        c("plan: --prfaas h200:99999999992", "plan --model mimo-v2-flash --prfaas h200:99999999992"),
        c("plan: --local h20:99999999992", "plan --model mimo-v2-flash --local h20:99999999992"),
        c("plan: --prfaas h200 (no count)", "plan --model mimo-v2-flash --prfaas h200"),
        c("plan: --prfaas h200:abc", "plan --model mimo-v2-flash --prfaas h200:abc"),
        c("plan: --prfaas h200:-8", "plan --model mimo-v2-flash --prfaas h200:-8"),
        c("plan: --prfaas :32", "plan --model mimo-v2-flash --prfaas :32"),
        c("plan: --prfaas h200:30 (ragged)", "plan --model mimo-v2-flash --prfaas h200:30"),
        c("plan: --prfaas unknown GPU", "plan --model mimo-v2-flash --prfaas h2000:32"),
        c("plan: --local h20:0", "plan --model mimo-v2-flash --local h20:0"),
        c("plan: --model unknown", "plan --model nosuch"),
        c("plan: --model 100k chars", "plan --model {long}"),
        c("plan: quick --link-gbps nan", "plan --model mimo-v2-flash --link-gbps nan"),
        c("plan: quick --link-gbps 0 (no offload)", "plan --model mimo-v2-flash --link-gbps 0", accepted=True),
        # simulate
        c("simulate: --seed -1", "simulate paper-case-study --seed=-1"),
        c("simulate: --duration 0", "simulate paper-case-study --duration 0"),
        c("simulate: --duration nan", "simulate paper-case-study --duration nan"),
        c("simulate: --duration -5", "simulate paper-case-study --duration=-5"),
        c("simulate: --duration inf", "simulate paper-case-study --duration inf"),
        c("simulate: --duration 1e12", "simulate paper-case-study --duration 1e12"),
        c("simulate: --load 0", "simulate paper-case-study --load 0"),
        c("simulate: --load 1.5 (overload)", "simulate paper-case-study --duration 20 --load 1.5", accepted=True),
        c("simulate: --load nan", "simulate paper-case-study --load nan"),
        c("simulate: --rate-scale 0", "simulate paper-case-study --rate-scale 0"),
        c("simulate: --rate-scale nan", "simulate paper-case-study --rate-scale nan"),
        c("simulate: --rate-scale 1e12", "simulate paper-case-study --rate-scale 1e12"),
        c("simulate: --link-drop garbage", "simulate paper-case-study --link-drop garbage"),
        c("simulate: --link-drop end before start", "simulate paper-case-study --link-drop 100:20@1200-600"),
        c("simulate: --link-drop to 0 Gbps", "simulate paper-case-study --link-drop 100:0@600-1200"),
        c("simulate: --link-drop nan Gbps", "simulate paper-case-study --link-drop 100:nan@600-1200"),
        c("simulate: --link-drop negative start", "simulate paper-case-study --link-drop 100:20@-5-10"),
        c("simulate: --link-drop only commas", "simulate paper-case-study --link-drop ,"),
        c("simulate: --link-drop missing window", "simulate paper-case-study --link-drop 100:20"),
        c("simulate: --link-drop and --link-trace", "simulate paper-case-study --link-drop 100:20@1-2 --link-trace {t}/link.csv"),
        c("simulate: --link-trace missing", "simulate paper-case-study --link-trace {t}/nofile.csv"),
        c("simulate: --link-trace binary", "simulate paper-case-study --link-trace {t}/binary.bin"),
        c("simulate: --link-trace empty", "simulate paper-case-study --link-trace {t}/empty.csv"),
        c("simulate: --link-trace wrong columns", "simulate paper-case-study --link-trace {t}/link-bad.csv"),
        c("simulate: --link-trace is a folder", "simulate paper-case-study --link-trace {t}/folder"),
        c("simulate: bad --policy", "simulate paper-case-study --policy foo"),
        c("simulate: --out under a file", "simulate paper-case-study --duration 5 --out {t}/file.txt/sim"),
        c("simulate: --trace with --load", "simulate paper-case-study --trace {t}/trace.jsonl --load 0.5"),
        c("simulate: --prefix-cache-blocks without --trace", "simulate paper-case-study --prefix-cache-blocks 4"),
        c("simulate: binary scenario", "simulate {t}/binary.yaml"),
        c("simulate: --trace binary", "simulate paper-case-study --trace {t}/binary.bin"),
        # report / compare
        c("report: no -o", "report paper-case-study"),
        c("report: -o under a file", "report paper-case-study --no-simulate -o {t}/file.txt/r.html"),
        c("report: -o in a missing folder", "report paper-case-study --no-simulate -o {t}/missing/r.html"),
        c("report: -o is a folder", "report paper-case-study --no-simulate -o {t}/folder"),
        c("report: --seed -3", "report paper-case-study -o r.html --seed=-3"),
        c("report: --sim-duration 0", "report paper-case-study -o r.html --sim-duration 0"),
        c("report: --sim-duration nan", "report paper-case-study -o r.html --sim-duration nan"),
        c("report: --load 2", "report paper-case-study -o r.html --no-simulate --load 2"),
        c("report: --png is a file", "report paper-case-study -o r.html --no-simulate --png {t}/file.txt"),
        c("report: binary scenario", "report {t}/binary.yaml -o r.html"),
        c("report: --trace missing", "report paper-case-study -o r.html --trace {t}/nofile.jsonl"),
        c("compare: -o under a file", "compare minimax-m2.5 -o {t}/file.txt/c.html"),
        c("compare: -o in a missing folder", "compare minimax-m2.5 -o {t}/missing/c.html"),
        c("compare: unknown model", "compare nosuch -o c.html"),
        c("compare: binary model", "compare {t}/binary.yaml -o c.html"),
        c("compare: --context 32Q", "compare minimax-m2.5 -o c.html --context 32Q"),
        c("compare: --gpus 0", "compare minimax-m2.5 -o c.html --gpus 0"),
        c("compare: --cluster-gpus 0", "compare minimax-m2.5 -o c.html --cluster-gpus 0"),
        c("compare: unknown --hardware", "compare minimax-m2.5 -o c.html --hardware nosuch"),
        c("compare: --png is a file", "compare minimax-m2.5 -o c.html --png {t}/file.txt"),
        # sweep
        c("sweep: missing grid", "sweep {t}/nofile.yaml -o out.parquet"),
        c("sweep: binary grid", "sweep {t}/binary.yaml -o out.parquet"),
        c("sweep: empty grid", "sweep {t}/empty.yaml -o out.parquet"),
        c("sweep: grid is a list", "sweep {t}/list.yaml -o out.parquet"),
        c("sweep: grid is a folder", "sweep {t}/folder -o out.parquet"),
        c("sweep: 100k-char grid", "sweep {long} -o out.parquet"),
        c("sweep: grid with an unknown key", "sweep {t}/grid-unknown-key.yaml -o out.parquet"),
        c("sweep: grid with an unknown axis", "sweep {t}/grid-bad-axis.yaml -o out.parquet --no-progress"),
        c("sweep: grid with an empty axis", "sweep {t}/grid-empty-axis.yaml -o out.parquet --no-progress"),
        c("sweep: grid with a bad axis value", "sweep {t}/grid-bad-value.yaml -o out.parquet --no-progress"),
        c("sweep: grid with an unknown base scenario", "sweep {t}/grid-no-scenario.yaml -o out.parquet"),
        c("sweep: grid with seeds -1", "sweep {t}/grid-bad-seeds.yaml -o out.parquet"),
        c("sweep: -o under a file", "sweep {t}/grid.yaml -o {t}/file.txt/out.parquet --no-progress --executor serial"),
        c("sweep: -o in a missing folder", "sweep {t}/grid.yaml -o {t}/missing/out.parquet --no-progress --executor serial"),
        c("sweep: -o is a folder", "sweep {t}/grid.yaml -o {t}/folder --no-progress --executor serial"),
        c("sweep: -o under /proc", "sweep {t}/grid.yaml -o /proc/out.parquet --no-progress --executor serial"),
        c("sweep: --workers 0", grid + " --workers 0"),
        c("sweep: --workers -1", grid + " --workers=-1"),
        c("sweep: bad --executor", "sweep {t}/grid.yaml -o out.parquet --executor ray"),
        c("sweep: --x without --html", grid + " --x link.gbps"),
        c("sweep: --x not an axis", grid + " --html s.html --x nosuch"),
        c("sweep: --html under a file", grid + " --html {t}/file.txt/s.html"),
        c("sweep: --scheduler without dask", grid + " --scheduler tcp://localhost:1"),
        # bench
        c("bench run: no -o", "bench run"),
        c("bench run: -o under a file", "bench run --quick -o {t}/file.txt/r.json"),
        c("bench run: -o in a missing folder", "bench run --quick -o {t}/missing/r.json"),
        c("bench run: -o is a folder", "bench run --quick -o {t}/folder"),
        c("bench run: --threads 0", "bench run --quick --threads 0 -o r.json"),
        c("bench run: --threads -1", "bench run --quick --threads=-1 -o r.json"),
        c("bench run: bad --device", "bench run --quick --device tpu -o r.json"),
        c("bench calibrate: missing file", "bench calibrate {t}/nofile.json"),
        c("bench calibrate: binary file", "bench calibrate {t}/binary.json"),
        c("bench calibrate: binary YAML", "bench calibrate {t}/binary.yaml --gpu h200"),
        c("bench calibrate: empty file", "bench calibrate {t}/empty.json"),
        c("bench calibrate: folder", "bench calibrate {t}/folder"),
        c("bench calibrate: JSON list", "bench calibrate {t}/results-list.json"),
        c("bench calibrate: results with only a schema", "bench calibrate {t}/results-bare.json"),
        c("bench calibrate: observations without --gpu", "bench calibrate {t}/obs.yaml"),
        c("bench calibrate: unknown --gpu", "bench calibrate {t}/obs.yaml --gpu nosuch"),
        c("bench calibrate: bad --params", "bench calibrate {t}/obs.yaml --gpu h200 --params bogus"),
        c("bench calibrate: -o under a file", "bench calibrate {t}/obs.yaml --gpu h200 -o {t}/file.txt/h.yaml"),
        c("bench calibrate: -o is a folder", "bench calibrate {t}/obs.yaml --gpu h200 -o {t}/folder"),
        c("bench calibrate: -o under /proc", "bench calibrate {t}/obs.yaml --gpu h200 -o /proc/h.yaml"),
        c("bench calibrate: -o new folder (created)", "bench calibrate {t}/obs.yaml --gpu h200 -o new/h.yaml",
          accepted=True),
        c("bench calibrate: observations empty", "bench calibrate {t}/obs-empty.yaml --gpu h200"),
        c("bench calibrate-engine: no --engine", "bench calibrate-engine {t}/obs.yaml"),
        c("bench calibrate-engine: unknown engine", "bench calibrate-engine {t}/obs.yaml --engine trt"),
        c("bench calibrate-engine: binary engine YAML", "bench calibrate-engine {t}/obs.yaml --engine {t}/binary.yaml"),
        c("bench calibrate-engine: observations missing", "bench calibrate-engine {t}/nofile.yaml --engine sglang"),
        c("bench calibrate-engine: observations binary", "bench calibrate-engine {t}/binary.yaml --engine sglang"),
        c("bench calibrate-engine: observations empty", "bench calibrate-engine {t}/obs-empty.yaml --engine sglang"),
        c("bench calibrate-engine: a label nothing has", "bench calibrate-engine {t}/obs.yaml --engine sglang --label zzz"),
        c("bench calibrate-engine: bad --format", "bench calibrate-engine {t}/obs.yaml --engine sglang --format xml"),
        c("bench import-kernels: missing wheel", "bench import-kernels --wheel {t}/nofile.whl"),
        c("bench import-kernels: binary wheel", "bench import-kernels --wheel {t}/binary.bin"),
        c("bench validate: missing file", "bench validate {t}/nofile.json"),
        c("bench validate: binary file", "bench validate {t}/binary.json"),
        c("bench validate: empty file", "bench validate {t}/empty.json"),
        c("bench validate: folder", "bench validate {t}/folder"),
        c("bench validate: JSON list", "bench validate {t}/results-list.json"),
        c("bench validate: wrong schema", "bench validate {t}/results-wrong.json"),
        c("bench validate: results with only a schema", "bench validate {t}/results-bare.json"),
        c("bench validate: 100k-char path", "bench validate {long}"),
        c("size: no --target-rps", "size paper-case-study"),
        c("size: --target-rps 0", "size paper-case-study --target-rps 0"),
        c("size: --target-rps -1", "size paper-case-study --target-rps=-1"),
        c("size: --target-rps nan", "size paper-case-study --target-rps nan"),
        c("size: --target-rps inf", "size paper-case-study --target-rps inf"),
        c("size: --target-rps abc", "size paper-case-study --target-rps abc"),
        c("size: unknown scenario", "size no-such --target-rps 1"),
        c("size: 100k-char scenario", "size {long} --target-rps 1"),
        c("size: binary scenario", "size {t}/binary.yaml --target-rps 1"),
        c("size: --ttft-p90-s 0", "size paper-case-study --target-rps 1 --ttft-p90-s 0"),
        c("size: --tpot-ms -5", "size paper-case-study --target-rps 1 --tpot-ms=-5"),
        c("size: unknown GPU", "size paper-case-study --target-rps 1 --gpus h200,h2000"),
        c("size: empty --gpus", "size paper-case-study --target-rps 1 --gpus ''"),
        c("size: unknown layout", "size paper-case-study --target-rps 1 --layouts tp8-xp8"),
        c("size: --layouts tp3", "size paper-case-study --target-rps 1 --layouts tp3"),
        c("size: --link-tiers missing", "size paper-case-study --target-rps 1 --link-tiers {t}/nofile.yaml"),
        c("size: --link-tiers binary", "size paper-case-study --target-rps 1 --link-tiers {t}/binary.yaml"),
        c("size: --link-tiers a list", "size paper-case-study --target-rps 1 --link-tiers {t}/list.yaml"),
        c("size: --max-instances 0", "size paper-case-study --target-rps 1 --max-instances 0"),
        c("size: --pareto -1", "size paper-case-study --target-rps 1 --pareto=-1"),
        c("size: bad --executor", "size paper-case-study --target-rps 1 --pareto 2 --executor ray"),
        c("size: bad --format", "size paper-case-study --target-rps 1 --format xml"),
        c("size: -o is a folder", "size paper-case-study --target-rps 1 -o {t}/folder"),
        c("size: --html into a missing folder", "size paper-case-study --target-rps 1 --html /nonexistent/s.html"),
        c("size: a rate no deployment serves", "size paper-case-study --target-rps 1e9 --max-instances 2"),
        c("validate: unknown source", "validate csv"),
        c("validate: --csv missing", "validate --csv {t}/nofile.csv"),
        c("validate: 100k-char --csv", "validate --csv {long}"),
        c("validate: --csv binary", "validate --csv {t}/binary.bin"),
        c("validate: --csv empty", "validate --csv {t}/empty.csv"),
        c("validate: --csv lacking columns", "validate --csv {t}/link-bad.csv"),
        c("validate: --csv with a negative concurrency", "validate --csv {t}/silicon-neg.csv"),
        c("validate: bad --format", "validate --csv {t}/silicon.csv --format xml"),
        c("validate: bad --moe-routing", "validate --csv {t}/silicon.csv --moe-routing zipf"),
        c("validate: --html into a missing folder", "validate --csv {t}/silicon.csv --html /nonexistent/v.html"),
        c("validate runs: no path", "validate runs"),
        c("validate runs: missing file", "validate runs {t}/nofile.json"),
        c("validate runs: binary file", "validate runs {t}/binary.json"),
        c("validate runs: JSON list", "validate runs {t}/results-list.json"),
        c("validate runs: another tool's JSON", "validate runs {t}/results-wrong.json"),
        c("validate runs: negative max_concurrency", "validate runs {t}/run-neg.json"),
        c("validate runs: no completed request", "validate runs {t}/run-none.json"),
        c("validate runs: 100k-char path", "validate runs {long}"),
        # documented meanings
        c("simulate: --link-drop until forever", "simulate paper-case-study --duration 20 --link-drop 100:20@5-inf",
          accepted=True),
        c("kv: --tp 4 with 4 KV heads", "kv mimo-v2-flash --tp 4", accepted=True),
    ]


def _write_fixtures(t: Path) -> None:
    """The files the cases point at (``{t}/...``)."""
    blob = bytes(range(256)) * 16  # not UTF-8
    for name in ("binary.yaml", "binary.json", "binary.bin"):
        (t / name).write_bytes(blob)
    for name in ("empty.yaml", "empty.json", "empty.jsonl", "empty.csv"):
        (t / name).write_text("")
    (t / "file.txt").write_text("a regular file\n")
    (t / "list.yaml").write_text("- a\n- b\n")
    (t / "scalar.yaml").write_text("just a sentence\n")
    (t / "malformed.yaml").write_text("id: x\nname: [unclosed\n")
    (t / "folder").mkdir()
    (t / "dir.yaml").mkdir()
    for db, name, text in (("bindb", "bad.yaml", None), ("emptydb", "empty.yaml", ""), ("listdb", "x.yaml", "- 1\n"),
                           ("badhwdb", "gpu.yaml", "id: gpu\ncolour: blue\n")):
        (t / db).mkdir()
        path = t / db / name
        path.write_bytes(blob) if text is None else path.write_text(text)
    model = (ROOT / "prfaas_plan" / "data" / "model_db" / "minimax-m2.5.yaml").read_text()
    (t / "model-unknown-key.yaml").write_text(model + "\ncolour: blue\n")
    glm5 = (ROOT / "prfaas_plan" / "data" / "model_db" / "glm-5.yaml").read_text()
    (t / "model-dsa-no-topk.yaml").write_text(glm5.replace(", index_topk: 2048", ""))

    llama = json.loads((ROOT / "tests" / "fixtures" / "hf" / "llama-3.3-70b.json").read_text())
    qnext = json.loads((ROOT / "tests" / "fixtures" / "hf" / "qwen3-next-80b-a3b.json").read_text())
    qnext.pop("layer_types", None)
    hf = {"heads0": {**llama, "num_attention_heads": 0}, "headsstr": {**llama, "num_attention_heads": "many"},
          "kvheads0": {**llama, "num_key_value_heads": 0}, "hiddenstr": {**llama, "hidden_size": "big"},
          "layersneg": {**llama, "num_hidden_layers": -1}, "interval0": {**qnext, "full_attention_interval": 0},
          "list": [1, 2], "gpt2": {"model_type": "gpt2"}}
    v32 = json.loads((ROOT / "tests" / "fixtures" / "hf" / "deepseek-v3.2.json").read_text())
    hf |= {"topk0": {**v32, "index_topk": 0}, "noidxheads": {k: v for k, v in v32.items() if k != "index_n_heads"}}
    for name, doc in {**hf, "malformed": None}.items():
        (t / "hf" / name).mkdir(parents=True)
        (t / "hf" / name / "config.json").write_text("{" if doc is None else json.dumps(doc))

    scenario = (ROOT / "prfaas_plan" / "data" / "scenarios" / "paper-case-study.yaml").read_text()
    variants = {
        "sc-unknown-key": scenario + "\ncolour: blue\n",
        "sc-nested-unknown": scenario.replace("  rtt_s: 0.005", "  rtt_s: 0.005\n  speed: 3"),
        "sc-neg-gpus": scenario.replace("  gpus: 32", "  gpus: -32"),
        "sc-ragged-gpus": scenario.replace("  gpus: 32", "  gpus: 30"),
        "sc-huge-gpus": scenario.replace("  gpus: 32", "  gpus: 99999999992"),
        "sc-unknown-model": scenario.replace("model: kimi-linear-1t", "model: kimi-linear-2t"),
        "sc-unknown-gpu": scenario.replace("  gpu: h200", "  gpu: h2000"),
        "sc-binary-model": scenario.replace("model: kimi-linear-1t", f"model: {t / 'binary.yaml'}"),
        "sc-mx-on-hopper": scenario.replace("model: kimi-linear-1t", "model: gpt-oss-120b\ngemm_dtypes: {experts: mxfp4_w4a8}"),
        "sc-engine-prefill-cap-0": scenario.replace("engine_profile: paper-sglang-0.5.9",
                                                    f"engine_profile: {t / 'engine-prefill-cap-0.yaml'}"),
    }
    engine = (ROOT / "prfaas_plan" / "data" / "engine_db" / "paper-sglang-0.5.9.yaml").read_text()
    (t / "engine-prefill-cap-0.yaml").write_text(engine.replace("max_prefill_tokens: 16384", "max_prefill_tokens: 0"))
    for name, text in variants.items():
        assert text != scenario, name
        (t / f"{name}.yaml").write_text(text)
    trace = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"
    (t / "trace.jsonl").write_text(trace.read_text())
    (t / "link.csv").write_text("time_s,gbps\n0,100\n10,20\n")
    (t / "link-bad.csv").write_text("a,b\n1,2\n")

    grid = "scenario: paper-case-study\nmode: paper\naxes:\n  link.gbps: [100]\n"
    grids = {"grid": grid, "grid-unknown-key": grid + "colour: blue\n",
             "grid-bad-axis": grid.replace("link.gbps", "link.speed"),
             "grid-empty-axis": grid.replace("[100]", "[]"),
             "grid-bad-value": grid.replace("[100]", "[-5]"),
             "grid-no-scenario": grid.replace("paper-case-study", "no-such-scenario"),
             "grid-bad-seeds": grid.replace("mode: paper", "run: simulate\nseeds: -1")}
    for name, text in grids.items():
        (t / f"{name}.yaml").write_text(text)

    (t / "results-list.json").write_text("[1]")
    (t / "results-wrong.json").write_text(json.dumps({"schema": 999}))
    (t / "results-bare.json").write_text(json.dumps({"schema": "prfaas-plan-bench/1"}))
    silicon = (ROOT / "tests" / "fixtures" / "validate" / "silicon_rows.csv").read_text().splitlines()
    (t / "silicon.csv").write_text("\n".join(silicon[:2]) + "\n")
    assert "silicon_concurrency=8" in silicon[1]
    (t / "silicon-neg.csv").write_text(silicon[0] + "\n" + silicon[1].replace("silicon_concurrency=8",
                                                                             "silicon_concurrency=-4") + "\n")
    run = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200", "tp": 1, "max_concurrency": 64,
           "completed": 640, "total_input_tokens": 1_280_000, "total_output_tokens": 64_000,
           "mean_ttft_ms": 100.0, "mean_tpot_ms": 10.0}
    (t / "run-neg.json").write_text(json.dumps({**run, "max_concurrency": -4}))
    (t / "run-none.json").write_text(json.dumps({**run, "completed": 0}))
    (t / "obs.yaml").write_text((ROOT / "bench_results" / "prfaas-paper-h200.yaml").read_text())
    (t / "obs-empty.yaml").write_text("source: nowhere\nobservations: []\n")


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_case(case: Case, fixtures: Path, scratch: Path) -> Outcome:
    """Run one case in its own working folder; report exit code, time, stderr and new files."""
    work = Path(tempfile.mkdtemp(dir=scratch))
    before = _tree(fixtures)
    argv = [str(CLI), *shlex.split(case.args.format(t=fixtures, long=LONG_ARG))]
    env = {**os.environ, "COLUMNS": "100", "PYTHONWARNINGS": "ignore"}
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        code, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stderr = None, exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall_s = time.perf_counter() - started
    lines = [line for line in stderr.splitlines() if line.strip()]
    left = sorted(_tree(work) | (_tree(fixtures) - before))
    return Outcome(case, code, wall_s, lines, left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this text")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at the same time (default 1)")
    opts = parser.parse_args()
    cases = [c for c in _cases() if not opts.only or opts.only in c.name]
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        fixtures, scratch = Path(tmp) / "t", Path(tmp) / "work"
        fixtures.mkdir()
        scratch.mkdir()
        _write_fixtures(fixtures)
        with ThreadPoolExecutor(max(1, opts.jobs)) as pool:
            outcomes = list(pool.map(lambda c: run_case(c, fixtures, scratch), cases))
    width = max(len(o.case.name) for o in outcomes)
    print(f"{'case':<{width}}  exit  secs  lines  verdict / first stderr line")
    for o in outcomes:
        first = (o.stderr_lines[0] if o.stderr_lines else "").replace(LONG_ARG, "a" * 8 + "...")
        code = "-" if o.exit_code is None else str(o.exit_code)
        print(f"{o.case.name:<{width}}  {code:>4}  {o.wall_s:4.1f}  {len(o.stderr_lines):>5}  {o.verdict}: {first[:160]}")
    counts: dict[str, int] = {}
    for o in outcomes:
        key = o.verdict.split(" ")[0]
        counts[key] = counts.get(key, 0) + 1
    slowest = max(outcomes, key=lambda o: o.wall_s)
    print(f"\n{len(outcomes)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
          + f"; slowest {slowest.wall_s:.1f} s ({slowest.case.name})")
    return 1 if counts.get("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main())
