"""One widget per panel. Each draws the view-model it is given in ``model`` and nothing else."""

from traceml_attach.tui.widgets.header import HeaderBar
from traceml_attach.tui.widgets.hotframes import HotFramesPanel
from traceml_attach.tui.widgets.memory import MemoryPanel
from traceml_attach.tui.widgets.process import ProcessPanel
from traceml_attach.tui.widgets.rail import DiagnosisRail
from traceml_attach.tui.widgets.ranks import RanksList
from traceml_attach.tui.widgets.steptable import StepTable
from traceml_attach.tui.widgets.system import SystemPanel

__all__ = ["DiagnosisRail", "HeaderBar", "HotFramesPanel", "MemoryPanel", "ProcessPanel", "RanksList",
           "StepTable", "SystemPanel"]
