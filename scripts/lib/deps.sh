# shellcheck shell=bash
# Sourced by scripts/test and scripts/demo: installs the Debian packages the build needs,
# only those that are missing (nothing happens when all are installed).
#   ctg_install_missing_deps <caller-name>

# The build and the tests need these (the default preset configures tests and benchmarks,
# so the demo needs them too). python3-torch is the PyTorch the oracle tests compare against
# (tests/oracle; importable by /usr/bin/python3 only). graphviz's `dot` draws a step's graph
# (scripts/demo --graph, and the test graph.dot_render). libopenblas0-pthread makes
# libblas.so.3 OpenBLAS, so Debian's PyTorch (built with BLAS_INFO=generic) is a fair peer in
# bench/vs_pytorch_cpu.py rather than netlib's reference BLAS; libopenblas-dev gives
# bench_gemm_cpu its OpenBLAS side (cblas.h). Open MPI (openmpi-bin, libopenmpi-dev) runs the
# data-parallel tests on real ranks (tests/mpi) and the 2-rank demo. clang-19 builds two unit
# tests with clang (unit.clang: the headers compile and compute the same under clang).
CTG_DEBIAN_PACKAGES=(cmake g++ doctest-dev libbenchmark-dev libeigen3-dev python3-torch graphviz libopenblas0-pthread
  libopenblas-dev openmpi-bin libopenmpi-dev clang-19)

ctg_install_missing_deps() {
  local who="${1:-ctg}"
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "$who: not a Debian system; make sure these are installed: ${CTG_DEBIAN_PACKAGES[*]}" >&2
    return 0
  fi
  local p missing=()
  for p in "${CTG_DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "$who: installing ${missing[*]}"
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
