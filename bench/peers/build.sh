#!/usr/bin/env bash
# Builds the native peers of the proxy apps into bench/peers/build/:
#   <app>_offload  clang-16 + libomptarget's x86_64 host plugin (OpenMP target offload)
#   <app>_host     gcc -O3 -fopenmp, a plain host parallel loop
# Installs clang-16, clang-tools-16 and libomp-16-dev from Debian when missing (needs root).
# Run the offload binaries with LD_LIBRARY_PATH=/usr/lib/llvm-16/lib OMP_TARGET_OFFLOAD=MANDATORY;
# `offload bench <app> --peers` does that for you.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v clang-16 >/dev/null || [ ! -e /usr/lib/llvm-16/lib/libomptarget.so ]; then
  echo "installing clang-16 clang-tools-16 libomp-16-dev" >&2
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q clang-16 clang-tools-16 libomp-16-dev
fi
command -v gcc >/dev/null || { echo "gcc is missing (apt-get install gcc)" >&2; exit 1; }

mkdir -p build
for app in xsbench rsbench; do
  clang-16 -O3 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -DOFFLOAD "$app.c" -o "build/${app}_offload" -lm
  gcc -O3 -fopenmp "$app.c" -o "build/${app}_host" -lm
  echo "built build/${app}_offload build/${app}_host" >&2
done
