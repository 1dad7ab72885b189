#!/usr/bin/env bash
# Compile cost of models, one translation unit each: wall time, compiler CPU
# time (user + system: what to compare when other work shares the machine)
# and peak compiler memory (GNU time -v).
#   bench/compile_cost/measure.sh            every probe, g++ -O2 (the demo's units at -O3, as built)
#   bench/compile_cost/measure.sh -g         the same with debug information (-g)
#   CXX=clang++-19 bench/compile_cost/measure.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cxx=${CXX:-g++}
extra=("$@")
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (Debian package 'time')"; exit 1; }
probe() {  # name, source, flags...
  local log; log=$(mktemp)
  if ! /usr/bin/time -v "$cxx" -std=c++20 -Iinclude "${@:3}" "${extra[@]}" -c "$2" -o /dev/null 2>"$log"; then
    printf '%-28s FAILED\n' "$1"; tail -5 "$log"; rm -f "$log"; return
  fi
  local wall cpu mem
  wall=$(grep "Elapsed (wall clock)" "$log" | awk '{print $NF}')
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$log")
  mem=$(grep "Maximum resident set size" "$log" | awk '{print $NF}')
  printf '%-28s wall %8s  cpu %7s s  peak %6d MiB\n' "$1" "$wall" "$cpu" $((mem / 1024))
  rm -f "$log"
}
probe "mlp2 (fwd+bwd)" bench/compile_cost/mlp2.cpp -O2
for n in 2 8 16; do probe "residual x$n" bench/compile_cost/residual.cpp -O2 -DCTG_BLOCKS=$n; done
for n in 2 12; do probe "tiny_lm stack x$n" bench/compile_cost/tiny_lm.cpp -O2 -DCTG_LAYERS=$n; done
probe "gpt_like (train + eval)" bench/compile_cost/gpt_like.cpp -O2
probe "fp8 ckpt + no ckpt" bench/compile_cost/fp8_ckpt.cpp -O2
# The demo, one unit per precision policy (as examples/CMakeLists.txt builds it), -O3 like the Release build.
for f in main train_f32 train_bf16 train_fp8; do
  probe "examples/tiny_lm/$f" examples/tiny_lm/$f.cpp -O3 -DNDEBUG -DCTG_SOURCE_DIR=\"$PWD\"
done
