"""The convcli that the benchmarks run: the installed one, as users run it.

``python -m convcli`` started from the repository root imports the checkout
(the current folder comes first on ``sys.path``), whose compiled extension is
there only after ``python setup.py build_ext --inplace``: a fresh clone would
time the numpy engines while the installed package has the native one. The
``convcli`` script beside this Python imports what is installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def convcli_command() -> list[str]:
    """The installed ``convcli`` script beside this Python, as a command list.

    Raises
    ------
    SystemExit
        Where convcli is not installed beside this Python.
    """
    script = Path(sys.executable).with_name("convcli")
    if not script.exists():
        raise SystemExit(f"no convcli script beside {sys.executable}: pip install -e '.[bench]'")
    return [str(script)]


def engine_line(env: dict[str, str] | None = None) -> str:
    """What ``convcli --version`` says of its engine, for a benchmark's header."""
    version = subprocess.run(
        [*convcli_command(), "--version"], capture_output=True, text=True, env=env, check=True
    ).stdout
    return next((line for line in version.splitlines() if line.startswith("engine:")), "engine: ?")
