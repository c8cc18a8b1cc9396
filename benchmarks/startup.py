"""Start-up time of `lmi-build --help` and `lmi-build plan hf --json` against huggingface_hub's CLI.

Run: python benchmarks/startup.py [--repeat 7]
Prints the median wall time of each command (fresh interpreter each run) and its ratio to the
`hf --help` baseline, and fails if `--help` or `plan` imported torch or transformers.

lmi_build's modules are byte-compiled first (compileall), as a wheel install does: with
PYTHONDONTWRITEBYTECODE set, an editable install would otherwise compile every module from source
on every run, and the benchmark would time the compiler rather than the start-up. huggingface_hub
was installed from a wheel, so its byte code is already there.
"""

from __future__ import annotations

import argparse
import compileall
import json
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


def timed(command: list[str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def heavy_imports(args: list[str]) -> list[str]:
    probe = subprocess.run([sys.executable, "-c", "import json\n" + _PROBE, *args], capture_output=True, text=True,
                           check=False)
    return list(json.loads(probe.stderr.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
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
        }
        for cmd in commands.values():  # warm the OS file cache once
            subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        medians = {name: timed(cmd, args.repeat) for name, cmd in commands.items()}
        baseline = medians[f"{Path(hf).name} --help"]
        print(f"{'command':32s} {'median':>9s} {'vs hf':>7s}   ({args.repeat} runs each)")
        for name, value in medians.items():
            print(f"{name:32s} {value * 1000:7.0f}ms {value / baseline:6.2f}x")
            if name.startswith("lmi-build"):
                record_comparison("startup", name, value, f"{Path(hf).name} --help", baseline)
        for probe_args in (["--help"], ["plan", "hf", "--model", str(model), "--json"]):
            heavy = heavy_imports(probe_args)
            if heavy:
                sys.exit(f"lmi-build {' '.join(probe_args[:2])} imported {', '.join(heavy)}")
        print("torch/transformers imported by --help or plan: no")


if __name__ == "__main__":
    main()
