"""Re-record the frame-stream fixtures from the real examples (needs torch and py-spy).

    python tests/record_fixtures.py            # then: UPDATE_GOLDEN=1 pytest tests/test_golden.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from launch import start_example, stop_example  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ("input_bound", "compute_bound", "wait_heavy", "balanced")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXAMPLES:
            job = start_example(name)
            try:
                time.sleep(2)
                subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid),
                                "--seconds", "6", "--quiet", "--logs-dir", tmp, "--run-name", name],
                               check=True, cwd=ROOT, capture_output=True)
            finally:
                stop_example(job)
            shutil.copy(Path(tmp) / name / "frames.msgpack", FIXTURES / f"{name}.msgpack")
            print(f"recorded {name}")


if __name__ == "__main__":
    main()
