#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages unillm needs to build, test and run (run as root or sudo).
# apt-get update runs only when something is missing, so a warm machine skips the network.
set -euo pipefail
pkgs=(
  build-essential cmake g++ clang pkg-config
  libopenblas-openmp-dev   # BLAS sharing the OpenMP runtime with our kernels
  libdnnl-dev              # oneDNN: f32/bf16 GEMMs at the AVX-512 levels (also OpenMP/libgomp)
  nlohmann-json3-dev libpcre2-dev libyaml-cpp-dev libpng-dev
  libcpp-httplib-dev       # unillm serve: the HTTP server
  openmpi-bin libopenmpi-dev   # parallel training: processes, hosts and collectives (src/dist/)
  iproute2 util-linux      # tests only: two hosts from network namespaces (ip netns, unshare)
  libcairo2-dev fonts-dejavu-core   # plot_loss: training_loss.png
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev     # tests only: an independent SentencePiece reference
  libclang-rt-14-dev libomp-dev   # the clang fuzz tree: libFuzzer/ASan/UBSan runtimes, OpenMP
  python3-torch python3-venv   # tests only: the PyTorch reference implementation
  qemu-user binutils   # tests only: the op tests on an emulated AVX2-only CPU; the ISA leak check
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
