"""The patch to llama-cpp-python 0.3.36's build files (installer/sdist.py), applied to the real sdist, and the
contents check's answers to what it prevents: Metal in the Intel app (but not Qt's own link to Metal), a CPU
variant missing, and the ARM bundles' baseline kernels (issue 64, points 2, 3 and 8)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from installer import contents, flavour, sdist
from runtime.errors import SpecQuantError, UserError
from runtime.machine import cpu_variant
from tests.test_installer_systems import macho, macos_app, stand_in, windows_bundle, with_cli


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real 0.3.36 sdist, unpacked: the copy build_installer.py keeps, else downloaded there once."""
    try:
        archive = flavour.fetch_sdist(flavour.default_wheel_dir("cpu-all-variants").parent / "sdist", timeout=300)
    except (UserError, SpecQuantError) as e:
        pytest.skip(f"llama-cpp-python's sdist cannot be fetched here: {e}")
    return sdist.unpack_sdist(archive, tmp_path_factory.mktemp("sdist"))


def variants_in(text: str) -> list[str]:
    return re.findall(r"ggml_add_cpu_backend_variant\((\S+?)[\s)]", text)


def branch(text: str, start: str, end: str) -> str:
    at = text.index(start)
    return text[at:text.index(end, at + len(start))]


def test_the_patch_frees_every_forced_switch_of_the_real_cmakelists(source: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(source, tree)
    before = (tree / sdist.TOP).read_text()
    assert set(sdist.forced_switches(before)) == set(sdist.FORCED)  # what 0.3.36 forces, every one of them
    assert sdist.patch_tree(tree) == 7  # six in `if (APPLE)`, and Emscripten's Metal OFF
    after = (tree / sdist.TOP).read_text()
    assert sdist.forced_switches(after) == []
    # The same lines, as defaults: upstream's values where CMAKE_ARGS says nothing.
    assert 'set(GGML_METAL "ON" CACHE BOOL "ggml: enable Metal")' in after
    assert 'set(GGML_AVX2 "OFF" CACHE BOOL "ggml: enable AVX2")' in after
    assert len(after.splitlines()) == len(before.splitlines())
    # Patching again is refused rather than silently doing nothing: the build patches a fresh copy each time.
    with pytest.raises(UserError, match=r"no `set\(GGML_METAL \.\.\. FORCE\)` to neutralise"):
        sdist.patch_tree(tree)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_cmake_args_now_decide_metal_on_an_intel_mac(source: Path, tmp_path: Path) -> None:
    """The `if (APPLE)` block as CMake runs it, before and after the patch, with the Intel Mac's -D flags."""
    def configure(text: str) -> str:
        block = branch(text, "    if (APPLE)\n", "\n    add_subdirectory(vendor/llama.cpp)")
        block = block.replace("COMMAND uname -m", "COMMAND echo x86_64")  # an Intel Mac, on any machine
        project = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
        project.mkdir()
        (project / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.16)\nproject(probe NONE)\nset(APPLE 1)\n" + block +
            '\nmessage(STATUS "probe: METAL=${GGML_METAL} AVX2=${GGML_AVX2}")\n')
        done = subprocess.run(["cmake", "-S", str(project), "-B", str(project / "build"), "-DGGML_METAL=OFF",
                               "-DGGML_AVX2=ON"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return re.search(r"probe: (.*)", done.stdout)[1]

    original = (source / sdist.TOP).read_text()
    assert configure(original) == "METAL=ON AVX2=OFF"  # the -D flags lose: what the Intel app shipped
    assert configure(sdist.unforce(original)[0]) == "METAL=OFF AVX2=ON"


def test_the_contents_check_expects_the_variants_ggml_really_builds(source: Path, tmp_path: Path) -> None:
    ggml = branch((source / sdist.GGML).read_text(), "if (GGML_CPU_ALL_VARIANTS)", "elseif (GGML_CPU)")
    x86 = branch(ggml, 'if (GGML_SYSTEM_ARCH STREQUAL "x86")', 'elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")')
    assert sorted(variants_in(x86)) == sorted(contents.CPU_VARIANTS[("macos", "x86_64")])  # GCC and clang's
    linux_arm = branch(ggml, 'if (CMAKE_SYSTEM_NAME MATCHES "Linux")\n            # Many', "elseif")
    assert variants_in(linux_arm) == list(contents.CPU_VARIANTS[("linux", "aarch64")])
    apple = branch(ggml, "elseif (APPLE)\n            ggml_add_cpu_backend_variant(apple", "else()")
    assert variants_in(apple) == list(contents.CPU_VARIANTS[("macos", "arm64")])
    assert 'message(FATAL_ERROR "Unsupported ARM target OS' in ggml  # what Windows on Arm met before the patch
    tree = tmp_path / "tree"
    shutil.copytree(source, tree)
    sdist.patch_tree(tree)
    patched = (tree / sdist.GGML).read_text()
    windows = branch(patched, 'elseif (CMAKE_SYSTEM_NAME MATCHES "Windows")', "elseif")
    assert variants_in(windows) == list(contents.CPU_VARIANTS[("windows", "arm64")])
    assert "SVE" not in windows.split("\n", 2)[2] and "SME" not in windows.split("\n", 2)[2]
    assert branch(patched, 'elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")', 'elseif (APPLE)').count("elseif (CMAKE") == 2


def test_a_changed_build_file_stops_the_patch_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^x/CMakeLists.txt: no `set\(GGML_METAL"):
        sdist.unforce('set(GGML_METAL "ON" CACHE BOOL "ggml: enable Metal")\n', "x/CMakeLists.txt")
    with pytest.raises(UserError, match=r"ARM CPU variants are not where"):
        sdist.add_windows_arm("if (GGML_CPU_ALL_VARIANTS)\nendif()\n")
    (tmp_path / "not-an-sdist").mkdir()
    with pytest.raises(UserError, match=r"not-an-sdist has no CMakeLists.txt"):
        sdist.patch_tree(tmp_path / "not-an-sdist")


# --- the contents check on what the patch is about --------------------------------------------------------

QTGUI = "Contents/Frameworks/PySide6/Qt/lib/QtGui.framework/Versions/A/QtGui"
METAL = "/System/Library/Frameworks/Metal.framework/Versions/A/Metal"


def intel_app(root: Path) -> Path:
    """An Intel app laid out as PyInstaller lays out PySide6: QtGui (which links Metal) in its framework."""
    app = macos_app(root, arch="x86_64")
    stand_in(app, {QTGUI: macho([METAL, "/System/Library/Frameworks/AppKit.framework/Versions/C/AppKit"])})
    return with_cli(app)


def test_qt_linking_metal_passes_the_intel_app_and_llama_cpp_linking_it_fails(tmp_path: Path) -> None:
    checks = contents.check_folder(intel_app(tmp_path / "qt"), "macos", "x86_64")
    assert checks[1] == "CPU variants " + ", ".join(sorted(contents.CPU_VARIANTS[("macos", "x86_64")]))
    app = intel_app(tmp_path / "metal")
    (app / "Contents/Frameworks/llama_cpp/lib/libggml-base.dylib").write_bytes(
        macho(["/usr/lib/libc++.1.dylib", METAL], install_name="@rpath/libggml-base.dylib"))
    with pytest.raises(SpecQuantError, match=r"libggml-base.dylib is Metal, which the Intel build leaves out"):
        contents.check_folder(app, "macos", "x86_64")


def test_an_intel_app_without_every_x86_variant_is_refused(tmp_path: Path) -> None:
    app = intel_app(tmp_path / "SpecQuant.app")
    for name in ("haswell", "zen4"):
        (app / f"Contents/Frameworks/llama_cpp/lib/libggml-cpu-{name}.so").unlink()
    with pytest.raises(SpecQuantError, match=r"^SpecQuant.app lacks ggml's CPU variants haswell, zen4 \(it holds "
                                             r"alderlake, cannonlake.*\)"):
        contents.check_folder(app, "macos", "x86_64")


ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 57  # a 64-bit ELF header with no program headers: read, links nothing


def linux_arm_bundle(root: Path, glibc: str) -> Path:
    """An aarch64 Linux bundle's layout, as PyInstaller makes it there, one library asking for `glibc`."""
    lib = "_internal/llama_cpp/lib/"
    folder = stand_in(root, {
        "specquant-app": ELF, "_internal/PySide6/Qt/plugins/platforms/libqxcb.so": ELF,
        "_internal/PySide6/Qt/plugins/platforms/libqoffscreen.so": ELF,
        "_internal/PySide6/Qt/lib/libQt6Core.so.6": ELF + f"\x00GLIBC_{glibc}\x00".encode(),
        **{f"{lib}lib{n}.so": ELF for n in ("llama", "ggml", "ggml-base", "ggml-rpc")},
        **{f"{lib}libggml-cpu-{v}.so": ELF for v in contents.CPU_VARIANTS[("linux", "aarch64")]},
        "_internal/llguidance/_lib.abi3.so": ELF,
        f"_internal/{contents.DEMO}": b"GGUF", f"_internal/{contents.EMBEDDING}": b"PK",
    })
    (folder / "specquant").symlink_to("specquant-app")
    return folder


def test_the_arm_bundles_hold_their_baseline_kernels_within_their_floors(tmp_path: Path) -> None:
    checks = contents.check_folder(linux_arm_bundle(tmp_path / "arm", "2.39"), "linux", "aarch64")
    assert checks[1].startswith("CPU variants armv8.0_1, armv8.2_1") and checks[-1].endswith("within glibc 2.39")
    with pytest.raises(SpecQuantError, match=r"libQt6Core.so.6 needs glibc 2.39, newer than 2.35"):
        contents.check_folder(linux_arm_bundle(tmp_path / "x86-floor", "2.39"), "linux", "aarch64", floor=(2, 35))
    no_base = linux_arm_bundle(tmp_path / "no-base", "2.39")
    (no_base / "_internal/llama_cpp/lib/libggml-cpu-armv8.0_1.so").unlink()
    with pytest.raises(SpecQuantError, match=r"lacks ggml's armv8.0_1 CPU backend \(every aarch64 CPU\)"):
        contents.check_folder(no_base, "linux", "aarch64")
    x86 = linux_arm_bundle(tmp_path / "x86-named", "2.35")
    with pytest.raises(SpecQuantError, match=r"lacks ggml's x64 CPU backend"):
        contents.check_folder(x86, "linux", "x86_64")  # an ARM bundle is no x86-64 one

    win = windows_bundle(tmp_path / "win-arm", arch="arm64")
    checks = contents.check_folder(win, "windows", "arm64")
    assert "CPU variants armv8.0_1, armv8.2_1, armv8.2_2, armv8.6_i8mm" in checks
    assert checks[-1].endswith("within Windows 10.0.22000")
    (win / "_internal/llama_cpp/lib/ggml-cpu-armv8.2_2.dll").unlink()
    with pytest.raises(SpecQuantError, match=r"lacks ggml's CPU variants armv8.2_2 "):
        contents.check_folder(win, "windows", "arm64")
    assert contents.baseline_cpu("windows", "arm64") == contents.baseline_cpu("linux", "arm64") == "armv8.0_1"
    assert contents.baseline_cpu("macos", "arm64") == "apple_m1"


def test_the_runtime_finds_the_arm_variants_by_their_dotted_names(tmp_path: Path) -> None:
    """SpecQuant's own choice of CPU kernels (runtime.machine.cpu_variant) must see ARM's variants, whose names
    hold a dot; without them it would say that this CPU is not supported."""
    lib = linux_arm_bundle(tmp_path / "arm", "2.39") / "_internal/llama_cpp/lib"
    found = cpu_variant.variant_libraries(lib)
    assert [cpu_variant.variant_name(p) for p in found] == sorted(contents.CPU_VARIANTS[("linux", "aarch64")])
    assert [p.name for p in cpu_variant.other_backends(lib)] == ["libggml-rpc.so"]
