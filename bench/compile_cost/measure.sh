#!/usr/bin/env bash
# Compile cost of small models: wall time, compiler CPU time (user + system: what to compare
# when other work shares the machine) and peak compiler memory (GNU time -v), g++ -O2.
#   bench/compile_cost/measure.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cxx=${CXX:-g++}
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (Debian package 'time')"; exit 1; }
probe() {  # name, source, extra flags
  local log; log=$(mktemp)
  /usr/bin/time -v "$cxx" -std=c++20 -O2 -Iinclude "${@:3}" -c "$2" -o /dev/null 2>"$log"
  local wall cpu mem
  wall=$(grep "Elapsed (wall clock)" "$log" | awk '{print $NF}')
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$log")
  mem=$(grep "Maximum resident set size" "$log" | awk '{print $NF}')
  printf '%-24s wall %8s  cpu %7s s  peak %6d MiB\n' "$1" "$wall" "$cpu" $((mem / 1024))
  rm -f "$log"
}
probe "mlp2 (fwd+bwd)" bench/compile_cost/mlp2.cpp
for n in 2 4 8 16; do probe "residual x$n" bench/compile_cost/residual.cpp -DCTG_BLOCKS=$n; done
for n in 2 12; do probe "tiny_lm stack x$n" bench/compile_cost/tiny_lm.cpp -DCTG_LAYERS=$n; done
# The demo, one unit per precision policy (as examples/CMakeLists.txt builds it), -O3 like the Release build.
for f in main train_f32 train_bf16 train_fp8; do
  probe "examples/tiny_lm/$f" examples/tiny_lm/$f.cpp -O3 -DNDEBUG -DCTG_SOURCE_DIR=\"$PWD\"
done
