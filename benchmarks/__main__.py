"""Run every benchmark in turn: `python -m benchmarks [NAME ...]` (names: startup, package,
storage, quantize). Each is a plain script that prints its own numbers and ratios against a peer
tool measured in the same run; see the docstring at the top of each file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("startup", "package", "storage", "quantize")


def main(names: list[str]) -> int:
    chosen = names or [name for name in ORDER if (HERE / f"{name}.py").exists()]
    unknown = [name for name in chosen if not (HERE / f"{name}.py").exists()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(ORDER)}", file=sys.stderr)
        return 2
    # The peers (hf, s5cmd, weed) and lmi-build live beside this interpreter: no venv activation needed.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    status = 0
    for name in chosen:
        print(f"== benchmarks/{name}.py", flush=True)
        status |= subprocess.run([sys.executable, str(HERE / f"{name}.py")], check=False, env=env).returncode
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
