#!/usr/bin/env bash
# Run the prfaas-plan microbenchmark harness on a GPU machine, calibrate the performance model's
# efficiency factors on the calibration cases and validate its prefill predictions on the held-out
# cases, in one go.
#
#   benchmarks/gpu_validate.sh                        # full CUDA harness (a few minutes on an H200)
#   benchmarks/gpu_validate.sh --quick                # fewer shapes, lengths and repeats
#   benchmarks/gpu_validate.sh --device cpu --quick   # dry run on a CPU (a few minutes)
#   benchmarks/gpu_validate.sh --gpu h200             # force the datasheet entry used as the base
#   benchmarks/gpu_validate.sh --nominal-gbps 400     # line rate the loopback Gbps is compared with
#
# Output folder: $OUT when set (the device runner's output folder), else bench_results/ (where
# results of real GPU runs are kept). Files, with SLUG the device name (e.g. nvidia-h200):
#   bench-SLUG.json        every timing (repeats, median, min, spread), shapes, versions, transfer Gbps
#   SLUG-measured.yaml     complete hardware entry written by `bench calibrate` (with provenance)
#   SLUG-link.yaml         scenario link block: nominal Gbps and the measured link efficiency
#   validate-SLUG.csv      held-out cases: predicted vs measured prefill, error %
#   device.txt             nvidia-smi / torch description of the device
#   gpu_validate.log       everything printed
#
# Installs nothing heavy: torch must already be there (torch==2.13.0, the CUDA build on a GPU
# machine). Only when the package itself is not importable is it installed, editable and without
# dependencies. The harness is bounded by BENCH_TIMEOUT_S seconds (default 420, so the whole
# script stays under 8 minutes).
set -euo pipefail

DEVICE=cuda
QUICK=()
GPU_ARGS=()
NOMINAL_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --quick) QUICK=(--quick); shift ;;
    --gpu) GPU_ARGS=(--gpu "$2"); shift 2 ;;
    --nominal-gbps) NOMINAL_ARGS=(--nominal-gbps "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_validate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cpu|auto) ;; *) echo "gpu_validate.sh: --device must be cuda, cpu or auto" >&2; exit 2 ;; esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
BENCH_TIMEOUT_S="${BENCH_TIMEOUT_S:-420}"
DEST="${OUT:-$ROOT/bench_results}"
mkdir -p "$DEST"
LOG="$DEST/gpu_validate.log"
: > "$LOG"
log() { echo "$@" | tee -a "$LOG"; }

if ! "$PY" -c "import torch" 2>/dev/null; then
  log "gpu_validate.sh: torch is not installed for $PY; install torch==2.13.0 (CUDA build) first"; exit 3
fi
if ! "$PY" -c "import prfaas_plan.cli, prfaas_plan.data.model_db" 2>/dev/null; then
  log "installing prfaas-plan (editable, no dependencies)"
  "$PY" -m pip install --quiet --no-deps --no-build-isolation -e "$ROOT" >>"$LOG" 2>&1
fi
MISSING="$("$PY" - <<'PYEOF'
import importlib
names = ["numpy", "scipy", "pandas", "pydantic", "yaml", "typer", "rich", "prfaas_plan.data.model_db"]
missing = []
for n in names:
    try:
        importlib.import_module(n)
    except ImportError:
        missing.append(n)
print(" ".join(missing))
PYEOF
)"
if [[ -n "$MISSING" ]]; then
  log "gpu_validate.sh: missing Python packages: $MISSING (pip install them; they are small)"; exit 3
fi

SLUG="$("$PY" - "$DEVICE" <<'PYEOF' 2>>"$LOG"
import re, sys, torch
device = sys.argv[1]
if device == "auto":
    device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    name = torch.cuda.get_device_name(0)
else:
    name = "cpu"
print(re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))
PYEOF
)" || { log "gpu_validate.sh: --device $DEVICE is not usable here (see $LOG)"; exit 3; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  "$PY" -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  if command -v nvidia-smi >/dev/null 2>&1 && [[ "$DEVICE" != cpu ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
  fi
} > "$DEST/device.txt" 2>&1
cat "$DEST/device.txt" >> "$LOG"

RESULTS="$DEST/bench-$SLUG.json"
HW="$DEST/$SLUG-measured.yaml"
LINK="$DEST/$SLUG-link.yaml"
CLI=("$PY" -m prfaas_plan.cli)
START=$(date +%s)

log "== bench run ($DEVICE ${QUICK[*]:-full}) -> $RESULTS"
timeout "$BENCH_TIMEOUT_S" "${CLI[@]}" bench run --device "$DEVICE" "${QUICK[@]}" -o "$RESULTS" --no-progress 2>&1 | tee -a "$LOG"
log "== bench calibrate -> $HW"
"${CLI[@]}" bench calibrate "$RESULTS" -o "$HW" --link-yaml "$LINK" "${GPU_ARGS[@]}" "${NOMINAL_ARGS[@]}" 2>&1 | tee -a "$LOG"
log "== bench validate (held-out cases)"
"${CLI[@]}" bench validate "$RESULTS" --hardware "$HW" 2>&1 | tee -a "$LOG"
"${CLI[@]}" bench validate "$RESULTS" --hardware "$HW" -f csv > "$DEST/validate-$SLUG.csv"
log "== done in $(( $(date +%s) - START )) s; files in $DEST"
