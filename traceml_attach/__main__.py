from __future__ import annotations

from traceml_attach.cli.main import entry

entry()
