"""build_installer.py: generated installer scripts, the refusal of non-portable llama.cpp builds, and (slow) a
real Linux bundle installed into a scratch home and started with no Python on PATH."""

from __future__ import annotations

import configparser
import json
import os
import platform
import plistlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from converters import sources
from installer import bundle, contents, flavour, lean, linux, macos, selftest, windows
from installer.linux import glibc_needed
from installer.metadata import Meta, read_meta
from installer.release import GLIBC_FLOOR
from runtime.documents.embed import model_path
from runtime.errors import SpecQuantError, UserError
from runtime.machine import cpu_variant
from tests.conftest import REPO, assert_one_line_error

META = Meta("SpecQuant", "1.2.3", "Desktop LLM runtime", with_demo=True)
CLEAN_PATH = "/usr/bin:/bin"


def build_installer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "build_installer.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
    )


def fake_wheel_folder(folder: Path, flags: str, libs: list[str]) -> Path:
    """A flavour folder as setup.sh writes it: a FLAGS file and a wheel holding these library names."""
    folder.mkdir(parents=True)
    (folder / "FLAGS").write_text(flags + "\n")
    with zipfile.ZipFile(folder / f"llama_cpp_python-{flavour.LLAMA_VERSION}-py3-none-linux_x86_64.whl", "w") as zf:
        for name in libs:
            zf.writestr(name, b"\x7fELF")
    return folder


# --- generated scripts ---------------------------------------------------------------------------------


def parse_desktop(text: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  (keys are case-sensitive)
    parser.read_string(text)
    return dict(parser["Desktop Entry"])


def test_desktop_entry_is_a_launchable_application() -> None:
    entry = parse_desktop(linux.desktop_entry(META))
    assert entry["Type"] == "Application"
    assert entry["Name"] == "SpecQuant"
    assert entry["Exec"] == '"@APPDIR@/specquant-app"'  # the install script puts the real folder in
    assert entry["Icon"] == "specquant"
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";") and "Utility" in entry["Categories"].split(";")
    assert entry["StartupWMClass"] == "specquant-app"


def test_install_scripts_are_valid_shell_with_every_placeholder_filled() -> None:
    for text in (linux.install_script(META), linux.uninstall_script(META)):
        assert set(re.findall(r"@[A-Z_]+@", text)) <= {"@APPDIR@"}
        assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
    install = linux.install_script(META)
    assert "specquant-app" in install and "uninstall.sh" in install and "applications" in install


def iss_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = []
        else:
            sections[current].append(line)
    return sections


def test_inno_setup_script_has_name_version_start_menu_and_uninstaller() -> None:
    text = windows.inno_script(META, "SpecQuant-1.2.3-windows-x86_64", "SpecQuant-1.2.3-windows-x86_64-setup")
    sections = iss_sections(text)
    assert '#define AppName "SpecQuant"' in sections[""] and '#define AppVersion "1.2.3"' in sections[""]
    setup = dict(line.split("=", 1) for line in sections["Setup"] if not line.startswith("#"))
    # Signed only when compiled with /DSign (a release with a certificate: installer/signing.py).
    signing = sections["Setup"][sections["Setup"].index("#ifdef Sign"):]
    assert signing[:3] == ["#ifdef Sign", "SignTool=specquant", "#endif"]
    assert setup["AppName"] == "{#AppName}" and setup["AppVersion"] == "{#AppVersion}"
    assert re.fullmatch(r"\{\{[0-9A-F-]{36}\}", setup["AppId"])
    assert setup["PrivilegesRequired"] == "lowest" and setup.get("Uninstallable", "yes") == "yes"
    assert setup["OutputBaseFilename"] == "SpecQuant-1.2.3-windows-x86_64-setup"
    assert any(line.startswith('Source: "SpecQuant-1.2.3-windows-x86_64\\*"') for line in sections["Files"])
    icons = sections["Icons"]
    assert any('Name: "{group}\\{#AppName}"' in i and 'Filename: "{app}\\specquant-app.exe"' in i for i in icons)
    assert any('Filename: "{uninstallexe}"' in i for i in icons)
    assert windows.app_id(META) == windows.app_id(Meta("SpecQuant", "9.9", "x"))  # upgrades keep one entry


def test_macos_info_plist_parses_with_name_version_and_identifier() -> None:
    plist = plistlib.loads(plistlib.dumps(macos.info_plist(META)))
    assert plist["CFBundleName"] == "SpecQuant"
    assert plist["CFBundleShortVersionString"] == "1.2.3" and plist["CFBundleVersion"] == "1.2.3"
    assert plist["CFBundleExecutable"] == "specquant-app"
    assert re.fullmatch(r"[A-Za-z0-9.-]+", plist["CFBundleIdentifier"])
    assert plist["NSHighResolutionCapable"] is True


def test_metadata_comes_from_pyproject() -> None:
    meta = read_meta(REPO, "SpecQuant", with_demo=False)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", meta.version)
    assert meta.slug == "specquant"
    assert meta.artefact_base("linux").startswith(f"SpecQuant-{meta.version}-linux-")
    assert Meta("My App", "1", "", with_demo=True).artefact_base("linux").endswith("-demo")


# --- the Linux tarball's install and uninstall scripts, on a stand-in bundle --------------------------------

ODD = "Dossier partagé"  # a space and a letter beyond ASCII


def stand_in_tarball(folder: Path) -> Path:
    """A real tarball (linux.write_tarball) around a bundle whose program only says it started."""
    bundle_dir = folder / "bundle"
    bundle_dir.mkdir(parents=True)
    program = bundle_dir / "specquant-app"
    program.write_text('#!/bin/sh\necho "started $0"\n')
    program.chmod(0o755)
    (bundle_dir / "specquant").symlink_to("specquant-app")
    tarball = folder / f"{META.artefact_base('linux')}.tar.gz"
    linux.write_tarball(bundle_dir, REPO / "assets" / "icon.png", META, tarball)
    return tarball


def unpacked(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball) as tar:
        tar.extractall(into, filter="tar")
    (top,) = into.iterdir()
    return top


@pytest.mark.parametrize("xdg", [False, True], ids=["default", "XDG_DATA_HOME"])
def test_install_to_menu_from_odd_paths_and_uninstall_keeps_the_models(tmp_path: Path, xdg: bool) -> None:
    top = unpacked(stand_in_tarball(tmp_path / f"{ODD} téléchargé"), tmp_path / ODD / "décompressé ici")
    home = tmp_path / f"maison {ODD}"
    home.mkdir()
    data = tmp_path / f"données {ODD}" if xdg else home / ".local/share"
    env = {"XDG_DATA_HOME": str(data)} if xdg else {}
    installed = run_clean(["sh", str(top / "install.sh")], home, 60, **env)
    assert installed.returncode == 0, installed.stderr
    program = data / "specquant-app"
    assert f"installed in {program}" in installed.stdout

    desktop = data / "applications" / "specquant.desktop"
    entry = parse_desktop(desktop.read_text(encoding="utf-8"))
    (exec_path,) = shlex.split(entry["Exec"])  # the spec's quoting, for a path without ", `, $ or \
    assert exec_path == str(program / "specquant-app") and entry["TryExec"] == exec_path
    assert subprocess.run([exec_path], capture_output=True, text=True).stdout.startswith("started ")
    if shutil.which("desktop-file-validate"):
        checked = subprocess.run(["desktop-file-validate", str(desktop)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (data / "icons/hicolor/256x256/apps/specquant.png").read_bytes() == (REPO / "assets/icon.png").read_bytes()
    assert os.readlink(home / ".local/bin/specquant-app") == str(program / "specquant-app")

    # The user's models and chats, settings and a source install's compiled wheels.
    (data / "specquant/models/demo").mkdir(parents=True)
    (data / "specquant/conversations.sqlite3").write_bytes(b"chats")
    (home / ".config/SpecQuant").mkdir(parents=True)
    (home / ".cache/specquant/wheels").mkdir(parents=True)
    (home / ".cache/specquant/cpu-variant").mkdir(parents=True)
    removed = run_clean(["sh", str(program / "uninstall.sh")], home, 60, **env)
    assert removed.returncode == 0, removed.stderr
    assert not program.exists() and not desktop.exists() and not (home / ".local/bin/specquant").exists()
    assert not (data / "icons/hicolor/256x256/apps/specquant.png").exists()
    assert (data / "specquant/conversations.sqlite3").read_bytes() == b"chats" and (data / "specquant/models").is_dir()
    assert f"still in {data / 'specquant'}" in removed.stdout

    assert run_clean(["sh", str(top / "install.sh")], home, 60, **env).returncode == 0
    bogus = run_clean(["sh", str(program / "uninstall.sh"), "--everything"], home, 60, **env)
    assert_one_line_error(bogus, "--everything", "--delete-data")
    assert program.is_dir()
    purged = run_clean(["sh", str(program / "uninstall.sh"), "--delete-data"], home, 60, **env)
    assert purged.returncode == 0, purged.stderr
    assert not (data / "specquant").exists() and not (home / ".config/SpecQuant").exists()
    assert not (home / ".cache/specquant/cpu-variant").exists()
    assert (home / ".cache/specquant/wheels").is_dir()  # a source install's wheels are not the bundle's
    assert not program.exists()


def test_install_relays_the_programs_check_of_the_windows_libraries(tmp_path: Path) -> None:
    """The install stands, and the user reads which libraries the window lacks (`specquant-app --check-display`
    names them; test_app_startup checks that against the loader)."""
    tarball = stand_in_tarball(tmp_path / "src")
    top = unpacked(tarball, tmp_path / "unpacked")
    lacking = "specquant-app: cannot open a window: this system lacks libxcb-cursor.so.0"
    (top / "specquant" / "specquant-app").write_text(
        f'#!/bin/sh\n[ "$1" = --check-display ] && {{ echo "{lacking}"; exit 1; }}\necho "started $0"\n')
    home = tmp_path / "home"
    home.mkdir()
    installed = run_clean(["sh", str(top / "install.sh")], home, 60)
    assert installed.returncode == 0, installed.stderr
    assert installed.stderr.strip() == lacking and "installed in" in installed.stdout


def test_install_refuses_a_relative_xdg_data_home_and_an_unquotable_folder(tmp_path: Path) -> None:
    top = unpacked(stand_in_tarball(tmp_path / "src"), tmp_path / "unpacked")
    home = tmp_path / "home"
    home.mkdir()
    relative = run_clean(["sh", str(top / "install.sh")], home, 60, XDG_DATA_HOME="share")
    assert_one_line_error(relative, "XDG_DATA_HOME 'share'", "absolute")
    dollar = run_clean(["sh", str(top / "install.sh")], home, 60, XDG_DATA_HOME=str(tmp_path / "a$b"))
    assert_one_line_error(dollar, "a$b")
    assert not (home / ".local").exists()


def test_glibc_floor_is_the_newest_version_any_library_needs(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/libold.so").write_bytes(b"\x7fELF....\x00GLIBC_2.17\x00GLIBC_2.2.5\x00")
    # Adjacent names share their NULs: the newest one here follows another directly.
    (tmp_path / "lib/libnew.so").write_bytes(b"\x7fELF....\x00GLIBC_2.28\x00GLIBC_2.34\x00GLIBC_PRIVATE\x00")
    (tmp_path / "notes.txt").write_bytes(b"\x00GLIBC_2.99\x00")  # not an ELF file
    (tmp_path / "lib/link.so").symlink_to("libnew.so")
    assert linux.glibc_needed(tmp_path) == ((2, 34), tmp_path / "lib/libnew.so")
    assert linux.glibc_needed(tmp_path / "lib" / "..")[0] == (2, 34)


# --- what goes into the bundle --------------------------------------------------------------------------


def test_lean_keeps_the_platform_plugins_and_english_only() -> None:
    assert lean.keep_plugin("platforms", "/x/plugins/platforms/libqxcb.so")
    assert lean.keep_plugin("platforms", "/x/plugins/platforms/libqoffscreen.so")
    assert lean.keep_plugin("platforms", "C:/x/plugins/platforms/qwindows.dll")
    assert not lean.keep_plugin("platforms", "/x/plugins/platforms/libqwayland.so")
    assert not lean.keep_plugin("platformthemes", "/x/plugins/platformthemes/libqgtk3.so")
    assert not lean.keep_plugin("platforminputcontexts", "/x/libqtvirtualkeyboardplugin.so")
    assert not lean.keep("PySide6/Qt/translations/qtbase_de.qm")
    assert not lean.keep("pyphen/dictionaries/hyph_de_DE.dic")
    assert lean.keep("pyphen/dictionaries/hyph_en_US.dic")
    assert lean.keep("PySide6/Qt/lib/libQt6Core.so.6")


@pytest.mark.skipif(sys.platform == "win32", reason="Windows bundles keep DLLs as they are")
def test_identical_llama_libraries_become_links(tmp_path: Path) -> None:
    package = tmp_path / "site" / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (tmp_path / "site" / "bin").mkdir()
    for name in ("libllama.so", "libllama.so.0", "libllama.so.0.5.0"):
        (package / "lib" / name).write_bytes(b"llama")
    (package / "lib" / "libggml.so").write_bytes(b"ggml")
    (tmp_path / "site" / "bin" / "libggml-cpu-haswell.so").write_bytes(b"haswell")
    for folder in (package / "lib", tmp_path / "site" / "bin"):  # the RPC backend: in both, under one name
        (folder / "libggml-rpc.so").write_bytes(b"rpc")
    files, links = bundle.llama_libraries(package)
    names = ["libggml-cpu-haswell.so", "libggml-rpc.so", "libggml.so", "libllama.so"]
    assert sorted(Path(f).name for f in files) == names
    assert sorted(links) == [("libllama.so.0", "libllama.so"), ("libllama.so.0.5.0", "libllama.so")]


# --- refusals: one line, exit 2 -------------------------------------------------------------------------

VARIANTS = ["llama_cpp/lib/libllama.so", "bin/libggml-cpu-x64.so", "bin/libggml-cpu-haswell.so"]


def test_a_native_build_is_refused(tmp_path: Path) -> None:
    wheels = fake_wheel_folder(tmp_path / "native", "-DGGML_NATIVE=ON -DGGML_BACKEND_DL=ON", VARIANTS)
    result = build_installer("--out", str(tmp_path / "out"), "--wheels", str(wheels))
    assert_one_line_error(result, "GGML_NATIVE=ON")
    assert not list((tmp_path / "out").iterdir())


def test_a_build_without_dynamic_backends_is_refused(tmp_path: Path) -> None:
    wheels = fake_wheel_folder(tmp_path / "avx2", "-DGGML_NATIVE=OFF -DGGML_AVX2=ON", VARIANTS)
    assert_one_line_error(build_installer("--out", str(tmp_path / "out"), "--wheels", str(wheels)), "GGML_BACKEND_DL")


def test_a_single_cpu_library_is_refused(tmp_path: Path) -> None:
    wheels = fake_wheel_folder(tmp_path / "single", flavour.PORTABLE, ["llama_cpp/lib/libggml-cpu.so"])
    result = build_installer("--out", str(tmp_path / "out"), "--wheels", str(wheels))
    assert_one_line_error(result, "single libggml-cpu")
    with pytest.raises(UserError, match="single libggml-cpu"):
        flavour.check_libraries(["libggml-base.so", "libggml-cpu.so", "libllama.so"], tmp_path)
    flavour.check_libraries(["libggml-cpu-x64.so", "libggml-cpu-haswell.so"], tmp_path)


def test_bad_out_and_missing_wheel_folder_are_one_line_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_one_line_error(build_installer("--out", str(blocker / "out")), "--out")
    missing = tmp_path / "no-such-wheels"
    assert_one_line_error(build_installer("--out", str(tmp_path / "out"), "--wheels", str(missing)), "no such folder")


def test_build_installer_in_a_bare_python_names_what_it_needs() -> None:
    bare = subprocess.run([sys.executable, "-I", "-S", str(REPO / "build_installer.py"), "--help"],
                          capture_output=True, text=True, cwd=REPO)
    assert_one_line_error(bare, "pip install platformdirs filelock")


# --- the runtime's side of a bundle ---------------------------------------------------------------------


def test_bundled_demo_model_is_found_inside_a_frozen_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    with pytest.raises(UserError, match="without the demo model"):
        sources.demo_gguf()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / sources.DEMO_FILE).write_bytes(b"GGUF")
    assert sources.demo_gguf() == tmp_path / "models" / sources.DEMO_FILE


# --- the real thing -------------------------------------------------------------------------------------


def run_clean(cmd: list[str], home: Path, timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
    """`cmd` as from a fresh login: a scratch home, no Python on PATH, nothing inherited."""
    return subprocess.run(
        cmd, env={"HOME": str(home), "PATH": CLEAN_PATH, **env}, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the Linux installer is built and tested on Linux")
def test_linux_bundle_installs_and_passes_its_self_test(tmp_path: Path) -> None:
    started = time.monotonic()
    out = tmp_path / "out"
    built = build_installer("--out", str(out), "--with-demo-model", timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    tarballs = list(out.glob("SpecQuant-*-linux-*-demo.tar.gz"))
    assert len(tarballs) == 1 and not list(out.glob("*.partial")) and not list(out.glob(".build-*"))
    assert re.search(rf"{re.escape(str(tarballs[0]))}\s+[\d.]+ MB\s+sha256 [0-9a-f]{{64}}", built.stdout)
    build_s = time.monotonic() - started
    # The release job's contents check (installer/contents.py) on the very tarball: every part, and no library
    # newer than the glibc here (the release's own floor, 2.35, holds only for a build on Ubuntu 22.04: below).
    here = tuple(int(n) for n in platform.libc_ver()[1].split(".")[:2])
    checks = contents.check(tarballs[0], "linux", "x86_64", floor=max(here, GLIBC_FLOOR))
    print(f"contents check: {'; '.join(checks)}")
    # llama.cpp's libgomp.so.1, and sentencepiece's own copy (auditwheel renames what its wheel carries).
    assert checks[0] == "contents: 12 parts present", checks
    # Every x86-64 variant ggml builds, the baseline x64 among them (issue 64: the check lists what it found).
    assert checks[1] == "CPU variants " + ", ".join(sorted(contents.CPU_VARIANTS[("linux", "x86_64")])), checks
    assert checks[2].startswith("OpenMP runtime ") and "libgomp.so.1" in checks[2].split(), checks
    assert (out / "logs" / "pyinstaller.log").is_file()  # the build's evidence, kept beside the artefacts

    # The release job's own self-test (installer/selftest.py): installed from and into folders named with a
    # space and an accent, the glibc floor, the self-test offscreen and in a window on Xvfb.
    installed = selftest.linux_install(tarballs[0], tmp_path)
    home, program = installed.home, installed.program
    assert " " in str(program) and not str(program).isascii()
    needed, by = glibc_needed(program)
    print(f"glibc floor {needed[0]}.{needed[1]} ({by.relative_to(program) if by else None})")
    if needed > GLIBC_FLOOR:  # built on a newer system than the release job's: the contents check names it
        with pytest.raises(SpecQuantError, match=rf"^{re.escape(str(by.relative_to(program)))} needs glibc "):
            contents.check_folder(program, "linux", "x86_64")
    assert needed >= (2, 17)  # the scan found the bundle's requirements (this machine's own floor may be higher)
    if shutil.which("objdump"):  # binutils' own reading of the version references agrees
        refs = [subprocess.run(["objdump", "-p", str(f)], capture_output=True, text=True).stdout
                for f in program.rglob("*") if f.is_file() and not f.is_symlink() and f.read_bytes()[:4] == b"\x7fELF"]
        versions = {tuple(map(int, v)) for out in refs for v in re.findall(r"\bGLIBC_(\d+)\.(\d+)", out)}
        assert max(versions) == needed, (max(versions), needed)
    selftest.self_test(program / "specquant-app", installed.env(QT_QPA_PLATFORM="offscreen"), "offscreen")
    models = installed.models
    assert (models / "smollm2-135m-instruct" / "manifest.json").is_file()  # converted offline from the bundle
    assert shutil.which("xvfb-run", path=CLEAN_PATH), "xvfb-run is missing: `./setup.sh test` installs it as root"
    # In a window on Xvfb, as the Windows and macOS jobs run it on their desktops: it must appear, and its
    # picture after the answer is kept.
    shot = selftest.window_screenshot(program / "specquant-app", installed.env(), tmp_path / "window.png", "xcb",
                                      wrap=selftest.XVFB)
    assert shot.startswith("self-test in a window (xcb), screenshot "), shot
    selftest.routes(program / "specquant", installed.env())

    # The CPU variant was proven by the first start (in a child) and this start reads the verdict.
    # --no-quality: what precision buys is measured elsewhere (tests/test_quality.py), and takes a minute here.
    info = run_clean([str(program / "specquant"), "info", "--json", "--no-quality"], home, timeout=120)
    assert info.returncode == 0, info.stderr
    kernels = json.loads(info.stdout)["cpu_kernels"]
    bundled = {cpu_variant.variant_name(p) for p in cpu_variant.variant_libraries(program / "_internal/llama_cpp/lib")}
    assert kernels["variant"] in bundled and kernels["cached"] is True, kernels
    assert len(bundled) > 1  # every variant stays in the bundle; the choice is made per machine
    print(f"CPU kernels: {kernels}")

    # Search by meaning works from the bundle alone: the embedding model is converted from the copy it carries.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "colours.txt").write_text("Red, yellow and blue are the primary colours of paint.\n")
    added = run_clean([str(program / "specquant"), "docs", "add", str(notes)], home, timeout=600)
    assert added.returncode == 0 and "pip install" not in added.stderr, added.stderr[-2000:]
    assert model_path(installed.models).is_file(), "the embedding model was not set up from the bundle"
    found = run_clean([str(program / "specquant"), "docs", "search", "primary colours", "--json"], home, 600)
    assert found.returncode == 0 and "colours.txt" in found.stdout, found.stderr[-2000:]

    # The bundled CLI serves the API (uvicorn's protocol modules are imported by name: PyInstaller must ship them).
    served = subprocess.Popen(
        [str(program / "specquant"), "serve", "--port", "0"], env={"HOME": str(home), "PATH": CLEAN_PATH},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert served.stdout is not None
    base = served.stdout.readline().split(" on ")[1].split()[0]
    ask = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0})
    request = urllib.request.Request(f"{base}/chat/completions", ask.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as r:
        answer = json.loads(r.read())
    # The default before this machine is measured: the fast preset, Q4_K_M's words (#61).
    assert answer["choices"][0]["message"]["content"] and answer["specquant"]["pair"].startswith("Q4_K_M")
    served.send_signal(signal.SIGINT)
    assert served.wait(timeout=60) == 0, served.communicate()[1][-2000:]

    # The bundled CLI is a worker too (GGML_RPC: libggml-rpc ships), and another SpecQuant plans with it.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = subprocess.Popen(
        [str(program / "specquant"), "worker", "--port", str(port)], env={"HOME": str(home), "PATH": CLEAN_PATH},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        remote = run_clean([str(program / "specquant"), "info", "--rpc", f"127.0.0.1:{port}", "--json", "--no-quality"],
                           home, 120)
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout)["workers"][0]["endpoint"] == f"127.0.0.1:{port}"
    finally:
        worker.kill()
        worker.wait(10)

    selftest.linux_uninstall(installed)  # the program goes, the models stay
    print(f"build {build_s:.0f} s, total {time.monotonic() - started:.0f} s")
