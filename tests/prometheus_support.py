"""A pipeline's live families through the Prometheus text format and its parser."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from traceml_attach.output.prometheus import families
from traceml_attach.runtime.pipeline import Pipeline


def scrape_pipeline(pipeline: Pipeline) -> dict[str, Any]:
    analysis = pipeline.window_analysis()

    class Once:
        def collect(self):
            return families(pipeline.rec, analysis, set())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Once())   # type: ignore[arg-type]
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
