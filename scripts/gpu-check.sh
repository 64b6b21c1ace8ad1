#!/usr/bin/env bash
# The whole GPU verification on a machine with one GPU, in one go: build the CUDA backend and its
# tests (or reuse BUILD_DIR if built already), run every CUDA test, print a summary table last.
# Logs go to $OUT (default: ./gpu-check-out). Needs only the CUDA toolkit, a C++ compiler, cmake
# and ninja: cuDNN and NCCL are found where they are (Python packages included), and the rest
# comes from .carry/ (scripts/prepare-carry.sh, run beforehand on a Debian machine).
#   scripts/gpu-check.sh                   # build for the GPU it finds, run the tests
#   ARCHS=90 JOBS=16 BUDGET=540 scripts/gpu-check.sh
#   STEPS=tests FILTER='*Attention*' scripts/gpu-check.sh   # a quick rerun after a fix
# STEPS (default tests,apps,bench): which parts run after the build (and what it builds): the
# CUDA suites, the training programs (scripts/app-cuda-check.sh), the benchmarks (bench, or
# some of ops-bench, attention-bench, gpt2-bench). FILTER (a
# GoogleTest positive pattern, default *) narrows the CUDA suite; with a FILTER the NCCL
# init-timeout test and the caching allocator's run only when it names them.
# BUDGET (seconds, default 540: a device call runs at most 600) bounds the whole check: every
# step's timeout is cut to what is left of it (less 30 s kept for the summary), a step that would
# get under 30 s is skipped with a SKIP row, and a TERM or INT still prints the table. The exit
# status is non-zero when a row is FAIL or SKIP.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-check-out}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$OUT"
START=$(date +%s)
BUDGET="${BUDGET:-540}"
STEPS=",${STEPS:-tests,apps,bench},"
FILTER="${FILTER:-*}"
# want STEP: whether STEPS names it ("bench" names the three *-bench steps).
want() { [[ "$STEPS" == *",$1,"* || ( "$1" == *-bench && "$STEPS" == *",bench,"* ) ]]; }
declare -a ROWS=()
row() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }
# The timeout for a step of at most $1 seconds within BUDGET (30 s kept for the summary); 0 when
# under 30 s would be left, and then the caller skips the step.
tmo() {
  local left=$(( BUDGET - 30 - ($(date +%s) - START) ))
  if (( left < 30 )); then echo 0; elif (( left < $1 )); then echo "$left"; else echo "$1"; fi
}
skip() { row "$1" SKIP "not run: BUDGET=$BUDGET s spent"; }
SUMMARY_DONE=0
summary() {
  (( SUMMARY_DONE )) && return
  SUMMARY_DONE=1
  # At most 8 files come back from a device call: the secondary logs travel as one archive
  # (before the table, so that the table is the last thing printed).
  local logs
  logs=$(cd "$OUT" && ls configure.log caching_allocator.log cuda_tests_blocking.log bench.err app_cuda.log app_cuda.rows gpt2_profile.txt 2>/dev/null)
  # shellcheck disable=SC2086
  [[ -n "$logs" ]] && (cd "$OUT" && tar czf logs.tar.gz --remove-files $logs)
  echo
  echo "== summary ($(( $(date +%s) - START )) s of BUDGET=$BUDGET, $(head -1 "$OUT/gpu.txt" 2>/dev/null))"
  printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
}
# The long steps run in the background and are waited for, so that a TERM or INT interrupts the
# wait at once (bash runs a trap only after a foreground child ends): the trap stops the step and
# still prints the table.
CHILD=""
exec 3>&1  # the script's own output: a trap runs inside a step's redirection to its log
bg() { "$@" & CHILD=$!; wait "$CHILD"; local rc=$?; CHILD=""; return "$rc"; }
on_signal() {
  [[ -n "$CHILD" ]] && kill -TERM "$CHILD" 2>/dev/null
  row interrupted FAIL "gpu-check.sh got a signal after $(( $(date +%s) - START )) s"
  summary >&3 2>&3
  exit 1
}
trap on_signal TERM INT

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
ARCHS="${ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}"
ARCHS="${ARCHS:-90}"

# cuDNN and NCCL: the system's, else a Python package's (nvidia-cudnn-cu13, nvidia-nccl-cu13),
# whose libraries carry only the versioned name: link the unversioned one beside it.
DEPS="$BUILD_DIR/deps"
mkdir -p "$DEPS/lib"
find_dep() {  # name header
  local lib inc
  # Not $DEPS itself: a rerun with the same BUILD_DIR would find its own link first (/tmp sorts
  # before /usr) and make it point at itself; and the link goes to the file, not to a link.
  lib=$(find / \( -path /proc -o -path /sys -o -path "$DEPS" \) -prune -o -name "lib$1.so*" -print 2>/dev/null | sort | head -1)
  inc=$(find / \( -path /proc -o -path /sys \) -prune -o -name "$2" -print 2>/dev/null | head -1)
  if [[ -n "$lib" && -n "$inc" ]]; then
    lib=$(readlink -f "$lib")  # the file itself, not another build's link to it
    ln -sf "$lib" "$DEPS/lib/lib$1.so"
    echo "-D$(echo "$1" | tr a-z A-Z)_ROOT=$DEPS -DTRIDENT_$(echo "$1" | tr a-z A-Z)_INCLUDE=$(dirname "$inc")"
  fi
}
CUDNN_ARGS=$(find_dep cudnn cudnn.h)
NCCL_ARGS=$(find_dep nccl nccl.h)
export LD_LIBRARY_PATH="$DEPS/lib:$(dirname "$(readlink -f "$DEPS/lib/libcudnn.so" 2>/dev/null || echo /)"):$(dirname "$(readlink -f "$DEPS/lib/libnccl.so" 2>/dev/null || echo /)"):${LD_LIBRARY_PATH:-}"
# OpenBLAS: the system's, else the gzipped static copy from .carry/ (scripts/prepare-carry.sh).
BLAS_ARGS=""
if [[ -d .carry/openblas/lib ]] && ls .carry/openblas/lib/*.a.gz > /dev/null 2>&1; then
  mkdir -p "$DEPS/openblas/lib"
  cp -r .carry/openblas/include "$DEPS/openblas/"
  for f in .carry/openblas/lib/*.a.gz; do
    g="$DEPS/openblas/lib/$(basename "${f%.gz}")"
    [[ -f "$g" ]] || gunzip -c "$f" > "$g"
  done
  BLAS_ARGS="-DOPENBLAS_ROOT=$DEPS/openblas"
fi
# PCRE2, zlib (gzipped static copies), stb and CLI11 from .carry/ for data/ and the training
# programs (NOTE [Carried data libraries] in cmake/Dependencies.cmake); without them data/ is off
# and the programs are not built.
DATA_ARGS="-DTRIDENT_DATA=OFF"
if [[ -d .carry/pcre2/lib && -d .carry/zlib/lib && -d .carry/stb ]]; then
  for lib in pcre2 zlib; do
    mkdir -p "$DEPS/$lib/lib"
    cp -r ".carry/$lib/include" "$DEPS/$lib/"
    for f in .carry/$lib/lib/*.a.gz; do
      g="$DEPS/$lib/lib/$(basename "${f%.gz}")"
      [[ -f "$g" ]] || gunzip -c "$f" > "$g"
    done
  done
  DATA_ARGS="-DTRIDENT_DATA=AUTO -DPCRE2_ROOT=$DEPS/pcre2 -DZLIB_ROOT=$DEPS/zlib -DSTB_ROOT=$ROOT/.carry/stb/include"
fi
echo "OpenBLAS: ${BLAS_ARGS:-system}"
echo "data/: $DATA_ARGS"
echo "cuDNN: $CUDNN_ARGS"
echo "NCCL:  $NCCL_ARGS"

echo "== configure (architectures $ARCHS)"
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON \
    -DTRIDENT_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DTRIDENT_MPI=OFF $DATA_ARGS \
    -DTRIDENT_BUILD_BENCHMARKS=ON -DTRIDENT_SANITIZER_TESTS=OFF -DTRIDENT_WERROR=OFF \
    $BLAS_ARGS $CUDNN_ARGS $NCCL_ARGS > "$OUT/configure.log" 2>&1; then
  row configure ok "$(tail -1 "$OUT/configure.log")"
else
  tail -30 "$OUT/configure.log"; row configure FAIL "see configure.log"
fi

echo "== build"
B0=$(date +%s)
# The benchmarks that need no Google Benchmark: the CUDA op table, and attention when present.
BENCH_TARGETS=""
for b in ops attention gpt2; do
  want "$b-bench" && BENCH_TARGETS+=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | grep -oE "^$([[ $b == ops ]] && echo cuda_ops || echo "${b}_cuda")_bench:" | tr -d : | tr '\n' ' ')
done
# The training programs, when data/ is on (the carried PCRE2 and zlib).
APP_TARGETS=""
want apps && APP_TARGETS=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | grep -oE '^(train_gpt2|generate|train_imagenet):' | tr -d : | tr '\n' ' ')
# -k 0: a target that fails to compile (a benchmark, say) does not keep the others from being
# built and run; the steps below find what is missing.
T=$(tmo 420)
if (( T == 0 )); then
  skip build
elif bg timeout "$T" ninja -C "$BUILD_DIR" -j "$JOBS" -k 0 cuda_tests core_tests $BENCH_TARGETS $APP_TARGETS > "$OUT/build.log" 2>&1; then
  row build ok "$(( $(date +%s) - B0 )) s"
else
  rc=$?
  grep -m 20 -B2 -A6 "error" "$OUT/build.log"
  row build FAIL "$([[ $rc == 124 ]] && echo "timed out after $T s" || echo "rc $rc"): see build.log"
fi

echo "== tests"
run_suite() {  # name binary filter [max seconds, default 300]
  local log="$OUT/$1.log"
  if [[ ! -x "$2" ]]; then row "$1" FAIL "not built"; return; fi
  local t; t=$(tmo "${4:-300}")
  (( t > 0 )) || { skip "$1"; return; }
  TRIDENT_CUDA_LAUNCH_BLOCKING="${LAUNCH_BLOCKING:-0}" bg timeout "$t" "$2" --gtest_filter="$3" --gtest_brief=0 > "$log" 2>&1
  local rc=$?
  [[ $rc == 124 ]] && echo "$1: timed out after $t s" | tee -a "$log"
  local passed skipped failed
  passed=$(grep -c '^\[       OK \]' "$log")
  skipped=$(grep -c '^\[  SKIPPED \].*(' "$log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$log")
  grep -A12 '^\[ RUN' "$log" | grep -B3 -A8 'Failure' | head -60
  row "$1" "$([[ $rc == 0 && $failed == 0 ]] && echo ok || echo FAIL)" "passed $passed, failed $failed, skipped $skipped (rc $rc)"
}
# The NCCL init-timeout test relies on ncclCommAbort interrupting an init whose second rank never
# comes; if it does not, that test hangs: it runs on its own, after the rest, with a short limit.
NCCL_INIT_TIMEOUT_TEST='NcclOneRank.InitTimesOutWhenARankNeverJoins'
if want tests; then
  run_suite cuda_tests "$BUILD_DIR/tests/cuda_tests" "$FILTER:-$NCCL_INIT_TIMEOUT_TEST"
  if [[ "$FILTER" == '*' || "$FILTER" == *NcclOneRank* ]]; then
    run_suite nccl_init_timeout "$BUILD_DIR/tests/cuda_tests" "$NCCL_INIT_TIMEOUT_TEST" 60
  fi
  if [[ "$FILTER" == '*' || "$FILTER" == *CachingAllocator* ]]; then
    run_suite caching_allocator "$BUILD_DIR/tests/core_tests" 'CachingAllocator*'
  fi
fi
# When something failed: once more with every launch synchronized, so that an asynchronous error
# is pinned to its launch (BLOCKING_RERUN=1 forces it, 0 skips it). The NCCL init-timeout row
# alone does not trigger it (a rerun would not tell more about an init that never returned).
failed_rows=$(printf '%s\n' "${ROWS[@]}" | grep -v '^nccl_init_timeout ' | grep -c ' FAIL ' || true)
if [[ "${BLOCKING_RERUN:-auto}" == 1 || ( "${BLOCKING_RERUN:-auto}" == auto && "$failed_rows" != 0 ) ]]; then
  LAUNCH_BLOCKING=1 run_suite cuda_tests_blocking "$BUILD_DIR/tests/cuda_tests" "$FILTER:-$NCCL_INIT_TIMEOUT_TEST"
fi

echo "== training programs on the GPU (scripts/app-cuda-check.sh)"
if ! want apps; then
  echo "(not in STEPS)"
elif [[ -z "$APP_TARGETS" ]]; then
  row app_cuda FAIL "train_gpt2 not configured: data/ off (run scripts/prepare-carry.sh, carry .carry)"
elif T=$(tmo 300) && (( T == 0 )); then
  skip app_cuda
else
  A0=$(date +%s)
  # The script stops starting runs 15 s before APP_DEADLINE and writes its rows; the timeout
  # (10 s later) is only the backstop.
  APP_DEADLINE=$(( A0 + T - 10 )) bg timeout "$T" scripts/app-cuda-check.sh "$BUILD_DIR" "$OUT"
  rc=$?
  if [[ -s "$OUT/app_cuda.rows" ]]; then
    while IFS='|' read -r name status detail; do row "$name" "$status" "$detail"; done < "$OUT/app_cuda.rows"
  fi
  if [[ $rc == 124 || ! -s "$OUT/app_cuda.rows" ]]; then
    row app_cuda FAIL "app-cuda-check.sh rc $rc$([[ $rc == 124 ]] && echo ", timed out after $T s"): see app_cuda.log"
  fi
  echo "($(( $(date +%s) - A0 )) s)"
fi

echo "== benchmarks (PyTorch on the same GPU alongside)"
if ! want ops-bench && ! want attention-bench && ! want gpt2-bench; then
  echo "(not in STEPS)"
else
  if want ops-bench && [[ -x "$BUILD_DIR/benchmarks/cuda_ops_bench" ]] && T=$(tmo 240) && (( T == 0 )); then
    skip cuda_ops_bench
  elif want ops-bench && [[ -x "$BUILD_DIR/benchmarks/cuda_ops_bench" ]]; then
    # The cases measured are compared even when some failed (cuda_ops_bench goes on after a case
    # that throws, exit status 1); the PyTorch twin runs under the budget too (bg: a signal stops it).
    bg timeout "$T" "$BUILD_DIR/benchmarks/cuda_ops_bench" > "$OUT/cuda_ops_bench.jsonl" 2> "$OUT/bench.err"
    rc=$?
    prc="not run"
    if [[ -s "$OUT/cuda_ops_bench.jsonl" ]] && T=$(tmo 120) && (( T > 0 )); then
      bg timeout "$T" python3 benchmarks/cuda_ops_torch.py "$OUT/cuda_ops_bench.jsonl" > "$OUT/bench.txt" 2>> "$OUT/bench.err"
      prc=$?
    fi
    if [[ $rc == 0 && $prc == 0 ]]; then
      cat "$OUT/bench.txt"; row cuda_ops_bench ok "bench.txt ($(grep -c . "$OUT/cuda_ops_bench.jsonl") cases)"
    else
      if [[ $prc == 0 ]]; then cat "$OUT/bench.txt"; else cat "$OUT/cuda_ops_bench.jsonl"; fi
      tail -20 "$OUT/bench.err"
      row cuda_ops_bench FAIL "rc $rc$([[ $rc == 124 ]] && echo ", timed out"), torch rc $prc: see bench.err"
    fi
  fi
  if want attention-bench && [[ -x "$BUILD_DIR/benchmarks/attention_cuda_bench" ]]; then
    # T = 1024 (batch 8) and T = 4096 (batch 2): Trident's tensor-core and FMA kernels, then
    # PyTorch's fused attention on the same shapes. A failed PyTorch run fails the row too (the
    # comparison is the point), and the row's note says which sdpa backend PyTorch ran.
    ATT_OK=1 TORCH_ATT_OK=1
    for shape in "--seq 1024 --batch 8" "--seq 4096 --batch 2"; do
      T=$(tmo 120)
      (( T > 0 )) || { ATT_OK=2; break; }
      # shellcheck disable=SC2086
      bg timeout "$T" "$BUILD_DIR/benchmarks/attention_cuda_bench" $shape >> "$OUT/bench.txt" 2>> "$OUT/bench.err" || ATT_OK=0
      T=$(tmo 120)
      (( T > 0 )) || { ATT_OK=2; break; }
      # shellcheck disable=SC2086
      bg timeout "$T" python3 benchmarks/attention_cuda_torch.py $shape >> "$OUT/bench.txt" 2>> "$OUT/bench.err" || TORCH_ATT_OK=0
    done
    SDPA=$(grep -a '^sdpa backends:' "$OUT/bench.txt" | sed 's/^sdpa backends: //' | paste -sd ';' -)
    if [[ $ATT_OK == 2 ]]; then
      skip attention_cuda_bench
    elif [[ $ATT_OK == 1 && $TORCH_ATT_OK == 1 ]]; then
      row attention_cuda_bench ok "bench.txt; PyTorch sdpa fwd/fwd+bwd: ${SDPA:-not reported}"
      grep -A8 "scaled_dot_product_attention" "$OUT/bench.txt" | tail -24
    else
      row attention_cuda_bench FAIL "$([[ $ATT_OK == 0 ]] && echo "Trident failed; ")$([[ $TORCH_ATT_OK == 0 ]] && echo "PyTorch sdpa failed (${SDPA:-no backend reported}); ")see bench.err"
    fi
  fi

  if want gpt2-bench && [[ -x "$BUILD_DIR/benchmarks/gpt2_cuda_bench" ]] && T=$(tmo 180) && (( T == 0 )); then
    skip gpt2_cuda_bench
  elif want gpt2-bench && [[ -x "$BUILD_DIR/benchmarks/gpt2_cuda_bench" ]]; then
    # GPT-2 124M, bf16, context 1024, batch 8: Trident, then the same model in PyTorch (each with
    # half of what is left, at most 180 s). The twin divides by the peak Trident's run used (its
    # "peak_tflops": TRIDENT_PEAK_TFLOPS, else apps/mfu.cpp's table; NOTE [MFU]).
    T=$(( $(tmo 360) / 2 ))
    # Three more steps under the op profiler (NOTE [Op profiler]): where the step's device time
    # goes, appended to bench.txt.
    if (( T > 0 )) && bg timeout "$T" "$BUILD_DIR/benchmarks/gpt2_cuda_bench" 8 10 124M --profile "$OUT/gpt2_profile.txt" \
         > "$OUT/gpt2.jsonl" 2>> "$OUT/bench.err" &&
       PEAK=$(python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).readline()); print(r.get("peak_tflops") or 0)' "$OUT/gpt2.jsonl" 2>> "$OUT/bench.err") &&
       bg timeout "$T" python3 benchmarks/gpt2_cuda_torch.py 8 10 --peak-tflops "$PEAK" >> "$OUT/gpt2.jsonl" 2>> "$OUT/bench.err"; then
      # The row is ok only when the table could be made (two JSON objects, finite losses).
      if python3 - "$OUT/gpt2.jsonl" <<'PY' | tee -a "$OUT/bench.txt"; then
import json, math, sys
tri, tor = (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))
print("GPT-2 124M training, bf16, batch 8 x 1024 tokens (median step)")
print(f"MFU peak: {tri.get('peak', 'not reported')}")
print(f"{'':10}{'tokens/s':>12}{'step ms':>10}{'MFU':>8}{'loss':>8}")
for name, r in (("Trident", tri), ("PyTorch", tor)):
    mfu = f"{100 * r['mfu']:7.1f}%" if r.get("mfu") is not None else "     n/a"
    print(f"{name:10}{r['tokens_per_s']:12.0f}{r['step_ms']:10.1f}{mfu}{r['last_loss']:8.3f}")
print(f"ratio (Trident / PyTorch tokens/s): {tri['tokens_per_s'] / tor['tokens_per_s']:.2f}")
sys.exit(0 if all(math.isfinite(r["last_loss"]) for r in (tri, tor)) else 1)
PY
        [[ -s "$OUT/gpt2_profile.txt" ]] && tee -a "$OUT/bench.txt" < "$OUT/gpt2_profile.txt"
        row gpt2_cuda_bench ok "bench.txt; PyTorch sdpa: $(python3 -c 'import json, sys; r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]; print(r.get("sdpa_backend", "not reported"))' "$OUT/gpt2.jsonl" 2>/dev/null)"
      else
        row gpt2_cuda_bench FAIL "gpt2.jsonl: not two results, or a loss not finite"
      fi
    else
      row gpt2_cuda_bench FAIL "see bench.err"
    fi
  fi
fi

summary
! grep -qE ' (FAIL|SKIP) ' "$OUT/summary.txt"
