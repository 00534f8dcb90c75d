#!/usr/bin/env bash
# Every GPU figure of BENCHMARKS.md comes from this script, run on a lent GPU machine from the
# repository root:  bash benchmarks/gpu_session.sh PHASE...   (phases run in the order given)
#
#   prepare  (on the development machine, not the device) downloads the wheels setup installs
#            into .whl/ and copies the C. diphtheriae genome into .gpu/; carry both with the call
#            (PREPARE_LM_MULTI=1: the genomes lm_multi reads, .gpu/genomes (not the test genera), and
#            biopython, pytest-xdist, execnet and threadpoolctl in .whl-lm/: setup installs from WHEEL_DIR,
#            default .whl). It adds what is missing, and removes only test genera an earlier prepare copied
#   setup    what the machine has (nvidia-smi, versions); installs the wheels in .whl/ that the
#            image lacks (biopython, pysam, parasail, ott-jax, jaxopt, fair-esm) into /tmp/site
#            and sinkalign itself (editable, no dependencies)
#   check    `sinkalign validate kernels --backend triton` and `--backend pallas` compiled natively,
#            beside the tests marked gpu (gpu_tests; PYTEST_WORKERS xdist workers, default 4; PYTEST_K
#            selects, e.g. "not Cached" first and "Cached" (the score caches' native suites) in a later
#            call; PYTEST_BUDGET s, default 300): nothing here is timed, so the three share the GPU
#   validate the validations alone: VALIDATE_BACKENDS (default "triton pallas"), VALIDATE_BUDGET s each, VALIDATE_CACHE
#            the --cache-scores values (default auto: the kernels' default; "auto off" also checks the recomputing sweeps)
#   tests_and_lm  the tests marked gpu while the lm phase runs beside them (neither is timed)
#   check_and_lm_multi  the check phase beside the lm_multi phase (only lm_multi's rate is measured)
#   lm_weights  the latest lm_multi checkpoint's weights (in 15 MiB pieces) and config into $OUT, to evaluate elsewhere
#            (session 10: a machine that went back between two calls took LM_RESUME's checkpoint with it; these survive)
#   lm_run   the lm_multi run itself (latest checkpoint with its optimizer state, metrics, steps) into $OUT in 15 MiB
#            pieces, to continue in a later session: carry their folder and set LM_RESUME_RUN to it (an lm_multi
#            of the default's size, LM_D_MODEL=128 LM_LAYERS=4 LM_HEADS=4 LM_SEQ_LEN=256, returns 8.5 MB). The
#            run does not fit one carry beside the genomes (tree 21.6 + genomes 38.3 + run 8.5 MB > 64 MiB), so
#            the continuing session carries .whl-lm and .gpu/genomes in a first call that runs setup and copies
#            the genomes to /tmp/genomes, and the run in a second call at once (a warm machine keeps /tmp):
#            GENOMES=/tmp/genomes LM_RESUME_RUN=<its folder> ... lm_multi lm_run
#   check_and_lm  both validations (pallas with --long) and the tests marked gpu, beside the lm phase
#   kernels  benchmarks/sinkhorn_kernels.py: L = 2k..64k (KERNEL_LENGTHS), W = 1024 and 256
#            (KERNEL_BANDS), float32 (+ float32 with tf32x3 dots and bfloat16 for the kernels),
#            roofline of the machine's GPU; KERNEL_TAG names the output files; KERNEL_METHODS
#            its --methods (default all: pallas_cached and triton_cached, the kernels with cache_scores=True, too)
#   tune     benchmarks/kernel_tune.py: fwd+bwd time of each kernel family per launch (tile size, warps,
#            stages) at L = 16,384, W = 1,024 for float32 (ieee, tf32x3) and bfloat16 (TUNE_ARGS)
#   aligner  benchmarks/aligner_gpu.py: batched throughput at 300 and 3,000 residues against
#            parasail and the numpy engine, training steps/s against the CPU (ALIGNER_ARGS; e.g.
#            "--models learned --batch-sizes 256 --processes 14 --jax-dense --skip training": the host's
#            share on worker processes as well as threads; at 3,000 the jax engine with every pair dense too)
#   host     benchmarks/host_parallel.py on the machine's CPUs (no GPU): `sinkalign align` of HOST_PAIRS
#            (default 2048) pairs of 300 on every usable CPU as threads and as processes, with BLAS
#            limited to one thread (threadpoolctl) and unlimited, as an install without it runs
#            (HOST_ARGS: more of its options). Run it alone: it times the CPUs
#   lm       a GOAT genome LM trained on the GPU for LM_MINUTES (default 5) on the first 90% of
#            the C. diphtheriae chromosome, then `sinkalign lm eval` of it and of the shipped
#            CPU model on the same held-out 10%, same run
#   lm_multi the shipped model's recipe (35 genomes, whole genera held out, genome-balanced, both
#            strands, input_kmer=4) scaled up (LM_D_MODEL 256, LM_LAYERS 6, LM_SEQ_LEN 512, batch
#            LM_BATCH 64) and trained for LM_MINUTES on the GPU, then benchmarks/lm_multi_genome.py
#            on the validation genera (LM_EVAL_BASES held-out bases a record, context 256) for it
#            and the shipped CPU model in one run. Reads $GENOMES (default .gpu/genomes: carry a
#            copy of ../shared/data/genomes, 41 MB). LM_DEVICE=cpu with small settings runs the
#            phase on a CPU (session 22: LM_STEPS=5 LM_D_MODEL=32 LM_LAYERS=1 LM_HEADS=2 LM_SEQ_LEN=64
#            LM_BATCH=4 LM_EVAL_BASES=200 GENOMES=../shared/data/genomes: 43 s, 17 of them training
#            (reading the genomes) and 26 the evaluation; the final held-out score of the run is
#            bounded by --eval-max-bases 32768, as for the shipped model: without it, 1.5 min more).
#            Longer than one call (600 s): the first call with LM_MINUTES for its share of the whole
#            run's steps (LM_STEPS, or probed for LM_TOTAL_MINUTES) and LM_EVAL=0, the next with LM_RESUME=1
#            (continues that run, its steps kept in $R/lm_multi_steps, for LM_MINUTES more) at once: the
#            checkpoint stays on the machine only while it is held (it goes back after idle_release_s);
#            LM_RESUME_RUN=DIR continues the run that lm_run returned (DIR holds its pieces) on any machine
#
# Results (logs and JSON) go to /tmp/gpu_results/r, packed into $OUT/results.tar.gz (the device
# tool's folder; default ./gpu_out) at the end of each phase, checkpoints left out. Data the phases read: $GENOME (default
# .gpu/GCF_001457455.1_NCTC11397_genomic.fna.gz, a copy of ../shared/data/genomes/...).
set -uo pipefail
OUT=${OUT:-gpu_out}
R=/tmp/gpu_results/r  # everything comes back as $OUT/results.tar.gz (the device tool returns few files)
mkdir -p "$R" "$OUT"
GENOME=${GENOME:-.gpu/GCF_001457455.1_NCTC11397_genomic.fna.gz}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export SINKALIGN_JAX_CACHE=/tmp/jax_cache
PY=python3

# budget N: N seconds, or less so as to end DEADLINE seconds after the script started (less 60 s)
budget() { local left=$(( ${DEADLINE:-100000} - SECONDS - 60 )); echo $(( left < $1 ? (left > 30 ? left : 30) : $1 )); }
pack() { tar -czf "$OUT/results.tar.gz" --exclude=checkpoints -C "$(dirname "$R")" r; }
stamp() { echo "=== $(date -u +%H:%M:%S) $*"; }

prepare() {  # on the development machine, before the first device call: what setup installs and the data
  # Into git-ignored folders, adding what is missing and removing nothing. The device tool carries at most
  # 64 MiB with the working tree (~22 MB): the wheels (19 MB) and lm_multi's genomes (41 MB) do not fit
  # together, so PREPARE_LM_MULTI=1 prepares an lm_multi call (check_and_lm_multi too): the genomes it reads
  # in .gpu/genomes and four small wheels in .whl-lm/. Carry only what the call reads: .whl and .gpu/GCF_001457455.1_NCTC11397_genomic.fna.gz,
  # or .whl-lm and .gpu/genomes with WHEEL_DIR=.whl-lm (printed below).
  local wheels="biopython==1.88 pysam==0.24.1 fair-esm==2.0.0 parasail==1.3.4 ott-jax==0.6.0 jaxopt==0.8.5
    pytest-xdist==3.8.0 execnet==2.1.2 threadpoolctl==3.8.0" dir=.whl
  [ "${PREPARE_LM_MULTI:-0}" = 1 ] && wheels="biopython==1.88 pytest-xdist==3.8.0 execnet==2.1.2 threadpoolctl==3.8.0" dir=.whl-lm
  stamp "prepare: wheels for the device image (cp312, manylinux) into $dir/ ($wheels), genomes into .gpu/"
  mkdir -p "$dir" .gpu
  $PY -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d "$dir" $wheels || echo "wheel download failed"
  if [ "${PREPARE_LM_MULTI:-0}" = 1 ]; then
    # the genomes lm_multi reads: not the test genera (lm train skips them, and they would not fit with the
    # wheels: tree ~22 MiB + all genomes 41 MiB + wheels 3.3 MiB > 64) nor MIIJ01000039 (not read)
    mkdir -p .gpu/genomes/multi && cp -n ../shared/data/genomes/GCF_001457455.1_NCTC11397_genomic.fna.gz .gpu/genomes/ \
      && $PY - <<'PYEOF' || echo "genome copy failed"
import json, shutil
from pathlib import Path
split = json.loads(Path("data_manifests/genomes_multi_split.json").read_text())["genomes"]
src, dst = Path("../shared/data/genomes/multi"), Path(".gpu/genomes/multi")
for f in sorted(src.iterdir()):
    if split.get(f.name, {}).get("split") == "test":
        (dst / f.name).unlink(missing_ok=True)  # one an earlier prepare copied
    elif not (dst / f.name).exists():
        shutil.copy(f, dst / f.name)
PYEOF
  else
    cp -n ../shared/data/genomes/GCF_001457455.1_NCTC11397_genomic.fna.gz .gpu/ || echo "genome copy failed"
  fi
  grep -qs '^/.whl-lm/$' .git/info/exclude || printf '/.whl/\n/.whl-lm/\n/.gpu/\n/gpu_out/\n' >> .git/info/exclude
  du -sh "$dir" .gpu/*
  if [ "${PREPARE_LM_MULTI:-0}" = 1 ]; then
    echo "carry: .whl-lm .gpu/genomes (WHEEL_DIR=.whl-lm)"
  else
    echo "carry: .whl .gpu/GCF_001457455.1_NCTC11397_genomic.fna.gz"
  fi
  echo "working tree that travels: $(git ls-files -z --cached --others --exclude-standard | du -ch --files0-from=- | tail -1)"
}

setup() {
  stamp setup
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$R/gpu.txt"
  local wheels=${WHEEL_DIR:-.whl}
  if ls "$wheels"/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl \
      || echo "wheel install failed"
  fi
  $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
  $PY - <<'EOF' | tee "$R/versions.txt"
import importlib, platform
print("python", platform.python_version())
for m in ["jax", "jaxlib", "torch", "triton", "numpy", "scipy", "threadpoolctl", "optax", "Bio", "pysam", "parasail",
          "ott", "sinkalign"]:
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as exc:
        print(m, "MISSING", type(exc).__name__, exc)
import os, jax, torch
print("cpus usable", len(os.sched_getaffinity(0)), "of", os.cpu_count())
try:  # the aligner's threads and worker processes limit BLAS to one thread through threadpoolctl
    from threadpoolctl import threadpool_info
    print("blas", [(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"])
except ImportError as exc:
    print("blas threads cannot be limited:", exc)
print("jax devices", jax.devices())
print("torch cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
EOF
}
command -v sinkalign >/dev/null || sinkalign() { $PY -m sinkalign.cli.main "$@"; }

check() {
  validate >"$R/validate_phase.log" 2>&1 &
  local pid=$!
  gpu_tests
  wait $pid
  cat "$R/validate_phase.log"
  pack
}

validate() {  # the native validations alone (VALIDATE_BACKENDS, default both; VALIDATE_BUDGET s each;
  # VALIDATE_CACHE: the --cache-scores values, default "auto", the kernels' default; "auto off" also the recomputing path)
  stamp "validate kernels (native): ${VALIDATE_BACKENDS:-triton pallas}, score cache ${VALIDATE_CACHE:-auto}"
  for b in ${VALIDATE_BACKENDS:-triton pallas}; do
    for c in ${VALIDATE_CACHE:-auto}; do
      local tag=$b
      [ "$c" = auto ] || tag=${b}_cache_$c
      timeout "$(budget "${VALIDATE_BUDGET:-170}")" sinkalign validate kernels --backend "$b" --cache-scores "$c" --overwrite \
        --json "$R/validate_$tag.json" 2>&1 | tail -40 | tee "$R/validate_$tag.log"
    done
  done
  pack
}

gpu_tests() {
  stamp "pytest -m gpu"
  local workers=()
  $PY -c "import xdist" 2>/dev/null && workers=(-n "${PYTEST_WORKERS:-4}")
  timeout "$(budget "${PYTEST_BUDGET:-300}")" $PY -m pytest -m gpu -k "${PYTEST_K:-}" "${workers[@]}" -q -p no:cacheprovider -rfEs --tb=short --timeout 300 --continue-on-collection-errors tests \
    >"$R/pytest_gpu.log" 2>&1
  grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed|^E  " "$R/pytest_gpu.log" | tail -40
  pack
}

check_and_lm() {  # check (both validations, then the gpu tests) beside the lm phase: nothing here is timed
  lm >"$R/lm_phase.log" 2>&1 &
  local pid=$!
  stamp "check_and_lm: validate kernels (native) beside the gpu tests and the lm run"
  ( timeout "$(budget 240)" sinkalign validate kernels --backend triton --overwrite --json "$R/validate_triton.json" >"$R/validate_triton.log" 2>&1
    timeout "$(budget 240)" sinkalign validate kernels --backend pallas --long --overwrite --json "$R/validate_pallas.json" >"$R/validate_pallas.log" 2>&1 ) &
  local vpid=$!
  gpu_tests
  wait $vpid
  for b in triton pallas; do echo "--- validate $b"; tail -25 "$R/validate_$b.log"; done
  wait $pid
  tail -30 "$R/lm_phase.log"
  pack
}

check_and_lm_multi() {  # check (both validations, then the gpu tests) beside lm_multi; nothing here is timed but
  # lm_multi's rate (its probe measures it with the checks running, so its schedule ends within LM_TOTAL_MINUTES)
  ( OUT=/tmp/check_out; mkdir -p "$OUT"; check ) >"$R/check_phase.log" 2>&1 &
  local pid=$!
  lm_multi
  wait $pid
  grep -vE "^ +O +dq" "$R/check_phase.log" | tail -45
  pack
}

lm_weights() {  # the latest lm_multi checkpoint's weights and config into $OUT, the weights in pieces of 15 MiB (the
  # device tool returns files of at most 16 MiB): cat lm_multi_model.safetensors.part* > model.safetensors
  local dir
  dir=$($PY -c "import sys;from sinkalign.lm.checkpoints import find_latest_checkpoint as f;d=f(sys.argv[1]);print(d or '')" \
    "$R/lm_multi")
  [ -n "$dir" ] || { echo "no lm_multi checkpoint"; return; }
  split -b 15M -d "$dir/model.safetensors" "$OUT/lm_multi_model.safetensors.part"
  cp "$dir/config.json" "$OUT/lm_multi_config.json"
  (cd "$dir" && sha256sum model.safetensors) | tee "$OUT/lm_multi_model.sha256"
  ls -l "$OUT"
}

lm_run() {  # the lm_multi run to continue in a later call or session (LM_RESUME_RUN): its latest checkpoint (weights,
  # optimizer and trainer state), metrics and step count, as $OUT/lm_multi_run.tar.gz.part00, ... (15 MiB pieces;
  # 8.5 MB for the default's size, d128 x 4). Carry the folder they are in and set LM_RESUME_RUN to it
  local dir
  dir=$($PY -c "import sys;from sinkalign.lm.checkpoints import find_latest_checkpoint as f;d=f(sys.argv[1]);print(d or '')" \
    "$R/lm_multi")
  [ -n "$dir" ] || { echo "no lm_multi checkpoint"; return; }
  local rel=${dir#"$R"/}  # lm_multi/checkpoints/step-NNNNNNNN
  tar -czf - -C "$R" lm_multi_steps lm_multi/metrics.jsonl "$rel" \
    | split -b 15M -d - "$OUT/lm_multi_run.tar.gz.part"
  (cd "$OUT" && cat lm_multi_run.tar.gz.part* | sha256sum) | tee "$OUT/lm_multi_run.sha256"
  echo "lm_run: $rel of $(cat "$R/lm_multi_steps") steps"
  ls -l "$OUT"
}

tests_and_lm() {  # the GPU tests and the LM run share the GPU: neither is timed
  lm >"$R/lm_phase.log" 2>&1 &
  local pid=$!
  gpu_tests
  wait $pid
  tail -30 "$R/lm_phase.log"
  pack
}

kernels() {
  stamp kernels
  local tag=${KERNEL_TAG:-all}
  (cd benchmarks && timeout "$(( $(budget ${KERNEL_TIMEOUT:-420}) + 45 ))" $PY sinkhorn_kernels.py \
      --lengths ${KERNEL_LENGTHS:-2048 4096 8192 16384 32768 65536} --bands ${KERNEL_BANDS:-1024 256} --reps 5 \
      ${KERNEL_METHODS:+--methods $KERNEL_METHODS} \
      --low-precision --tf32x3 --roofline "${ROOFLINE:-h100}" --time-budget "$(budget "${KERNEL_BUDGET:-360}")" \
      --json "$R/sinkhorn_kernels_$tag.json") 2>&1 | tee "$R/sinkhorn_kernels_$tag.log" | grep -v "^W=" | grep -v "^NOTE" | tail -45
  grep "^W=" "$R/sinkhorn_kernels_$tag.log" | tail -60
  pack
}

tune() {  # launches of both kernel families at one problem (TUNE_ARGS: kernel_tune.py's options)
  stamp tune
  (cd benchmarks && timeout "$(( $(budget ${TUNE_TIMEOUT:-300}) + 45 ))" $PY kernel_tune.py --roofline "${ROOFLINE:-h100}" \
      --time-budget "$(budget "${TUNE_BUDGET:-240}")" ${TUNE_ARGS:-} --json "$R/kernel_tune.json") 2>&1 \
    | tee "$R/kernel_tune.log" | tail -50
  pack
}

aligner() {
  stamp aligner
  local limit
  limit=$(budget "${ALIGNER_TIMEOUT:-300}")  # no measurement starts in its last 45 s; the JSON is written after each row
  (cd benchmarks && timeout "$limit" $PY aligner_gpu.py ${ALIGNER_ARGS:-} --deadline-s $(( limit > 90 ? limit - 45 : limit / 2 )) \
    --json "$R/aligner_gpu.json") 2>&1 | tee "$R/aligner_gpu.log" | tail -40
  pack
}

host() {  # the aligner's host share on the device machine's CPUs: threads, processes, BLAS limited or not
  stamp host
  (cd benchmarks && timeout "$(budget ${HOST_TIMEOUT:-300})" $PY host_parallel.py --pairs "${HOST_PAIRS:-2048}" \
      --only threads processes --no-api ${HOST_ARGS:-} --json "$R/host_parallel.json") 2>&1 | tee "$R/host_parallel.log" | tail -12
  pack
}

# probe_steps TOKENS_PER_STEP ARGS...: LM_STEPS when set, else the steps that LM_TOTAL_MINUTES (default
# LM_MINUTES) allow at the
# rate of a 60-step probe run of `sinkalign lm train ARGS` (so that the cosine schedule ends in time)
probe_steps() {
  local per_step=$1
  shift
  if [ -n "${LM_STEPS:-}" ]; then echo "$LM_STEPS"; return; fi
  rm -rf /tmp/lm_probe
  timeout 120 sinkalign lm train "$@" --out /tmp/lm_probe --steps 60 --log-every 20 --eval-every 0 \
    --eval-max-bases 4096 --save-every 0 >"$R/lm_probe.log" 2>&1
  local rate
  rate=$($PY -c "import json;r=[json.loads(l) for l in open('/tmp/lm_probe/metrics.jsonl')];print(r[-2]['tokens_per_s'] if len(r)>1 else r[-1]['tokens_per_s'])" 2>/dev/null || echo 100000)
  $PY -c "print(max(200, int(0.92 * $rate * 60 * ${LM_TOTAL_MINUTES:-${LM_MINUTES:-5}} / $per_step)))"
}

lm() {
  # LM_STEPS: a fixed number of steps (no probe); else as many as LM_MINUTES allow at the probed rate
  local common=(--fasta "$GENOME" --attention goat --device cuda --d-model 256 --n-layers 6 --n-heads 8
                --seq-len 512 --batch-size 64 --lr 1e-3 --warmup-steps "${LM_WARMUP:-200}" --dropout 0.1
                --weight-decay 0.1 --model-option input_kmer=4 --model-option goat_init=alibi_sink --no-progress)
  local minutes=${LM_MINUTES:-5}
  stamp "lm: probe"
  local steps
  steps=$(probe_steps $(( 64 * 512 )) "${common[@]}")
  stamp "lm: train $steps steps, limit $minutes min"
  timeout $(( ${minutes%.*} * 60 + 200 )) sinkalign lm train "${common[@]}" --out "$R/lm_gpu" --steps "$steps" \
    --log-every 50 --eval-every 0 --save-every 0 --time-limit "$minutes" 2>&1 | tail -5 | tee "$R/lm_train.log"
  stamp "lm: eval"
  for name in ${LM_EVAL_MODELS:-lm_gpu shipped}; do
    local model=()
    [ "$name" = lm_gpu ] && model=(--model "$R/lm_gpu")
    timeout 240 sinkalign lm eval "${model[@]}" --fasta "$GENOME" --device cuda --sections heldout \
      --markov-order 6 --json "$R/lm_eval_$name.json" 2>&1 | tail -15 | tee "$R/lm_eval_$name.log"
  done
  pack
}

lm_multi() {
  local genomes=${GENOMES:-.gpu/genomes} device=${LM_DEVICE:-cuda} minutes=${LM_MINUTES:-5}
  local seq_len=${LM_SEQ_LEN:-512} batch=${LM_BATCH:-64}
  local common=(--fasta "$genomes/multi" --fasta "$genomes/GCF_001457455.1_NCTC11397_genomic.fna.gz"
                --genome-split data_manifests/genomes_multi_split.json --balance genome --reverse-complement
                --attention goat --model-option input_kmer=4 --model-option goat_init=alibi_sink --device "$device"
                --d-model "${LM_D_MODEL:-256}" --n-layers "${LM_LAYERS:-6}" --n-heads "${LM_HEADS:-8}"
                --seq-len "$seq_len" --batch-size "$batch" --lr 1e-3 --warmup-steps "${LM_WARMUP:-200}" --no-progress)
  local steps resume=()
  if [ -n "${LM_RESUME_RUN:-}" ]; then  # a run that lm_run returned from an earlier call or session, carried back
    rm -rf "$R/lm_multi"
    cat "$LM_RESUME_RUN"/lm_multi_run.tar.gz.part* | tar -xzf - -C "$R" || { echo "cannot unpack $LM_RESUME_RUN"; return 1; }
    LM_RESUME=1
  fi
  if [ "${LM_RESUME:-0}" = 1 ] && [ -s "$R/lm_multi_steps" ]; then  # a later call on the same warm machine
    steps=$(cat "$R/lm_multi_steps") resume=(--resume)
    stamp "lm_multi: resume the run of $steps steps, limit $minutes min more"
  else
    stamp "lm_multi: probe on $device"
    steps=$(probe_steps $(( batch * seq_len )) "${common[@]}")
    rm -rf "$R/lm_multi"
    echo "$steps" >"$R/lm_multi_steps"
    stamp "lm_multi: train $steps steps, limit $minutes min"
  fi
  timeout $(( ${minutes%.*} * 60 + 200 )) sinkalign lm train "${common[@]}" --steps "$steps" --time-limit "$minutes" \
    --log-every 50 --eval-every 0 --eval-max-bases 32768 --save-every 0 --out "$R/lm_multi" "${resume[@]}" 2>&1 \
    | tail -5 | tee -a "$R/lm_multi_train.log"
  [ "${LM_EVAL:-1}" = 0 ] && { pack; return; }
  stamp "lm_multi: eval"
  (cd benchmarks && timeout "$(budget 300)" $PY lm_multi_genome.py --split valid --model "$R/lm_multi" --model default \
      --genomes "$(cd .. && realpath "$genomes/multi")" --device "$device" --max-bases "${LM_EVAL_BASES:-50000}" \
      --json "$R/lm_multi_genome_gpu.json") 2>&1 | tail -12 | tee "$R/lm_multi_eval.log"
  pack
}

for phase in "$@"; do
  "$phase"
done
stamp done
