#!/usr/bin/env bash
# Installs every system package prepflow needs (Debian bookworm, apt) and builds
# Release into build/ (binaries in build/bin/). Safe to run again: packages that
# are present are skipped and the build is incremental (ccache).
#
#   scripts/setup.sh [--no-build] [--build-dir DIR] [--type Release|Debug|RelWithDebInfo]
#                    [--sanitize address|thread]   (into build-asan/ or build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=
build_type=Release
do_build=1
sanitize=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) do_build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --type) build_type="$2"; shift ;;
    --sanitize) sanitize="$2"; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Build toolchain and libraries. Everything is a Debian package.
packages=(
  build-essential cmake ninja-build ccache pkg-config
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev
  libabsl-dev libopencv-dev libturbojpeg0-dev libjpeg62-turbo-dev
  prometheus-cpp-dev libspdlog-dev libxxhash-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  # Operations: the Prometheus server and promtool (the integration test and
  # the alert-rule check), and YAML for the deploy-manifest test.
  prometheus python3-yaml
  # The Python package, built for Debian's /usr/bin/python3, and what its
  # tests and examples/train_resnet.py use.
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-torch python3-torchvision
  # `pip install .` (pyproject.toml, setup.py) and its test in a fresh venv.
  python3-pip python3-venv python3-setuptools python3-wheel
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes.
  clang libclang-rt-14-dev
  # Remote data (HTTP(S) and S3 through libcurl, which signs SigV4 itself;
  # S3 listings parsed with expat).
  libcurl4-openssl-dev libexpat1-dev
  # The scheduler signs workers' leases (HMAC-SHA256).
  libssl-dev
  # Audio: decoding (WAV, FLAC, Ogg Vorbis/Opus, MP3) with libsndfile; the
  # tests' speech is spoken by espeak-ng and converted by sox, and
  # torchaudio is the reference for the audio ops.
  libsndfile1-dev libvorbis-dev espeak-ng sox libsox-fmt-all python3-torchaudio
  # Audio features' FFT: KISS FFT (no planner or CPU dispatch, so the same
  # floats on every worker).
  libkissfft-dev
  # Video: FFmpeg's libraries demux and decode; the tests make clips with the
  # ffmpeg tool from generated pictures, and PyAV (the same libraries) is the
  # reference.
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg python3-av
  # Text: SentencePiece models (the library; spm_train makes the tests'
  # models; python3-sentencepiece is the reference), ICU's Unicode classes
  # for byte-level BPE's pre-tokenizer, and the regex module its reference
  # implementation in the tests uses.
  libsentencepiece-dev sentencepiece python3-sentencepiece libicu-dev python3-regex
)
# The test servers for remote data run on Node.js (tests/servers): Debian's,
# unless a node and npm are already on the PATH (NodeSource's node bundles
# its own npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages present"
fi

# The real servers the tests read remote data from (an HTTP server with Range
# requests and an S3-compatible one), pinned by tests/servers/package-lock.json.
servers=tests/servers
if [ ! -f "$servers/node_modules/.package-lock.json" ] ||
   [ "$servers/package-lock.json" -nt "$servers/node_modules/.package-lock.json" ]; then
  echo "setup: installing the test servers (npm ci in $servers)"
  npm ci --prefix "$servers" --no-audit --no-fund --loglevel=error
fi

[ "$do_build" -eq 1 ] || exit 0

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
extra=()
case "$sanitize" in
  "") build_dir=${build_dir:-build} ;;
  address|thread)
    # Instrumented tests only: no benchmarks, no Python module (it would need
    # the sanitizer runtime preloaded into python), no CUDA.
    build_dir=${build_dir:-build-${sanitize:0:1}san}
    [ "$build_type" = Release ] && build_type=RelWithDebInfo
    extra=(-DPREPFLOW_SANITIZE="$sanitize" -DPREPFLOW_BUILD_BENCH=OFF -DPREPFLOW_BUILD_PYTHON=OFF
           -DPREPFLOW_DISABLE_CUDA=ON) ;;
  *) echo "setup.sh: --sanitize: '$sanitize' is not address or thread" >&2; exit 2 ;;
esac
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" "${launcher[@]}" "${extra[@]}"
fi
# Two cores and 24 GiB: protobuf/gRPC translation units are heavy but fit.
cmake --build "$build_dir" --parallel "$(nproc)"
