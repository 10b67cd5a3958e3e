"""The bundle's contents check: everything a first start needs is inside, and nothing asks for more than the
target's oldest supported system has. The release workflow runs it on every file before the upload.

    python -m installer.contents BUNDLE --system linux|windows|macos [--arch x86_64|arm64] [--without-demo]

BUNDLE is the Linux .tar.gz (or an unpacked bundle folder), the Windows bundle folder that the setup packs,
or the macOS .app. It checks for: both programs; Qt's native and offscreen platform plugins; llama.cpp with
ggml's base, RPC and baseline CPU backends, and the OpenMP runtime wherever a library links one; llguidance;
the demo model and the embedding model; and the system floor (installer.release's Target.floor): glibc on
Linux, every Mach-O file's minimum macOS and the backends' rpaths on macOS, and on Windows the programs' UTF-8
code page, their subsystem version and no import of a runtime that Windows itself lacks. A missing piece is
an error of one line that names it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from installer import binaries
from installer.linux import glibc_needed
from installer.metadata import this_arch
from installer.release import floor_of
from runtime.errors import SpecQuantError, UserError, run_command

SYSTEMS = ("linux", "windows", "macos")
LIB = "llama_cpp/lib/"
DEMO = "models/SmolLM2-135M-Instruct.Q4_1.gguf"  # converters.sources.DEMO_FILE, in the spec's models/
EMBEDDING = "models/all_minilm_l6_v2/model.zip"  # converters.embedding.package_zip() in a bundle
# OpenMP runtimes a library may link: GCC's, LLVM's (and Visual Studio's copy of it), Intel's, MSVC's own.
OPENMP = re.compile(r"^(libgomp|libomp|libiomp5|vcomp)[\w.-]*\.(so[.\d]*|dylib|dll)$", re.IGNORECASE)
# Windows: runtimes that come with a compiler, not with Windows: an import of one the bundle does not carry
# fails on a clean computer (the runner has them all installed, so running the program proves nothing).
REDISTRIBUTABLE = re.compile(
    r"^(vcruntime|msvcp|concrt|vccorlib|vcomp|libomp|libiomp|libgomp|libwinpthread|libstdc\+\+|libgcc|cudart|"
    r"cublas)[\w.-]*\.dll$", re.IGNORECASE)
# The UTF-8 code page entry of installer/templates/specquant.manifest, as PyInstaller embeds it.
UTF8_CODE_PAGE = re.compile(rb"<activeCodePage[^>]*>\s*UTF-8\s*</activeCodePage>")
# The CPU variants ggml 0.3.36 builds with GGML_CPU_ALL_VARIANTS (ggml/src/CMakeLists.txt), each system and
# architecture: every one must be in the bundle, the first is the baseline every processor of the
# architecture runs (the others are chosen per machine at run time). x86-64 has all fourteen with GCC and
# clang (MSVC, which the release does not use, would drop five). Windows on Arm has no variants upstream: the
# sdist patch (installer/sdist.py) gives it these four, without SVE and SME, which no Windows on Arm
# processor has.
_X86 = ("x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex", "cannonlake", "cascadelake",
        "icelake", "cooperlake", "zen4", "alderlake", "sapphirerapids")
_ARM_LINUX = ("armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.2_3", "armv8.6_1", "armv8.6_2", "armv9.2_1", "armv9.2_2")
CPU_VARIANTS = {
    ("linux", "x86_64"): _X86, ("windows", "x86_64"): _X86, ("macos", "x86_64"): _X86,
    ("linux", "aarch64"): _ARM_LINUX,
    ("windows", "arm64"): ("armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.6_i8mm"),
    ("macos", "arm64"): ("apple_m1", "apple_m2_m3", "apple_m4"),
}
ARCHES = ("x86_64", "arm64", "aarch64")  # as installer.metadata.this_arch() names them


def baseline_cpu(system: str, arch: str) -> str:
    """The CPU variant every processor of `arch` runs on `system`: x64, armv8.0_1, apple_m1."""
    return CPU_VARIANTS[variants_key(system, arch)][0]


def variants_key(system: str, arch: str) -> tuple[str, str]:
    """Linux names ARM64 aarch64, Windows and macOS arm64: either spelling finds that system's list."""
    if arch in ("arm64", "aarch64"):
        arch = "aarch64" if system == "linux" else "arm64"
    return system, arch


SYSTEM_LIBRARIES = ("/usr/lib/", "/System/Library/")  # macOS: what every Mac has at an absolute path


@dataclass(frozen=True)
class Need:
    what: str  # named in the error: "Qt's xcb platform plugin"
    pattern: str  # a regular expression on the path inside the bundle, with forward slashes


def _lib(name: str) -> str:
    """One of llama.cpp's libraries by name, as each system spells it (libggml-base.so, ggml-base.dll, ...)."""
    return rf"(^|/){LIB}(lib)?{re.escape(name)}\.(so|dylib|dll)$"


def needs(system: str, arch: str, demo: bool = True) -> list[Need]:
    """What the bundle for `system` and `arch` must hold."""
    exe = {"windows": ".exe"}.get(system, "")
    where = "Contents/MacOS/" if system == "macos" else ""
    platform = {"linux": "xcb", "windows": "windows", "macos": "cocoa"}[system]
    suffix = {"linux": "so", "windows": "dll", "macos": "dylib"}[system]
    found = [
        Need("the specquant-app program", rf"^{where}specquant-app{re.escape(exe)}$"),
        Need("the specquant command", rf"^{where}specquant{re.escape(exe)}$"),
        Need(f"Qt's {platform} platform plugin (the window)", rf"(^|/)platforms/(lib)?q{platform}\.{suffix}$"),
        Need("Qt's offscreen platform plugin (--self-test)", rf"(^|/)platforms/(lib)?qoffscreen\.{suffix}$"),
        Need("llama.cpp (libllama)", _lib("llama")),
        Need("ggml (libggml)", _lib("ggml")),
        Need("ggml's base library", _lib("ggml-base")),
        Need("ggml's RPC backend (specquant worker, --rpc)", _lib("ggml-rpc")),
        Need(f"ggml's {baseline_cpu(system, arch)} CPU backend (every {arch} CPU)",
             _lib(f"ggml-cpu-{baseline_cpu(system, arch)}")),
        Need("llguidance (constrained output)", r"(^|/)llguidance/[^/]+\.(so|pyd)$"),
        Need("the embedding model (search by meaning)", rf"(^|/){re.escape(EMBEDDING)}$"),
    ]
    if demo:
        found.append(Need("the demo model", rf"(^|/){re.escape(DEMO)}$"))
    return found


def paths(root: Path) -> list[str]:
    """Every file and link under `root`, as a path inside it with forward slashes."""
    return sorted(PurePosixPath(p.relative_to(root).as_posix()).as_posix() for p in root.rglob("*")
                  if p.is_symlink() or p.is_file())


def missing(names: Sequence[str], wanted: Sequence[Need]) -> list[str]:
    """What of `wanted` no name in `names` satisfies."""
    return [need.what for need in wanted if not any(re.search(need.pattern, n) for n in names)]


def _binaries(root: Path, names: Sequence[str]) -> Iterator[tuple[str, binaries.Binary]]:
    for name in names:
        path = root / name
        if path.is_symlink() or path.suffix in (".py", ".pyc", ".gguf", ".zip", ".qm", ".json", ".txt", ".png"):
            continue
        found = binaries.read(path)
        if found is not None:
            yield name, found


_VARIANT = re.compile(rf"(^|/){LIB}(lib)?ggml-cpu-(?P<name>[\w.]+)\.(so|dylib|dll)$")


def cpu_variants(names: Sequence[str]) -> list[str]:
    """The CPU variants the bundle holds, by name (haswell, armv8.2_1, apple_m4)."""
    return sorted({m["name"] for n in names if (m := _VARIANT.search(n))})


def variants_missing(names: Sequence[str], system: str, arch: str) -> list[str]:
    """The CPU variants ggml builds for `system` and `arch` that the bundle lacks (on an Intel Mac, the
    sign that a forced switch of llama-cpp-python's CMakeLists.txt took effect after all)."""
    held = set(cpu_variants(names))
    return [v for v in CPU_VARIANTS[variants_key(system, arch)] if v not in held]


def openmp_missing(found: Sequence[tuple[str, binaries.Binary]], names: Sequence[str]) -> list[str]:
    """'LIB needs RUNTIME' for each OpenMP runtime a library links that the bundle does not carry."""
    present = {PurePosixPath(n).name.lower() for n in names}
    return [f"{PurePosixPath(name).name} links the OpenMP runtime {lib}, which the bundle lacks"
            for name, b in found for lib in b.needed if OPENMP.match(PurePosixPath(lib).name)
            and PurePosixPath(lib).name.lower() not in present]


def windows_problems(root: Path, found: Sequence[tuple[str, binaries.Binary]], names: Sequence[str],
                     floor: tuple[int, ...], system32: Path | None) -> list[str]:
    """The programs' UTF-8 code page, each file's subsystem version, and each import Windows must provide."""
    problems = []
    for exe in ("specquant-app.exe", "specquant.exe"):
        if (root / exe).is_file() and not UTF8_CODE_PAGE.search((root / exe).read_bytes()):
            problems.append(f"{exe} has no UTF-8 code page in its manifest (installer/templates/specquant.manifest)")
    present = {PurePosixPath(n).name.lower() for n in names}
    for name, b in found:
        if b.kind != "pe":
            continue
        if b.min_os and b.min_os > floor[:2]:
            problems.append(f"{name} needs Windows {'.'.join(map(str, b.min_os))}, newer than {floor[0]}.{floor[1]}")
        for dll in b.needed:
            low = dll.lower()
            if low in present or low.startswith(("api-ms-win-", "ext-ms-")) or OPENMP.match(dll):  # OpenMP: above
                continue
            if REDISTRIBUTABLE.match(dll) or (system32 is not None and not (system32 / dll).exists()):
                problems.append(f"{name} imports {dll}, which neither the bundle nor Windows has")
    return problems


def resolves(name: str, dep: str, rpaths: Sequence[str], root: Path) -> bool:
    """Whether a Mach-O dependency of the file `name` (inside `root`) is found inside the bundle."""
    here = (root / name).resolve().parent
    executable = root / "Contents" / "MacOS"

    def place(text: str) -> Path:
        return Path(text.replace("@loader_path", str(here)).replace("@executable_path", str(executable)))

    if dep.startswith("@rpath/"):
        return any((place(r) / dep.removeprefix("@rpath/")).exists() for r in rpaths)
    if dep.startswith(("@loader_path/", "@executable_path/")):
        return place(dep).exists()
    return dep.startswith(SYSTEM_LIBRARIES)


def macos_problems(root: Path, found: Sequence[tuple[str, binaries.Binary]], floor: tuple[int, ...],
                   arch: str) -> list[str]:
    """Every Mach-O file's minimum macOS, llama.cpp's libraries' rpaths, and no Metal on Intel."""
    problems = []
    for name, b in found:
        if b.kind != "macho":
            continue
        if b.min_os and b.min_os > floor[:2]:
            problems.append(f"{name} needs macOS {b.min_os[0]}.{b.min_os[1]}, newer than {floor[0]}.{floor[1]}")
        if LIB in name:  # ggml's backend modules: loaded by path at run time, their own rpaths must do
            for dep in b.needed:
                if not resolves(name, dep, b.rpaths, root):
                    rp = ", ".join(b.rpaths) or "no rpath"
                    problems.append(f"{PurePosixPath(name).name} cannot find {dep} inside the app ({rp})")
        # Only llama.cpp's own libraries: Qt's QtGui links Metal.framework in every PySide6 app.
        if arch == "x86_64" and LIB in name and (
                "ggml-metal" in name or any("Metal.framework" in d for d in b.needed)):
            problems.append(f"{name} is Metal, which the Intel build leaves out (GGML_METAL=OFF)")
    return problems


def check_folder(root: Path, system: str, arch: str, demo: bool = True, system32: Path | None = None,
                 floor: tuple[int, ...] | None = None) -> list[str]:
    """What was checked, in a few words each; SpecQuantError naming the first thing missing or too new.
    `floor`: the release's (installer.release's Target.floor) unless given: a build on a newer system than
    the release job's checks against its own."""
    floor = floor or floor_of(system, arch)
    names = paths(root)
    lacking = missing(names, needs(system, arch, demo))
    if lacking:
        raise SpecQuantError(f"{root.name} lacks {lacking[0]}" + (f" (and {len(lacking) - 1} more: "
                             f"{'; '.join(lacking[1:])})" if len(lacking) > 1 else ""))
    lacking = variants_missing(names, system, arch)
    if lacking:
        raise SpecQuantError(f"{root.name} lacks ggml's CPU variants {', '.join(lacking)} (it holds "
                             f"{', '.join(cpu_variants(names)) or 'none'}): llama.cpp was built with other switches")
    found = list(_binaries(root, names))
    problems = openmp_missing(found, names)
    if system == "linux":
        needed, by = glibc_needed(root)
        if needed > floor:
            where = by.relative_to(root) if by else "?"
            problems.append(f"{where} needs glibc {needed[0]}.{needed[1]}, newer than {floor[0]}.{floor[1]}")
    elif system == "windows":
        problems += windows_problems(root, found, names, floor, system32)
    else:
        problems += macos_problems(root, found, floor, arch)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecQuantError(problems[0] + more)
    omp = sorted({lib for _, b in found for lib in b.needed if OPENMP.match(PurePosixPath(lib).name)})
    floor_text = {"linux": "glibc", "windows": "Windows", "macos": "macOS"}[system] + " " + ".".join(map(str, floor))
    return [f"contents: {len(needs(system, arch, demo))} parts present",
            f"CPU variants {', '.join(cpu_variants(names))}",
            f"OpenMP runtime {', '.join(omp)} bundled" if omp else "no OpenMP runtime linked",
            f"{len(found)} binaries within {floor_text}"]


def bundle_root(path: Path, system: str, into: Path) -> Path:
    """The bundle inside `path`: a Linux tarball is unpacked into `into`; a folder or .app is itself."""
    if path.is_dir():
        return path
    if system != "linux" or not path.name.endswith(".tar.gz"):
        raise UserError(f"{path}: give the bundle folder (Windows) or the .app (macOS), or a Linux .tar.gz")
    with tarfile.open(path) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="tar")
        else:  # Python before 3.10.12 and 3.11.4
            tar.extractall(into)
    programs = sorted(into.glob("*/*/specquant-app"))
    if not programs:
        raise SpecQuantError(f"{path.name} holds no bundle (no TOP/FOLDER/specquant-app)")
    return programs[0].parent


def check(path: Path, system: str, arch: str | None = None, demo: bool = True,
          floor: tuple[int, ...] | None = None) -> list[str]:
    """The contents check on a bundle folder, an .app or a Linux tarball."""
    if not path.exists():
        raise UserError(f"{path} does not exist: build it with build_installer.py --with-demo-model")
    arch = arch or this_arch()
    if variants_key(system, arch) not in CPU_VARIANTS:
        raise UserError(f"no {system} build for the architecture {arch!r}: {', '.join(ARCHES)}")
    system32 = Path(os.environ.get("SYSTEMROOT", "C:/Windows")) / "System32" if sys.platform == "win32" else None
    with tempfile.TemporaryDirectory(prefix="specquant-contents-") as tmp:
        return check_folder(bundle_root(path, system, Path(tmp)), system, arch, demo, system32, floor)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m installer.contents", description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path, help="the Linux .tar.gz, the Windows bundle folder or the macOS .app")
    p.add_argument("--system", required=True, choices=SYSTEMS)
    p.add_argument("--arch", choices=ARCHES, help="default: this machine's")
    p.add_argument("--without-demo", action="store_true", help="a build without --with-demo-model")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        checks = check(args.bundle, args.system, args.arch, demo=not args.without_demo)
        print(f"contents: {args.bundle.name} passed: {'; '.join(checks)}")
        return 0

    return run_command("contents", body)


if __name__ == "__main__":
    sys.exit(main())
