"""Start-up time of `lmi-build --help` and `lmi-build plan hf --json` (of a local config and of a
demo model) against huggingface_hub's CLI.

Run: python benchmarks/startup.py [--repeat 7] [--instructions]
Prints the median wall time and CPU time (user+system) of each command (fresh interpreter each
run, the commands taking turns) and their ratios to the `hf --help` baseline, and fails if `--help`
or `plan` imported torch or transformers. On a shared machine both times move with the load (2x
between runs on the 2-core development host); ``--instructions`` also counts the instructions each command executes
under valgrind (callgrind), which do not depend on the load: the figure to compare across runs.

lmi_build's modules are byte-compiled first (compileall), as a wheel install does: with
PYTHONDONTWRITEBYTECODE set, an editable install would otherwise compile every module from source
on every run, and the benchmark would time the compiler rather than the start-up. huggingface_hub
was installed from a wheel, so its byte code is already there.
"""

from __future__ import annotations

import argparse
import compileall
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import record_comparison  # noqa: E402 - needs the repo root on sys.path

FIXTURE = REPO / "tests" / "fixtures" / "hf-configs" / "meta-llama--Llama-2-7b-hf"
DEMO = "demo:tiny-llama"  # a built-in model: its config is resolved without weights at plan time
_PROBE = """
import sys
from lmi_build.cli import main
sys.argv = ["lmi-build", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)), file=sys.stderr)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(commands: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall seconds, CPU seconds) of ``repeat`` runs of each command, the commands taking
    turns, so that a change in the machine's load falls on all of them alike."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            cpu, start = _children_cpu(), time.perf_counter()
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            walls[name].append(time.perf_counter() - start)
            cpus[name].append(_children_cpu() - cpu)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in commands}


def instructions(command: list[str]) -> int | None:
    """Instructions the command executes (valgrind's callgrind), or None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    run = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                         check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = re.search(r"Collected : (\d+)", run.stderr)
    return int(found.group(1)) if found else None


def heavy_imports(args: list[str]) -> list[str]:
    probe = subprocess.run([sys.executable, "-c", "import json\n" + _PROBE, *args], capture_output=True, text=True,
                           check=False)
    return list(json.loads(probe.stderr.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions under valgrind (about a minute per command)")
    args = parser.parse_args()

    # This interpreter's environment first, so `make bench` works without an activated venv.
    here = str(Path(sys.executable).parent)
    hf = shutil.which("hf", path=here) or shutil.which("huggingface-cli", path=here) or shutil.which("hf")
    lmi = shutil.which("lmi-build", path=here) or shutil.which("lmi-build")
    if hf is None or lmi is None:
        sys.exit("needs both `lmi-build` and `hf`/`huggingface-cli` on PATH (activate the venv)")
    compileall.compile_dir(REPO / "lmi_build", quiet=1)  # see the docstring: as a wheel install would
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / FIXTURE.name
        model.mkdir()
        shutil.copyfile(FIXTURE / "config.json", model / "config.json")
        commands = {
            f"{Path(hf).name} --help": [hf, "--help"],
            "lmi-build --help": [lmi, "--help"],
            "lmi-build plan hf --json": [lmi, "plan", "hf", "--model", str(model), "--json"],
            "lmi-build plan hf --json, demo": [lmi, "plan", "hf", "--model", DEMO, "--json"],
        }
        for cmd in commands.values():  # warm the OS file cache once
            subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        medians = timed(commands, args.repeat)
        peer = f"{Path(hf).name} --help"
        wall0, cpu0 = medians[peer]
        print(f"{'command':32s} {'wall':>9s} {'vs hf':>7s} {'CPU':>9s} {'vs hf':>7s}   (medians of {args.repeat} runs)")
        for name, (wall, cpu) in medians.items():
            print(f"{name:32s} {wall * 1000:7.0f}ms {wall / wall0:6.2f}x {cpu * 1000:7.0f}ms {cpu / cpu0:6.2f}x")
            if name.startswith("lmi-build"):
                record_comparison("startup", name, wall, peer, wall0)
                record_comparison("startup", f"{name}: CPU", cpu, f"{peer}: CPU", cpu0)
        if args.instructions:
            counts = {name: instructions(cmd) for name, cmd in commands.items()}
            base = counts[peer]
            for name, count in counts.items():
                if count is None or base is None:
                    print(f"{name:32s} instructions: not counted (needs valgrind)")
                else:
                    print(f"{name:32s} {count / 1e6:9.0f} M instructions {count / base:6.2f}x")
        for probe_args in (["--help"], ["plan", "hf", "--model", str(model), "--json"],
                           ["plan", "hf", "--model", DEMO, "--json"]):
            heavy = heavy_imports(probe_args)
            if heavy:
                sys.exit(f"lmi-build {' '.join(probe_args[:2])} imported {', '.join(heavy)}")
        print("torch/transformers imported by --help or plan: no")


if __name__ == "__main__":
    main()
