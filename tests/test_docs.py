"""README.md is the short way in: at most 250 lines, with a first schedule and a receiver in its
first 60; the rest lives in docs/, and every relative link of README.md and docs/*.md leads to a
file that exists (and, with a #fragment, to a heading of that file)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 250  # the style guide's bound for a README (docs by reader)
FIRST_SCREEN_LINES = 60  # what a new reader sees before scrolling far: the first schedule
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_a_first_schedule_and_a_receiver_come_first() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN_LINES])
    assert "make run" in first
    assert "make test" in first
    assert re.search(r"curl -s -X POST \S*/v1/schedules/ ", first), "no create in the first lines"
    receiver = re.search(r"```python\n(.*?)```", first, re.S)
    assert receiver, "no receiver in the first lines"
    assert "X-Signature" in receiver.group(1), "the receiver does not verify the signature"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    for target in links(doc):
        file, _, fragment = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        assert dest.exists(), f"{doc.name}: {target} does not exist"
        if fragment:
            assert dest.suffix == ".md", f"{doc.name}: {target}"
            assert fragment in anchors(dest), f"{doc.name}: no heading #{fragment} in {file}"


def test_the_link_check_sees_the_readers_docs() -> None:
    linked = {t.partition("#")[0] for t in links(README)}
    for name in (
        "tenant-guide",
        "operations",
        "configuration",
        "api",
        "architecture",
        "benchmarks",
        "contributing",
    ):
        assert f"docs/{name}.md" in linked, name


@pytest.mark.parametrize(
    "doc",
    [README, ROOT / "docs" / "tenant-guide.md", ROOT / "docs" / "api.md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_route_a_reader_is_shown_exists_with_its_method(doc: Path) -> None:
    """Each `curl` line of the code blocks and each `METHOD /v1/…` of the text is a real route
    (the runbook's check, tests/deploy/test_runbook.py, applied to the tenants' docs)."""
    from tests.deploy.test_runbook import METHOD_PATH, PATH, _matches

    text = doc.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S)).replace("\\\n", " ")
    curls = [line for line in code.splitlines() if line.lstrip().startswith("curl ")]
    pairs = METHOD_PATH.findall(text)
    assert curls or pairs, f"{doc.name} shows no route"
    for line in curls:
        method = m.group(1) if (m := re.search(r"-X (\w+)", line)) else "GET"
        for path in PATH.findall(line.split(" #", 1)[0]):
            assert _matches(path.rstrip("'\""), method), f"{doc.name}: curl {method} {path}"
    for method, path in pairs:
        assert _matches(path, method), f"{doc.name}: {method} {path} is not a route"
