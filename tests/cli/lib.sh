# Shared by the CLI test scripts (sourced): result lines, running the command, tiny data sets.
#   bin: the tessera binary; tmp: a scratch folder; fail: 0, set to 1 by bad.
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
run() { out=$("$bin" "$@" 2>&1); rc=$?; }

be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
idx_split() { # dir split n h w: a deterministic IDX split (grey ramps, labels i % 10), no Python
  local d=$1 s=$2 n=$3 h=$4 w=$5 i
  mkdir -p "$d"
  { printf '\x00\x00\x08\x03'; be32 "$n"; be32 "$h"; be32 "$w"
    for ((i = 0; i < n; i++)); do head -c $((h * w)) /dev/zero | tr '\000' "\\$(printf %03o $((i * 7 % 256)))"; done
  } > "$d/$s-images-idx3-ubyte"
  { printf '\x00\x00\x08\x01'; be32 "$n"; for ((i = 0; i < n; i++)); do printf "\\x0$((i % 10))"; done; } \
    > "$d/$s-labels-idx1-ubyte"
}

mnist_scratch() { # ntrain ntest: the scratch folder $tmp (removed at exit) with $tmp/d, an IDX data
                  # set of ntrain training and ntest test samples of 28 x 28 (idx_split)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  idx_split "$tmp/d" train "$1" 28 28
  idx_split "$tmp/d" t10k "$2" 28 28
}
mlp_cfg() { # file data_dir steps batch [extra yaml lines]: a small MLP on an IDX data set
  local f=$1 d=$2 steps=$3 b=$4; shift 4
  { cat <<YAML
model: {name: mlp, hidden: [16]}
data:
  name: fashion_mnist
  path: $d
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {steps: $steps, batch_size: $b, eval_batch_size: $b, log_every: 1}
optimizer: {name: sgd, lr: 0.01}
log: {progress: lines}
YAML
    for l in "$@"; do echo "$l"; done; } > "$f"
}

plan_setup() { # the planner tests' start: the scratch folder $tmp (removed at exit) with its own
               # cluster cache (calibrate writes it, `--cluster local` reads it), 2 OpenMP threads,
               # and $tmp/in.txt, 300 lines of text for the GPTs' text data set
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  export TESSERA_CLUSTER_CACHE=$tmp/cache.yaml OMP_NUM_THREADS=2
  local i
  for i in $(seq 1 300); do echo "line $i: the quick brown fox jumps over the lazy dog."; done > "$tmp/in.txt"
}
small_gpt_cfg() { # file: a 2-layer GPT of width 32 on $tmp/in.txt (plan_setup), 2 steps of 8
  cat > "$1" <<YAML
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256}
data: {name: text, path: '$tmp/in.txt', seq_len: 16, val_fraction: 0.1, transforms: []}
train: {steps: 2, batch_size: 8}
YAML
}

mpi_job() { # n: sets mpi=(mpirun ... -n n) for jobs on this host (root allowed), one thread per rank
            # and passive OpenMP waits; exits 77 (skipped) where there is no mpirun
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun in PATH"; exit 77; }
  mpi=(mpirun --oversubscribe -n "$1")
  [ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
}

gpt_strategies() { # D T: the `strategies:` block (indented under `parallel:`) that cuts the tests'
                   # small GPT Megatron's way: tensor parallel T inside data parallel D (D x T ranks)
  local d=$1 t=$2
  cat <<YAML
  strategies:
    transformer.embedding: "(($d,1),($t,1))"
    transformer.h.*.ln_*.layernorm: "(($d,1,1),(1,),(1,))"
    transformer.h.*.attn.c_attn.dense*: "(($d,1,1),($t,1),($t,))"
    transformer.h.*.attn.attention: "(($d,$t,1,1),($d,$t,1,1),($d,$t,1,1))"
    transformer.h.*.attn.c_proj.dense: "(($d,1,$t),(1,$t))"
    transformer.h.*.mlp.c_fc.dense: "(($d,1,1),($t,1))"
    transformer.h.*.mlp.c_proj.dense: "(($d,1,$t),(1,$t))"
    transformer.ln_f.layernorm: "(($d,1,1),(1,),(1,))"
    dense: "(($d,1,1),($t,1))"
    softmax_ce: "(($d,$t),($d,))"
YAML
}

resnet8_cfg() { # file data_dir [extra yaml lines]: the GPU tests' ResNet-8 (3 steps of 8 of an IDX set's
                # first 64 samples, evaluated on 32; momentum)
  local f=$1 d=$2; shift 2
  { cat <<YAML
model: {name: resnet, depth: 8}
data:
  name: fashion_mnist
  path: $d
  train_limit: 64
  test_limit: 32
  transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]
train: {steps: 3, batch_size: 8, eval_batch_size: 16, seed: 2}
optimizer: {name: momentum, lr: 0.05}
log: {progress: off}
YAML
    for l in "$@"; do echo "$l"; done; } > "$f"
}

train_in() { # n config dir [args...]: `tessera train` on n ranks (1: no mpirun) with
             # checkpoint.dir=dir; sets out, rc
  local n=$1 c=$2 d=$3; shift 3
  local m=(); [ "$n" = 1 ] || { m=(mpirun --oversubscribe -n "$n"); [ "$(id -u)" = 0 ] && m+=(--allow-run-as-root); }
  out=$("${m[@]}" "$bin" train "$c" --set checkpoint.dir="$d" "$@" 2>&1); rc=$?
}
as_file() { # ckpt out: a whole file of the checkpoint (a sliced folder merged)
  if [ -d "$1" ]; then "$bin" ckpt merge "$1" -o "$2" --overwrite >/dev/null 2>&1; else cp "$1" "$2"; fi
}

loss_listing() { # metrics.jsonl: "step loss" per step record, "eval loss top1" per eval record
  python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('type')=='step': print('%d %.9g'%(r['step'],r['loss']))
    if r.get('type')=='eval': print('eval %.9g %.9g'%(r['loss'],r['top1']))
" "$1"; }
same_listing() { # a b: two loss listings of the same length, every value within 2e-4 relative
  python3 -c "
import sys
a=[l.split() for l in open(sys.argv[1])]; b=[l.split() for l in open(sys.argv[2])]
ok=len(a)==len(b) and len(a)>0
for x,y in zip(a,b):
    for u,v in zip(x[1:],y[1:]):
        u,v=float(u),float(v); ok=ok and abs(u-v)<=2e-4*max(1,abs(v))
sys.exit(0 if ok else 1)" "$1" "$2"; }

# ---- the GPU-rank tests (gpu_ranks_test.sh, gpu_pipe_test.sh): layouts on GPU ranks against CPU ranks ----
gpu_ranks_env() { # their devices: the stand-ins (TS_FAKECUDA's emulated GPUs, TS_FAKENCCL, TS_FAKECUDNN) or
                  # the machine's GPUs; sets $where; exits 77 in the sanitizers' build (its stand-in records
                  # launches without running them)
  if [ -n "${TS_FAKECUDA:-}" ] && [ "${TS_EMU:-1}" = 0 ]; then
    echo "SKIP: the sanitizers' build: the stand-in driver records launches without running them"; exit 77
  elif [ -n "${TS_FAKECUDA:-}" ]; then
    export TESSERA_LIBCUDA=$TS_FAKECUDA TESSERA_GPU_GEMM=tessera TESSERA_LIBNCCL=${TS_FAKENCCL:-/nonexistent}
    # the convolutions through the stand-in cuDNN, or the direct kernels (never a real cuDNN here)
    if [ -n "${TS_FAKECUDNN:-}" ]; then export TESSERA_LIBCUDNN=$TS_FAKECUDNN; else export TESSERA_GPU_CONV=tessera; fi
    where="the stand-in driver's emulated GPUs"
  else where="the GPUs"; fi
}
gpu_ranks_usable() { # config: exits 77 on a machine with neither a usable GPU nor the stand-in ($bin)
  [ "$where" = "the GPUs" ] || return 0
  local why
  why=$("$bin" train "$1" --set device_target=GPU --set train.steps=1 --set parallel.mode=stand_alone \
        --set parallel.pipeline_stages=1 2>&1 | grep "device_target GPU: ")
  if [ -n "$why" ]; then echo "SKIP: no usable GPU and no stand-in driver (TS_FAKECUDA): $why"; exit 77; fi
}
close() { # a b [tol]: two loss listings (loss_listing) of the same length, every value within tol (1e-4) relative
  python3 -c "
import sys
a=[l.split() for l in open(sys.argv[1])]; b=[l.split() for l in open(sys.argv[2])]; tol=float(sys.argv[3])
ok=len(a)==len(b) and len(a)>0
for x,y in zip(a,b):
    ok=ok and x[0]==y[0]
    for u,v in zip(x[1:],y[1:]): ok=ok and abs(float(u)-float(v))<=tol*max(abs(float(v)),1e-6)
sys.exit(0 if ok else 1)" "$1" "$2" "${3:-1e-4}"; }
job() { # name config device [--set ...]: ${mpi[@]} ranks; metrics $tmp/name.jsonl, losses $tmp/name.txt, output $tmp/name.out
  local n=$1 c=$2 dev=$3; shift 3
  "${mpi[@]}" "$bin" train "$c" --set device_target="$dev" --set log.metrics="$tmp/$n.jsonl" "$@" > "$tmp/$n.out" 2>&1 ||
    bad "$n ($dev): $(grep -v '^-\|^$' "$tmp/$n.out" | tail -3)"
  loss_listing "$tmp/$n.jsonl" > "$tmp/$n.txt" 2>/dev/null
}
said() { grep -o "collectives: .*" "$tmp/$1.out" | head -1; } # name: the job's collectives, as it said them
ranks_gpt() { # file [D T]: a small GPT on $tmp/in.txt (3 steps of 8, adamw, clipping); with D T semi_auto_parallel
              # cut Megatron's way (gpt_strategies)
  { cat <<YAML
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, vocab_size: 256}
data: {name: text, path: $tmp/in.txt, seq_len: 32, val_fraction: 0.005, transforms: []}
train: {steps: 3, batch_size: 8, eval_every: -1, log_every: 1, eval_batch_size: 8, seed: 5}
optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 0.5, schedule: {name: constant}}
log: {progress: off}
YAML
    if [ $# = 3 ]; then echo "parallel:"; echo "  mode: semi_auto_parallel"; gpt_strategies "$2" "$3"; fi; } > "$1"
}
