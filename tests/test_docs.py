"""The README stays a front page and the docs stay linked: README.md is at most 300 lines, every
relative link in README.md and docs/*.md names a file that exists, every anchor names a heading of
the file it points into (GitHub's slugs), and the README's example output (written by
docs/make_readme_output.py from a real run) names only lines that exist in the examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

# [text](target) and ![alt](target); the target ends at whitespace (a title) or the parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        marker = re.match(r"\s*(```|~~~)", line)
        if marker:
            fence = None if fence == marker[1] else (fence or marker[1])
            continue
        if fence is None:
            out.append(re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lowercase, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file, GitHub's -1, -2 … for repeats included."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fence: str | None = None
    for line in path.read_text().splitlines():
        marker = re.match(r"\s*(```|~~~)", line)
        if marker:
            fence = None if fence == marker[1] else (fence or marker[1])
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line) if fence is None else None
        if heading:
            base = slug(heading[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return [m[1] for line in prose(path.read_text()) for m in LINK.finditer(line)]


def test_slugs_follow_github():
    assert slug("Exit codes") == "exit-codes"
    assert slug("Attaching for days: bounded memory") == "attaching-for-days-bounded-memory"
    assert slug("`--launch`: the collector starts the agents") == "--launch-the-collector-starts-the-agents"
    assert slug("At a glance, and 1,024 ranks measured") == "at-a-glance-and-1024-ranks-measured"
    assert slug('"agent lost", "ended", "back"') == "agent-lost-ended-back"


def test_the_readme_is_a_front_page():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_every_doc_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in links(README)}
    for page in PAGES[1:]:
        assert page.resolve() in linked, f"{page.relative_to(ROOT)} is not linked from README.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"^[a-zA-Z][a-zA-Z+.-]*:", target):   # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def example_output() -> str:
    text = README.read_text()
    start, end = "<!-- example-output:start -->", "<!-- example-output:end -->"
    assert start in text and end in text, "README.md lost its example-output markers (docs/make_readme_output.py)"
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_example_output_names_real_lines():
    block = example_output()
    refs = re.findall(r"\b(examples/[\w/]+\.py):(\d+)", block)
    assert refs, "the README's example output names no examples/<file>.py:<line>"
    for file, line in refs:
        path = ROOT / file
        assert path.exists(), f"{file} (README example output) does not exist"
        count = len(path.read_text().splitlines())
        assert 1 <= int(line) <= count, (f"{file}:{line} (README example output): the file has {count} lines; "
                                         "run python docs/make_readme_output.py")
