"""What `--prometheus` costs the analysis thread per tick, and what a scrape weighs, by rank count.

The recorded two-rank torchrun stream (tests/fixtures) is cloned to N ranks and replayed for 40 s
of data through a Pipeline (testkit/live_streams.py), as a live session holds it; then the tick's
metric families (output/prometheus.py ``families``: straggler scores included) are built from the
live analysis, as the analysis thread does on every tick with --prometheus, and rendered as a
scrape is. Reported per rank count: CPU ms to build the families (median of 20), ms to render a
scrape (median of 20), the scrape's size and its number of series.

    python bench/prometheus_bench.py [--ranks 8 64 256 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from testkit.live_streams import repeated  # noqa: E402
from traceml_attach.output.prometheus import families  # noqa: E402
from traceml_attach.runtime.pipeline import Pipeline  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"


def measure(ranks: int) -> tuple[float, float, int, int]:
    pipeline = Pipeline(load_rules())
    for frame in repeated(FIXTURE, 40, ranks=ranks):
        pipeline.add(frame)
    analysis = pipeline.live_analysis()
    seen: set[tuple[str, str]] = set()
    build = []
    for _ in range(20):
        started = time.process_time()
        built = families(pipeline.rec, analysis, seen)
        build.append((time.process_time() - started) * 1e3)

    class Newest:
        def collect(self):
            return built

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Newest())   # type: ignore[arg-type]
    render = []
    for _ in range(20):
        started = time.process_time()
        text = generate_latest(registry)
        render.append((time.process_time() - started) * 1e3)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return statistics.median(build), statistics.median(render), len(text), series


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256, 1024])
    args = ap.parse_args()
    print(f"{'ranks':>6} {'families ms/tick':>17} {'scrape ms':>10} {'scrape KB':>10} {'series':>7}")
    for ranks in args.ranks:
        build, render, size, series = measure(ranks)
        print(f"{ranks:>6} {build:>17.1f} {render:>10.1f} {size / 1e3:>10.1f} {series:>7}", flush=True)


if __name__ == "__main__":
    main()
