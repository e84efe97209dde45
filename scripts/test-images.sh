#!/usr/bin/env bash
# The images, really built and run (issue 55): `make test-images`.
#
#  1. Bases. The Dockerfiles' FROM images (python:3.11-slim, nvidia/cuda:12.8.1-devel-ubuntu24.04) are
#     used where the engine has them, else pulled; where the public registry cannot be reached (or
#     STAND_IN=1) they are made here and tagged with those names: a Debian bookworm root file system from
#     debootstrap (Debian's packages only), plus Python for the first, plus nothing for the second (no
#     CUDA: the service image is tested on the CPU). The host's extra CA certificates
#     (/usr/local/share/ca-certificates) go into the stand-ins, so that pip works behind the same proxy.
#  2. `make docker-build-runners` and `make docker-build-service` with DOCKER=$ENGINE, each timed. Where
#     the host has a CPU torch wheel for pip (TORCH_WHEELS, else a directory of PIP_FIND_LINKS holding
#     one), it is mounted into the build and pinned (no torch index is reached).
#  3. Each runner image judges a CPU job with its embedded service (`run --model reference --limit 1`).
#  4. The service image starts `serve --gpus none`, twice: with the engine's default flags and with those
#     that keep the full sandbox (FULL_SANDBOX_FLAGS). Each time GET /v1/info's isolation must be what
#     the workers' processes really are (their namespaces and /dev/shm, read from /proc inside the
#     container), a job sent by the kernelbench runner image must come back correct, and a job's answer
#     must carry the same isolation report.
#
# Its last result, the times and the image sizes are written to $WORK/summary.json and printed.
# Needs root (or a podman that runs rootless), podman, and debootstrap where a stand-in is made.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ENGINE=${ENGINE:-podman}
WORK=${WORK:-$ROOT/build/test-images}
STAND_IN=${STAND_IN:-auto}                    # auto: only where an image cannot be pulled; 1: always
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PY_BASE=docker.io/library/python:3.11-slim
CUDA_BASE=docker.io/nvidia/cuda:12.8.1-devel-ubuntu24.04
# podman masks parts of the container's /proc, so a worker's PID namespace (which needs a /proc of its
# own) cannot be made; unmasking it keeps the full sandbox (Docker: --security-opt systempaths=unconfined,
# with seccomp and AppArmor relaxed; README "Isolation inside a container").
FULL_SANDBOX_FLAGS=${FULL_SANDBOX_FLAGS:---security-opt unmask=/proc/*}
NICE=${NICE:-nice -n 19}
PY=${PY:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3

mkdir -p "$WORK"
LOG=$WORK/log.txt
: >"$LOG"
declare -A RESULT=()
START=$(date +%s)
say() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$LOG" >&2; }
fail() { say "FAILED: $*"; RESULT[failed]="$*"; summary; exit 1; }
timed() { # NAME CMD...: run, log its output, record its seconds
  local name=$1 t0=$SECONDS
  shift
  say "$name: $*"
  if ! "$@" >>"$LOG" 2>&1; then tail -40 "$LOG" >&2; fail "$name (see $LOG)"; fi
  RESULT[${name}_s]=$((SECONDS - t0))
  say "$name: ${RESULT[${name}_s]} s"
}
size_of() { $ENGINE image inspect --format '{{.Size}}' "$1"; }
summary() {
  RESULT[wall_s]=$(($(date +%s) - START))
  RESULT[disk_after]=$(df -B1 --output=used "$WORK" | tail -1 | tr -d ' ')
  for k in "${!RESULT[@]}"; do printf '%s\t%s\0' "$k" "${RESULT[$k]}"; done | "$PY" -c '
import json, sys
out = {}
for item in sys.stdin.read().split("\0"):
    if item:
        k, _, v = item.partition("\t")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
print(json.dumps(out, indent=2, sort_keys=True))' | tee "$WORK/summary.json"
}
RESULT[disk_before]=$(df -B1 --output=used "$WORK" | tail -1 | tr -d ' ')
RESULT[engine]=$($ENGINE --version)

# ---- the engine on this host ---------------------------------------------------------------------
# Where the engine cannot raise rlimits (no CAP_SYS_RESOURCE: a Firecracker VM like CI's) or crun meets
# a hybrid cgroup hierarchy, it is given a containers.conf of its own: runc, and rlimits within the host's.
engine_conf() {
  local hard_nofile hard_nproc pid_max
  hard_nofile=$(ulimit -Hn)
  hard_nproc=$(ulimit -Hu)
  pid_max=$(cat /proc/sys/kernel/pid_max)
  [ "$hard_nproc" = unlimited ] || [ "$hard_nproc" -gt "$pid_max" ] && hard_nproc=$pid_max
  [ "$hard_nofile" = unlimited ] && hard_nofile=1048576
  {
    echo "[containers]"
    echo "default_ulimits = [\"nofile=$hard_nofile:$hard_nofile\", \"nproc=$hard_nproc:$hard_nproc\"]"
    if command -v runc >/dev/null; then printf '[engine]\nruntime = "runc"\n'; fi
  } >"$WORK/containers.conf"
  export CONTAINERS_CONF=$WORK/containers.conf
  RESULT[containers_conf]=$(tr '\n' ' ' <"$WORK/containers.conf")
  say "engine settings for this host: ${RESULT[containers_conf]}"
}
engine_runs() { $ENGINE run --rm --network none "$1" true >>"$LOG" 2>&1; }

# ---- 1. bases ------------------------------------------------------------------------------------
have() { $ENGINE image exists "$1"; }
pull() { [ "$STAND_IN" != 1 ] && timeout 300 $ENGINE pull "$1" >>"$LOG" 2>&1; }

stand_in_rootfs() {
  local img=localhost/llmbench-standin-rootfs:$SUITE
  have "$img" && return
  command -v debootstrap >/dev/null || fail "no $1 and no debootstrap to make a stand-in (apt-get install debootstrap)"
  local rootfs=$WORK/rootfs-$SUITE
  if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
    rm -rf "$rootfs"
    timed debootstrap $NICE debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$rootfs" "$MIRROR"
  fi
  timed import_rootfs sh -c "tar -C '$rootfs' -c . | $ENGINE import --change 'ENV LANG=C.UTF-8' --change 'CMD [\"bash\"]' - $img"
}

stand_in() { # the stand-in base, with the host's CA certificates
  local img=localhost/llmbench-standin:$SUITE dir=$WORK/standin
  have "$img" && return
  rm -rf "$dir" && mkdir -p "$dir/ca"
  cp /usr/local/share/ca-certificates/*.crt "$dir/ca/" 2>/dev/null || true
  cat >"$dir/Containerfile" <<EOF
FROM localhost/llmbench-standin-rootfs:$SUITE
COPY ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
EOF
  timed standin_base $NICE $ENGINE build --pull=never -t "$img" "$dir"
}

base() { # NAME: make sure the engine has it (present, pulled, or a stand-in)
  local name=$1
  if have "$name"; then say "base $name: present"; return; fi
  if [ "$STAND_IN" != 1 ] && pull "$name"; then RESULT[base_$(basename "${name%%:*}")]=pulled; return; fi
  say "base $name: cannot be pulled here; making a stand-in from Debian's packages"
  stand_in_rootfs "$name"
  stand_in
  if [ "$name" = "$CUDA_BASE" ]; then
    $ENGINE tag "localhost/llmbench-standin:$SUITE" "$name"
  else
    local dir=$WORK/standin-python
    mkdir -p "$dir"
    cat >"$dir/Containerfile" <<EOF
FROM localhost/llmbench-standin:$SUITE
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-pip python3-venv python-is-python3 \\
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
EOF
    timed standin_python $NICE $ENGINE build --pull=never -t "$name" "$dir"
  fi
  RESULT[base_$(basename "${name%%:*}")]="stand-in (debootstrap $SUITE)"
}

if [ "$STAND_IN" = 1 ]; then $ENGINE rmi -f "$PY_BASE" "$CUDA_BASE" >/dev/null 2>&1 || true; fi
# The first image that may run tells whether the engine needs this host's settings.
for probe in "$PY_BASE" "$CUDA_BASE" "localhost/llmbench-standin-rootfs:$SUITE"; do
  if have "$probe"; then break; fi
done
if ! have "$probe"; then
  if ! pull "$PY_BASE"; then stand_in_rootfs "$PY_BASE"; fi
  have "$PY_BASE" && probe=$PY_BASE
fi
if ! engine_runs "$probe"; then
  engine_conf
  engine_runs "$probe" || fail "$ENGINE cannot run a container here (see $LOG)"
fi
base "$PY_BASE"
base "$CUDA_BASE"

# ---- 2. builds -----------------------------------------------------------------------------------
BUILD_ARGS="--pull=never ${IMAGE_BUILD_ARGS:-}"
torch_wheel() {
  local dirs=${TORCH_WHEELS:-${PIP_FIND_LINKS:-$(pip3 config get global.find-links 2>/dev/null || true)}}
  for d in $dirs; do
    d=${d#file://}
    ls "$d"/torch-*+cpu-*.whl 2>/dev/null | head -1
  done | head -1
}
wheel=$(torch_wheel)
if [ -n "$wheel" ]; then
  version=$(basename "$wheel" | cut -d- -f2)
  BUILD_ARGS+=" -v $(dirname "$wheel"):/wheels:ro --build-arg 'TORCH_PIP_ARGS=--find-links=/wheels torch==$version'"
  RESULT[torch]="$version from $(dirname "$wheel")"
fi
say "build arguments: $BUILD_ARGS"
make install >>"$LOG" 2>&1 || fail "make install"
timed build_runners $NICE make docker-build-runners DOCKER="$ENGINE" DOCKER_BUILD_ARGS="$BUILD_ARGS"
timed build_service $NICE make docker-build-service DOCKER="$ENGINE" DOCKER_BUILD_ARGS="$BUILD_ARGS"
for img in kernelbench-runner backendbench-runner kernel-service; do RESULT[size_$img]=$(size_of "$img:latest"); done

# ---- 3. a CPU job in each runner image -----------------------------------------------------------
score_ok() { "$PY" - "$1" <<'EOF'
import json, sys
from pathlib import Path
score = json.loads(next(Path(sys.argv[1]).rglob("score.json")).read_text())
statuses = [t["status"] for t in score["per_task"]]
print("per_task:", statuses)
sys.exit(0 if statuses == ["correct"] else 1)
EOF
}
for runner in kernelbench backendbench; do
  runs=$WORK/runs-$runner
  rm -rf "$runs" && mkdir -p "$runs"
  timed "run_$runner" $ENGINE run --rm --network none --user 0:0 -e HOME=/tmp -v "$runs:/home/runner/runs" \
    "$runner-runner:latest" run --model reference --run-id images --limit 1
  score_ok "$runs" >>"$LOG" 2>&1 || fail "$runner runner image: its job was not judged correct"
done

# ---- 4. serve in the service image ---------------------------------------------------------------
# What the workers' processes really are, read inside the container (as the service's user): each
# worker's namespaces against the service's, and whether its /dev/shm is another file system.
read -r -d '' OBSERVE <<'EOF' || true
import json, os
def ns(pid):
    return {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in ("pid", "net", "mnt", "ipc")}
def shm(pid):
    dev = None
    for line in open(f"/proc/{pid}/mountinfo"):
        f = line.split()
        if f[4] == "/dev/shm":
            dev = f[2]
    return dev
me = ns("self")
out = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if argv[1:3] == [b"-m", b"kernel_service.workers.worker"] and b"python" in argv[0]:
        w = ns(pid)
        out.append({"pid_namespace": w["pid"] != me["pid"], "net_namespace": w["net"] != me["net"],
                    "mount_namespace": w["mnt"] != me["mnt"], "ipc_namespace": w["ipc"] != me["ipc"],
                    "private_shm": shm(pid) != shm("self")})
print(json.dumps(out))
EOF

serve_check() { # NAME FLAGS...: start serve with FLAGS, check it, stop it
  local name=$1 port ctr t0=$SECONDS
  shift
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  say "serve ($name): $ENGINE run $* kernel-service --gpus none"
  ctr=$($ENGINE run -d -p "127.0.0.1:$port:8000" "$@" kernel-service:latest --gpus none --workers 1)
  local url=http://127.0.0.1:$port ok=""
  for _ in $(seq 300); do
    if curl -fsS "$url/healthz" >/dev/null 2>&1; then ok=1; break; fi
    [ "$($ENGINE inspect -f '{{.State.Running}}' "$ctr")" = true ] || break
    sleep 1
  done
  $ENGINE logs "$ctr" >"$WORK/serve-$name.log" 2>&1 || true
  if [ -z "$ok" ]; then
    cat "$WORK/serve-$name.log" >&2
    $ENGINE rm -f "$ctr" >/dev/null
    fail "serve ($name) did not start (log: $WORK/serve-$name.log)"
  fi
  RESULT[serve_${name}_start_s]=$((SECONDS - t0))
  curl -fsS "$url/v1/info" >"$WORK/info-$name.json"
  $ENGINE exec "$ctr" python3 -c "$OBSERVE" >"$WORK/observed-$name.json"
  # a job through the kernelbench runner image, then one answer's isolation
  local runs=$WORK/runs-serve-$name
  rm -rf "$runs" && mkdir -p "$runs"
  $ENGINE run --rm --network host --user 0:0 -e HOME=/tmp -v "$runs:/home/runner/runs" kernelbench-runner:latest \
    run --model reference --run-id serve --limit 1 --service-url "$url" >>"$LOG" 2>&1 \
    || { $ENGINE rm -f "$ctr" >/dev/null; fail "serve ($name): the runner's job failed"; }
  score_ok "$runs" >>"$LOG" 2>&1 || { $ENGINE rm -f "$ctr" >/dev/null; fail "serve ($name): job not correct"; }
  "$PY" - "$url" >"$WORK/answer-$name.json" <<'EOF'
import json, sys, urllib.request
ref = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n" \
      "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n"
body = {"reference": ref, "solution": ref.replace("class Model(", "class ModelNew("),
        "options": {"correctness_trials": 3, "perf_trials": 30, "warmup": 1}}
req = urllib.request.Request(sys.argv[1] + "/v1/evaluate", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=600).read().decode())
EOF
  $ENGINE logs "$ctr" >"$WORK/serve-$name.log" 2>&1 || true
  $ENGINE rm -f "$ctr" >/dev/null
  RESULT[serve_$name]=$("$PY" - "$WORK" "$name" <<'EOF'
import json, sys
from pathlib import Path
work, name = Path(sys.argv[1]), sys.argv[2]
info = json.loads((work / f"info-{name}.json").read_text())
observed = json.loads((work / f"observed-{name}.json").read_text())
answer = json.loads((work / f"answer-{name}.json").read_text())
iso = info["isolation"]["eval"]
log = (work / f"serve-{name}.log").read_text()
problems = []
if not observed:
    problems.append("no worker process found in the container")
keys = ("pid_namespace", "net_namespace", "mount_namespace", "ipc_namespace", "private_shm")
for seen in observed:
    for k in keys:
        if seen[k] != iso[k]:
            problems.append(f"{k}: reported {iso[k]}, observed {seen[k]}")
if answer.get("outcome") != "correct":
    problems.append(f"the job's outcome is {answer.get('outcome')!r}")
if answer.get("isolation") != {k: v for k, v in iso.items() if k != "summary"}:
    problems.append("the answer's isolation differs from /v1/info's")
line = next((x for x in log.splitlines() if "eval workers' isolation:" in x), None)
if line is None:
    problems.append("no isolation line in the startup log")
print(json.dumps({"summary": iso["summary"], "fallbacks": iso["fallbacks"], "log_line": line,
                  "observed": observed[:1], "problems": problems}))
sys.exit(1 if problems else 0)
EOF
  ) || fail "serve ($name): $(tail -c 600 <<<"${RESULT[serve_$name]:-}")"
  say "serve ($name): $(cut -c1-400 <<<"${RESULT[serve_$name]}")"
}
# shellcheck disable=SC2086  # FULL_SANDBOX_FLAGS is a list of flags
serve_check default
# shellcheck disable=SC2086
serve_check full_sandbox $FULL_SANDBOX_FLAGS

RESULT[ok]=1
summary
