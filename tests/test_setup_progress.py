"""setup.sh's compile progress arrives while the compiler runs, whatever awk the system has (or none).

The real setup.sh runs with PYTHON pointing at a wrapper whose `pip wheel` is a fake build: it prints
ninja-style "[i/N]" lines and, half-way, waits until the test has read the 50% progress line. Were the lines
held back until the build ended (as mawk did under the old `sed -u | awk` pipeline), the fake would wait in
vain and the test would see the line only after the build finished.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from installer import progress
from tests.conftest import REPO

STEPS = 10

FAKE_BUILD = """
import os, sys, time
from pathlib import Path
args = sys.argv[1:]
wheels = Path(args[args.index("-w") + 1])
go, log = Path(os.environ["FAKE_GO"]), Path(os.environ["FAKE_LOG"])
with log.open("a") as f:  # appended: a fallback build logs its flags after the first's
    f.write(os.environ.get("CMAKE_ARGS", "") + "\\n")
print("Building wheel for llama-cpp-python (pyproject.toml)", flush=True)
waiting = go.with_name("waiting")
for i in range(1, STEPS + 1):
    if i == STEPS // 2:
        waiting.touch()  # before the line: the test may read it at once
    print(f"  [{i}/STEPS] Building C object ggml/src/x{i}.c.o", flush=True)
    if i == STEPS // 2:
        waited = 0.0
        while not go.exists() and waited < 60:
            time.sleep(0.05)
            waited += 0.05
        waiting.unlink()
        with log.open("a") as f:
            f.write("released by the test\\n" if go.exists() else "never released\\n")
if os.environ.get("FAKE_FAIL"):
    print("error: the compiler gave up", flush=True)
    sys.exit(1)
wheels.mkdir(parents=True, exist_ok=True)
(wheels / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"PK")
""".replace("STEPS", str(STEPS))


def fake_python(tmp_path: Path) -> Path:
    """PYTHON for setup.sh: its `pip wheel` is the fake build, its other pip commands do nothing, and
    anything else (installer/progress.py) is the real interpreter."""
    build = tmp_path / "fake_build.py"
    build.write_text(FAKE_BUILD)
    wrapper = tmp_path / "python"
    wrapper.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1 $2 $3" = "-m pip wheel" ]; then shift 3; exec "{sys.executable}" "{build}" "$@"; fi
        if [ "$1 $2" = "-m pip" ]; then exit 0; fi
        if [ "$1 $2 $3" = "-m runtime.machine.build_check --check-build" ] && [ -n "$FAKE_CHECK_FAILS" ]; then
          echo "this build's CPU kernels do not run here: killed by SIGILL" >&2; exit 1
        fi
        exec "{sys.executable}" "$@"
        """)
    )
    wrapper.chmod(0o755)
    return wrapper


def awk_folder(tmp_path: Path, awk: str) -> Path:
    """A folder for the front of PATH: `awk` and `sed` as this case has them."""
    folder = tmp_path / "bin"
    folder.mkdir()
    if awk == "none":  # any use of awk or sed fails loudly
        for tool in ("awk", "sed"):
            (folder / tool).write_text(f"#!/bin/sh\necho '{tool} must not be needed' >&2\nexit 99\n")
            (folder / tool).chmod(0o755)
    else:
        (folder / "awk").symlink_to(shutil.which(awk) or awk)
    return folder


def run_setup(
    tmp_path: Path, awk: str, fail: bool = False, **more: str
) -> tuple[list[tuple[float, str]], int, Path]:
    """setup.sh's stderr lines with the time each arrived, its exit code, and the fake build's log (`more`:
    further environment; the flavour is the installers' unless it says otherwise)."""
    go, log = tmp_path / "go", tmp_path / "fake.log"
    env = {
        "HOME": str(tmp_path / "home"),
        "PATH": f"{awk_folder(tmp_path, awk)}:{os.environ['PATH']}",
        "PYTHON": str(fake_python(tmp_path)),
        "SPECQUANT_WHEELS": str(tmp_path / "wheels"),
        "FAKE_GO": str(go),
        "FAKE_LOG": str(log),
        **({"FAKE_FAIL": "1"} if fail else {}),
        "SPECQUANT_FLAVOUR": "cpu-all-variants",
        **more,
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(REPO / "setup.sh")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append((time.monotonic() - started, line.rstrip("\n")))
        if "compiling llama.cpp 50%" in line and not go.exists():  # the first build's; a fallback's runs on
            assert (tmp_path / "waiting").exists(), "the 50% line came after the build went on"
            go.touch()
    return lines, proc.wait(timeout=60), log


@pytest.mark.parametrize("awk", ["mawk", "none"])
def test_setup_progress_lines_arrive_while_the_build_runs(tmp_path: Path, awk: str) -> None:
    if awk != "none" and shutil.which(awk) is None:
        pytest.skip(f"{awk} is not installed")
    lines, code, log = run_setup(tmp_path, awk)
    assert code == 0, lines
    progress_lines = [text for _, text in lines if "compiling llama.cpp" in text]
    assert len(progress_lines) == STEPS, lines
    for i, text in enumerate(progress_lines, 1):
        assert re.fullmatch(rf"setup\.sh: compiling llama\.cpp {10 * i}% \({i} of {STEPS}\), \d+ s", text), text
    # The fake build was let go by the test reading the 50% line, not by its own time-out.
    assert log.read_text().splitlines() == [
        "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF",
        "released by the test",
    ]
    flavour = tmp_path / "wheels" / "cpu-all-variants"
    assert (flavour / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").is_file()
    assert (flavour / "FLAGS").read_text().startswith("-DGGML_NATIVE=OFF")
    assert "6 to 25 minutes on 2 cores" in lines[0][1]


def test_a_failed_build_shows_the_end_of_its_log_and_keeps_no_wheel(tmp_path: Path) -> None:
    lines, code, _ = run_setup(tmp_path, "none", fail=True)
    texts = [text for _, text in lines]
    assert code == 1
    assert "error: the compiler gave up" in texts
    assert texts[-1] == "setup.sh: building llama-cpp-python failed (the lines above are the end of its log)"
    assert not (tmp_path / "wheels" / "cpu-all-variants").exists()


def test_progress_restarts_for_a_second_ninja_run_and_keeps_the_whole_log(tmp_path: Path) -> None:
    script = "; ".join(
        [*(f"print('[{i}/4] cc a{i}', flush=True)" for i in range(1, 5)), "print('between', flush=True)",
         *(f"print('[{i}/2] cc b{i}', flush=True)" for i in range(1, 3))]
    )
    out = tmp_path / "progress.txt"
    with out.open("w") as f:
        cmd = [sys.executable, "-c", script]
        code = progress.run_logged(cmd, tmp_path / "build.log", "x", out=f, clock=lambda: 0.0)
    assert code == 0
    assert out.read_text().splitlines() == [
        "x 25% (1 of 4), 0 s", "x 50% (2 of 4), 0 s", "x 75% (3 of 4), 0 s", "x 100% (4 of 4), 0 s",
        "x 50% (1 of 2), 0 s", "x 100% (2 of 2), 0 s",
    ]
    assert (tmp_path / "build.log").read_text().count("\n") == 7
    assert progress.took(42) == "42 s" and progress.took(185) == "3 min 05 s"


def test_progress_errors_are_one_line(tmp_path: Path) -> None:
    script = str(REPO / "installer" / "progress.py")
    bad_log = subprocess.run([sys.executable, script, "--log", str(tmp_path / "no" / "x.log"), "--label", "x", "--",
                              "true"], capture_output=True, text=True)
    assert bad_log.returncode == 2 and bad_log.stderr.count("\n") == 1 and "--log" in bad_log.stderr
    missing = subprocess.run([sys.executable, script, "--log", str(tmp_path / "x.log"), "--label", "x", "--",
                              "no-such-program-here"], capture_output=True, text=True)
    assert missing.returncode == 127 and "no-such-program-here" in missing.stderr
    assert missing.stderr.count("\n") == 1


def test_a_native_build_is_kept_per_cpu_and_replaced_by_the_portable_one_where_it_does_not_run(
    tmp_path: Path,
) -> None:
    lines, code, log = run_setup(tmp_path, "none", SPECQUANT_FLAVOUR="cpu-native")
    assert code == 0, lines
    native = [p for p in (tmp_path / "wheels").iterdir()]
    assert len(native) == 1 and re.fullmatch(r"cpu-native-[0-9a-f]{12}", native[0].name)  # named after this CPU
    assert (native[0] / "FLAGS").read_text().startswith("-DGGML_NATIVE=ON")
    assert "about 3 to 8 minutes on 2 cores" in lines[0][1]
    # Where the build for this CPU does not run (its check dies), the portable one is built and installed.
    other = tmp_path / "other"
    other.mkdir()
    lines, code, log = run_setup(other, "none", SPECQUANT_FLAVOUR="cpu-native", FAKE_CHECK_FAILS="1")
    texts = [text for _, text in lines]
    assert code == 0, texts
    assert "setup.sh: the build for this CPU does not run here; building the portable one instead" in texts
    assert [line.split()[0] for line in log.read_text().splitlines() if line.startswith("-D")] == [
        "-DGGML_NATIVE=ON", "-DGGML_NATIVE=OFF"
    ]
    folders = sorted(p.name for p in (other / "wheels").iterdir())
    assert folders[0] == "cpu-all-variants" and folders[1].startswith("cpu-native-")
    assert (other / "wheels" / folders[1] / "DOES-NOT-RUN").exists()  # and it is never tried here again
