#!/usr/bin/env bash
# The GPU checks a change to judging or timing owes, in one device call, most important first, each
# under its own time limit so that one slow step cannot starve the rest; everything lands in $OUT.
#
#   bash bench/gpu_checks.sh [STEP ...]     steps: tests adversarial fidelity backendbench level1 runner_start
#                                            multigpu adversarial_gpu1 level1_one (two or more GPUs: see below)
#                                            precision level1_bf16 compile_bf16 profile (issue 31: fp16/bf16 and profiles)
#                                            loaded (issue 30: honest kernels timed while 12 CUDA builds run)
#                                            builds (issue 34: cold build times, plain / pch / light include / both)
#                                            build_paths (issue 34: one fast build's ninja targets)
#                                            batch (issue 34: the fast-build batch; AB_SRC for a second tree), batch_plain
#                                            mps_spread (issue 30: one kernel's time job after job, MPS on/off, sandboxed or not)
#                                            selfcheck (issue 30: smoke ops against themselves on SERVICES fresh services in turn)
#                                            faults storm (issue 50: the GPU fault tests; the fault storm, STORM_S of storm)
#                                            doctor doctor_quick doctor_tests (issue 54: `kernel-service doctor`, its GPU tests)
#                                            bb_multi (issue 52: BackendBench on two GPUs); corpus (issue 51: CORPUS=h100_xsm|h100)
#                                            lazy_probe (issue 51: the builds the compile worker's lazy runs reach; TASKS="L1_34 ...")
#                                            bb_tests (BackendBench's GPU tests and its reading cheats: what OWN_BASELINE=1 owes)
# Knobs: TESTS_K (tests: pytest's -k), BATCH_N, AB_SRC, BUILD_OPTIONS, BUILD_PARALLEL (builds of one option at once), COMPILE_ARGS (e.g. --task-ids-from F),
# MPS=auto|on|off (every step: the bench scripts' --mps, KS_MPS for the tests and the runners' embedded services;
# auto, the service's default, unless set), STORM_S, BB_ARGS, SERVICES, OPS and CALL=overload (selfcheck),
# OWN_BASELINE=auto|on|off (KS_OWN_BASELINE: a kernel read against the reference timed in its own process before
# it loads; auto, the default: under MPS; on: BackendBench's op on any GPU path too).
#
# With no STEP: tests adversarial fidelity backendbench level1. Each step's command and what it measures are
# in BENCHMARKS.md (the BackendBench step includes the timing self-check, each smoke op against itself).
#
# On the lent H100: carry the wheels (.whl: ../shared/device/wheels.sh, plus expecttest for OpInfo) and
# the KernelBench problems (.gpudata/problems.jsonl, for level1). BB_ARGS: more flags for the backendbench
# step (`--runs 3 --trials 20 20 20`: three warm suites, three self-check rounds). One device call runs at most 10 minutes:
# `tests adversarial fidelity backendbench` fit one as a rule (~470 s on the H100; their limits add to 1020 s; under MPS a
# call under 10 us is timed in eight process pairs, so the tests and adversarial steps take longer), `level1` another (560 s: the whole
# 100-problem sweep, whose target is 5 minutes, with room to finish).
# On a host of two or more GPUs: `multigpu` (jobs on every GPU at once), `adversarial_gpu1` (the adversarial
# run on the second GPU alone), `level1` (every GPU) and `level1_one` (the same sweep on the first GPU alone).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:$PWD/services/kernel-service/src:$PWD/runners/backendbench-runner:$PWD/runners/kernelbench-runner:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
MPS=${MPS:-${KS_MPS:-auto}}
export KS_MPS=$MPS
[ -n "${OWN_BASELINE:-}" ] && export KS_OWN_BASELINE=$OWN_BASELINE
echo "KS_MPS=$KS_MPS KS_OWN_BASELINE=${KS_OWN_BASELINE:-auto}"
INDEX=bench/results/opinfo_index_h100_torch2.11.json  # skips a ~44 s rebuild when the torch matches
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests adversarial fidelity backendbench level1)

h100_index() {  # the opinfo index built on the H100 for this torch, if it matches
  python3 -c "import torch, json, sys; sys.exit(json.load(open('$INDEX')).get('torch') != torch.__version__)" \
    && cp "$INDEX" services/kernel-service/src/kernel_service/backendbench/data/opinfo_ops.json
}

step() {  # name, seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date +%T), at most ${limit}s)"
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  echo "   exit $? ($(date +%T))"
  tail -n 12 "$OUT/$name.txt" | cut -c1-300
}

for s in "${steps[@]}"; do
  case $s in
    tests) step tests 400 python3 -m pytest -m gpu tests/kernel_service/test_gpu.py tests/backendbench/test_gpu_backendbench.py tests/adversarial/test_adv_reading_calls_gpu.py ${TESTS_K:+-k "$TESTS_K"} -q -p no:cacheprovider -rA ;;
    bb_tests) step bb_tests 300 python3 -m pytest -m gpu tests/backendbench/test_gpu_backendbench.py \
      tests/adversarial/test_adv_reading_calls_gpu.py -k "backendbench" -q -p no:cacheprovider -rA ;;
    faults) step faults 150 python3 -m pytest -m gpu tests/kernel_service/test_gpu_faults.py -q -p no:cacheprovider -rA ;;
    storm) step storm 400 python3 bench/fault_storm.py --problems .gpudata/problems.jsonl --mps $MPS --budget-s ${STORM_S:-200} \
      --out "$OUT/storm.json" ;;
    doctor_quick) step doctor_quick 150 python3 -m kernel_service.cli doctor --quick --mps $MPS --out "$OUT/doctor_quick.json" ;;
    doctor) step doctor 330 python3 -m kernel_service.cli doctor --mps $MPS --out "$OUT/doctor.json" ;;
    doctor_tests) step doctor_tests 300 python3 -m pytest -m gpu tests/kernel_service/test_doctor.py -q -p no:cacheprovider -rA ;;
    bb_multi) step bb_multi 300 python3 -m pytest -m gpu tests/backendbench/test_gpu_backendbench_multi.py -q -p no:cacheprovider -rA ;;
    corpus)  # issue 51: CORPUS=h100_xsm|h100 (.gpudata/corpus/, carried; GPL-3: never committed) or
      # CORPUS=probe CORPUS_FILE=bench/corpus_probe.jsonl (ours: load_inline against PyTorch), resumed from
      # .gpudata/runs/<run id>.tar.gz when carried back; the run directory travels out as $OUT/<run id>.tar.gz
      # TASKS="L1_34 ...": only those (a run of its own, corpus-<CORPUS>-subset)
      # CORPUS_ARGS: more flags of bench/corpus.py (CUDA-L1's judge's rules: --tolerance 0.01 --module-mode eval),
      # CORPUS_TAG: a name for such a run (its own run id)
      rid=corpus-${CORPUS:-h100_xsm}${TASKS:+-subset}${CORPUS_TAG:+-$CORPUS_TAG}; mkdir -p /tmp/corpus-runs
      [ -f .gpudata/runs/$rid.tar.gz ] && tar -xzf .gpudata/runs/$rid.tar.gz -C /tmp/corpus-runs
      step corpus 580 python3 bench/corpus.py --solutions ${CORPUS_FILE:-.gpudata/corpus/${CORPUS:-h100_xsm}.json} \
        --corpus-name "${CORPUS_NAME:-${CORPUS:-h100_xsm}}" --output-dir /tmp/corpus-runs --run-id $rid \
        --budget-s ${CORPUS_BUDGET_S:-520} --mps $MPS --out "$OUT/$rid.json" --tar "$OUT/$rid.tar.gz" ${TASKS:+--tasks $TASKS} \
        ${CORPUS_ARGS:-} ;;
    lazy_probe) step lazy_probe 200 python3 bench/lazy_builds_probe.py --solutions .gpudata/corpus/${CORPUS:-h100_xsm}.json \
      --tasks ${TASKS:-} ;;
    multigpu) step multigpu 240 python3 -m pytest -m gpu tests/kernel_service/test_gpu_multi.py -q -p no:cacheprovider ;;
    adversarial_gpu1) step adversarial_gpu1 200 python3 bench/adversarial/run_gpu.py --gpus 1 --mps $MPS --out "$OUT/adversarial_gpu1.json" ;;
    adversarial) step adversarial 200 python3 bench/adversarial/run_gpu.py --mps $MPS --out "$OUT/adversarial.json" ;;
    loaded) step loaded 420 python3 bench/loaded_fidelity.py --builds 12 --storm-s ${STORM_S:-240} --mps $MPS --out "$OUT/loaded.json" ;;
    fidelity) step fidelity 120 python3 bench/timing_fidelity.py --calls 100 --mps $MPS --jobs 2 --out "$OUT/fidelity.json" ;;
    backendbench)
      h100_index
      step backendbench 300 python3 bench/backendbench_suite_speed.py --index auto --runs 2 --mps $MPS --out "$OUT/backendbench.json" ${BB_ARGS:-} ;;
    runner_start)  # what a runner process costs before its run loop: imports, listing the opinfo suite
      step runner_start 60 bash -c 'TIMEFORMAT="list-tasks %R s"; for i in 1 2 3; do time python3 -m backendbench_runner.cli list-tasks --suite opinfo >/dev/null; done; python3 -X importtime -c "import backendbench_runner.cli" 2>&1 | sort -t"|" -k2 -n | tail -25' ;;
    level1) step level1 560 python3 bench/kernelbench_gpu.py --model reference --dataset-file .gpudata/problems.jsonl \
      --level 1 --output-dir /tmp/kb --run-id l1 --budget-s 500 --out "$OUT/level1.json" ;;
    level1_bf16) step level1_bf16 560 python3 bench/kernelbench_gpu.py --model reference --precision bf16 \
      --dataset-file .gpudata/problems.jsonl --level 1 --output-dir /tmp/kbbf --run-id l1bf --budget-s 500 \
      --out "$OUT/level1_bf16.json" ;;
    compile_bf16) step compile_bf16 560 python3 bench/kernelbench_gpu.py --model torch-compile --precision bf16 \
      --dataset-file .gpudata/problems.jsonl --level 1 --output-dir /tmp/kbcbf --run-id l1cbf --budget-s 500 ${COMPILE_ARGS:-} \
      --out "$OUT/compile_bf16.json" ;;
    profile)  # one CUDA submission's answer with its profile (kernel names, GPU time, ncu or why not)
      python3 -c "import sys; sys.path.insert(0, 'tests/kernel_service'); import ks_gpu_sources as G
open('/tmp/ks_ref.py', 'w').write(G.REF_FUSED); open('/tmp/ks_sol.py', 'w').write(G.CUDA_OK)"
      step profile 240 python3 -m kernel_service.cli eval /tmp/ks_ref.py /tmp/ks_sol.py --backend cuda --profile --json ;;
    builds)  # cold load_inline build times of the example CUDA solutions under each build option
      step builds 560 python3 bench/build_speed.py --examples --options ${BUILD_OPTIONS:-plain,pch,light,both} --parallel ${BUILD_PARALLEL:-1} \
        --out "$OUT/builds.json" ;;
    selfcheck)  # a side's mode for real calls lasts its service's life (BENCHMARKS.md, nineteenth session): several services
      for k in $(seq "${SERVICES:-3}"); do
        step "selfcheck_$k" 150 python3 bench/selfcheck_probe.py --ops "${OPS:-softmax,mm,add}" --requests 2 --mps "$MPS" --call "${CALL:-packet}" \
          --out "$OUT/selfcheck_$k.json"
      done ;;
    mps_spread) step mps_spread 420 python3 bench/mps_spread_probe.py --jobs 5 --out "$OUT/mps_spread.json" ;;
    batch)  # issue 34: distinct CUDA solutions at once with fast builds; AB_SRC=DIR runs the same batch again on
      # another tree's service code, on the same host (`git archive REV src services/kernel-service/src | tar -x -C DIR`,
      # DIR git-ignored and carried: .ab/ is). Two batches of BATCH_N=25 fit one device call.
      step batch 560 python3 bench/throughput.py --backend cuda --n ${BATCH_N:-50} --baseline-n 0 --resubmit 1 \
        --fast-builds --out "$OUT/batch.json"
      if [ -n "${AB_SRC:-}" ]; then
        step batch_ab 560 env PYTHONPATH="$AB_SRC/src:$AB_SRC/services/kernel-service/src:$PYTHONPATH" python3 \
          bench/throughput.py --backend cuda --n ${BATCH_N:-50} --baseline-n 0 --resubmit 1 --fast-builds --out "$OUT/batch_ab.json"
      fi ;;
    batch_plain)  # the same batch with plain builds (no PCH, no light include): the baseline beside `batch`
      step batch_plain 560 python3 bench/throughput.py --backend cuda --n ${BATCH_N:-50} --baseline-n 0 --resubmit 1 \
        --out "$OUT/batch_plain.json" ;;
    build_paths) step build_paths 240 python3 bench/build_paths.py --example add --out "$OUT/build_paths.json" ;;
    precision) step precision 300 python3 -m pytest -m gpu tests/kernel_service/test_gpu_precision.py -q -p no:cacheprovider ;;
    level1_one) step level1_one 560 env CUDA_VISIBLE_DEVICES=0 python3 bench/kernelbench_gpu.py --model reference \
      --dataset-file .gpudata/problems.jsonl --level 1 --output-dir /tmp/kb1 --run-id l1one --budget-s 500 \
      --out "$OUT/level1_one.json" ;;
    *) echo "unknown step $s (see the steps at the top)"; exit 2 ;;
  esac
done
