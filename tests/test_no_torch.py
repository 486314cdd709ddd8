"""The attacher must never import torch: it is slow and could create a CUDA context on the GPU."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_attacher_modules_do_not_import_torch():
    code = (
        "import sys, pkgutil, importlib, agent, traceml_attach\n"
        "for pkg in (agent, traceml_attach):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        m.name.endswith('__main__') or importlib.import_module(m.name)\n"
        "from traceml_agent.nvml import Nvml\n"
        "Nvml().poll()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
