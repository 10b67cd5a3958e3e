"""llama-cpp-python's source, patched before the wheel is built from it: the two places where its build files
decide for us what the release must decide itself.

1. Its top-level CMakeLists.txt, `if (APPLE)`, sets GGML_METAL and GGML_METAL_EMBED_LIBRARY ON, and on x86_64
   GGML_AVX, GGML_AVX2, GGML_FMA and GGML_F16C OFF, each with `CACHE ... FORCE`: a -DGGML_METAL=OFF in
   CMAKE_ARGS (the Intel Mac's, installer/flavour.py) is overridden, and the Intel app gets libggml-metal.
   The patch drops `FORCE` from those lines (wherever they are), so that each becomes a default that
   CMAKE_ARGS overrides; a build that passes nothing still gets upstream's values.
2. ggml's ggml/src/CMakeLists.txt stops with "Unsupported ARM target OS" when GGML_CPU_ALL_VARIANTS meets
   Windows on Arm, although ggml's loader reads the processor's features there (IsProcessorFeaturePresent,
   ggml-feats.h). The patch adds a Windows branch with four variants, without SVE and SME, which no
   Windows on Arm processor has (installer.contents.CPU_VARIANTS checks the bundle holds them).

Each patch must find what it replaces in the pinned version: a changed file stops the build with one line
rather than building something else.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

from runtime.errors import UserError

# What 0.3.36 forces on every Apple build (1 above).
FORCED = ("GGML_METAL", "GGML_METAL_EMBED_LIBRARY", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C")
_FORCE_LINE = re.compile(rf"^(\s*set\(\s*(?:{'|'.join(FORCED)})\s+[^)]*?CACHE\s+\w+\s+\"[^\"]*\")\s+FORCE\s*\)",
                         re.MULTILINE)
# ggml's ARM variants (2 above): the Linux branch's line, and the Windows branch put after that branch.
_ARM_LINUX = '    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\n        if (CMAKE_SYSTEM_NAME MATCHES "Linux")\n'
_ARM_ANDROID = '        elseif (CMAKE_SYSTEM_NAME MATCHES "Android")\n'
_ARM_WINDOWS = """        elseif (CMAKE_SYSTEM_NAME MATCHES "Windows")
            # SpecQuant (installer/sdist.py): Windows on Arm, without SVE and SME
            ggml_add_cpu_backend_variant(armv8.0_1)
            ggml_add_cpu_backend_variant(armv8.2_1    DOTPROD)
            ggml_add_cpu_backend_variant(armv8.2_2    DOTPROD FP16_VECTOR_ARITHMETIC)
            ggml_add_cpu_backend_variant(armv8.6_i8mm DOTPROD FP16_VECTOR_ARITHMETIC MATMUL_INT8)
"""
TOP = "CMakeLists.txt"
GGML = "vendor/llama.cpp/ggml/src/CMakeLists.txt"


def unforce(text: str, where: str = TOP) -> tuple[str, int]:
    """`text` with FORCE dropped from every `set(<FORCED> ... CACHE ... FORCE)`, and how many lines changed."""
    patched, count = _FORCE_LINE.subn(r"\1)", text)
    if count == 0:
        raise UserError(f"{where}: no `set(GGML_METAL ... FORCE)` to neutralise: llama-cpp-python's build files "
                        "changed, review installer/sdist.py")
    left = forced_switches(patched)
    if left:
        raise UserError(f"{where}: {', '.join(left)} still forced after the patch: review installer/sdist.py")
    return patched, count


def forced_switches(text: str) -> list[str]:
    """The switches of FORCED that `text` still sets with FORCE (a line at a time, comments skipped)."""
    found = []
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        m = re.match(r"\s*set\(\s*(\w+)\b.*\bFORCE\b", code)
        if m and m[1] in FORCED:
            found.append(m[1])
    return found


def add_windows_arm(text: str, where: str = GGML) -> str:
    """ggml's CMakeLists.txt with a Windows branch among the ARM CPU variants."""
    start = text.find(_ARM_LINUX)
    android = text.find(_ARM_ANDROID, start)
    if start < 0 or android < 0:
        raise UserError(f"{where}: ggml's ARM CPU variants are not where installer/sdist.py expects them: review it")
    return text[:android] + _ARM_WINDOWS + text[android:]


def patch_tree(root: Path) -> int:
    """Patch the unpacked sdist in `root` in place (both files, each once); how many FORCEs were dropped."""
    top, ggml = root / TOP, root / GGML
    for path in (top, ggml):
        if not path.is_file():
            raise UserError(f"{root.name} has no {path.relative_to(root)}: is it llama-cpp-python's sdist?")
    text, count = unforce(top.read_text(encoding="utf-8"), str(top))
    top.write_text(text, encoding="utf-8")
    ggml_text = ggml.read_text(encoding="utf-8")
    if _ARM_WINDOWS not in ggml_text:
        ggml.write_text(add_windows_arm(ggml_text, str(ggml)), encoding="utf-8")
    return count


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """The sdist's top folder, unpacked under `into`."""
    try:
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(into, filter="data")
            else:  # Python before 3.10.12 and 3.11.4
                tar.extractall(into)
    except (OSError, tarfile.TarError) as e:
        raise UserError(f"{sdist}: not a readable source archive ({e})") from None
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise UserError(f"{sdist}: expected one top folder, found {len(tops)}")
    return tops[0]
