"""Every citation in the repository can be followed from the repository.

Comments, docstrings and docs say *why* by citing a protocol fact (docs/protocol.md), the fault
catalogue (docs/reliability.md), a benchmark scenario (docs/benchmarks.md) or an upstream source
(`apache/rocketmq proxy/.../ReceiveMessageActivity.java`). They must never cite notes that only existed
on one machine: "reference §7.4", "the catalogue" without saying which document holds it, "seed 000",
`/work/...` or `/tmp/...` paths. A `docs/X.md §N` or `docs/X.md#anchor` citation must name a section that
exists.

Scanned: src/ (except the vendored protocol files and generated modules under src/thrust/_proto),
tests/, docs/, scripts/, README.md, CHANGELOG.md and the Makefile. This file is not scanned: it spells
the forbidden patterns out.

The code and the reference pages also say what *is*, not when or under which work item it came to be
(`HISTORY`): in src/, tests/, scripts/, docs/, the Makefile and the README, no "issue 17" or bare "#17"
(a work item of this project, which no reader can open; an upstream issue names its repository:
`apache/rocketmq-clients#1445`) and no "previous session"; anywhere, no test named after the history of
its finding (`def test_seed1_...`) rather than what it checks. docs/history.md and CHANGELOG.md are
exempt from the first two: they are the dated record, and they quote the words of their time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()
SCANNED_DIRS = ("src", "tests", "docs", "scripts")
SCANNED_FILES = ("README.md", "CHANGELOG.md", "Makefile")
SKIPPED_DIRS = ("src/thrust/_proto",)
SUFFIXES = {".py", ".md", ".pyi", ".toml", ".txt", ".cfg", ".sh", ".proto", ""}

# Citations of documents that are not in the repository.
OUTSIDE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\breference\s*§"), "'reference §': notes outside the repository; cite docs/protocol.md"),
    (
        re.compile(r"\breference\s+(?:doc\s+)?(?:sections?\s+)?(?:table\s+)?\d", re.IGNORECASE),
        "'reference N': notes outside the repository; cite docs/protocol.md or an upstream source",
    ),
    (re.compile(r"\breference\s+(?:doc|section|table)\b", re.IGNORECASE), "'reference doc/section/table'"),
    (re.compile(r"\breference/"), "a path under reference/ (not in the repository)"),
    (
        re.compile(r"(?<![\w.§])[1-9]\.\d{1,2}(?:-[\d.]+)?\s+(?:step|item|field)s?\s+\d"),
        "a bare section number of the reference notes ('7.5 step 6'): cite docs/protocol.md",
    ),
    (re.compile(r"(?<![\w.])\((?:[1-9]\.[1-9])\)"), "a bare section number of the reference notes ('(7.6)')"),
    (
        re.compile(
            r"python-grpc-ceilings|perf-tools|rocketmq-v2-protocol|reliability-catalogue|model-codebases"
            r"|refactor-guide|user-needs|design-sketch|real-rocketmq\.md"
        ),
        "a reference note outside the repository",
    ),
    (re.compile(r"\bseeds?[ -]?\d{3}\b", re.IGNORECASE), "'seed NNN': cite docs/benchmarks.md#scenarios"),
    (
        re.compile(r"\bseed (?:items? )?\d[ab]?\b|\bseed items?\b", re.IGNORECASE),
        "'seed item N': cite the scenario in docs/benchmarks.md#scenarios",
    ),
    (
        re.compile(r"\bSeed(?: \d{3})?:|\bthe seed(?:'s|-\d| fixes)"),
        "the benchmark seeds: cite apache/rocketmq-clients#1445 or a scenario",
    ),
    (re.compile(r"\bthe reference measurement\b|\bin the reference\)"), "the reference notes' measurements"),
    (re.compile(r"\.\./shared\b"), "a path outside the repository"),
    (re.compile(r"(?<![\w.~])/(?:work|home|root)/"), "an absolute path of one machine"),
    (re.compile(r"(?<![\w.~])/tmp/[\w.-]"), "a /tmp path of one machine"),
]
# Where a line is history rather than reference (see the module docstring).
HISTORY_EXEMPT = ("docs/history.md", "CHANGELOG.md")
HISTORY_SCOPE = ("src/", "docs/", "tests/", "scripts/", "Makefile", "README.md")
HISTORY: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"\bissues?[\s-]*#?\d+\b|(?<![\w/&-])#\d+\b", re.IGNORECASE),
        "a work item ('issue N', '#N'): say what is, or name the upstream repository (owner/repo#N)",
    ),
    (
        re.compile(
            r"\b(?:previous|earlier|prior|last|later|next) (?:work |lab )?sessions?\b|\bsessions? \d+\b"
            r"|\bother sessions'",
            re.IGNORECASE,
        ),
        "a work session: say what is (or move the story to docs/history.md)",
    ),
]
# An upstream repository named earlier on the line makes `#N` its issue.
UPSTREAM_ISSUE = re.compile(
    r"rocketmq-clients|rocketmq-apis|rocketmq-site|apache/[\w-]+|grpc/grpc|[\w.-]+/[\w.-]+#\d"
)
HISTORY_TEST_NAME = re.compile(r"\bdef test_seed")

# "the catalogue" must say where it is: docs/reliability.md holds it.
CATALOGUE = re.compile(r"\bcatalogue\b", re.IGNORECASE)

# `docs/X.md §1.2, §3` (also `X.md §N` inside docs/): the sections must exist.
SECTION_CITATION = re.compile(r"(?P<doc>[\w./-]*\.md)(?P<secs>(?:\s*(?:,|and|or|-|\u2013)?\s*§\s?\d[\d.]*)+)")
SECTION_NUMBER = re.compile(r"§\s?(\d[\d.]*)")
ANCHOR_CITATION = re.compile(r"(?P<doc>[\w./-]*\.md)#(?P<anchor>[\w-]+)")
DOC_NAME = re.compile(r"(?<![\w/])(?P<doc>docs/[\w-]+\.md)")
# Upstream repositories have docs/ folders too (apache/rocketmq-clients docs/message_id.md).
UPSTREAM_BEFORE = re.compile(r"rocketmq-clients|rocketmq-apis|rocketmq-site|apache/rocketmq\b")
HEADING = re.compile(r"^(#+)\s+(.*?)\s*$")
NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?(?:\s|$)")


def _files() -> list[Path]:
    out: list[Path] = [ROOT / name for name in SCANNED_FILES if (ROOT / name).exists()]
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or path.resolve() == THIS:
                continue
            if any(rel.startswith(skip + "/") for skip in SKIPPED_DIRS):
                continue
            if "__pycache__" in path.parts or ".egg-info" in rel or path.suffix not in SUFFIXES:
                continue
            out.append(path)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _sections(doc: Path) -> tuple[set[str], set[str]]:
    """The numbered sections (`2`, `6.3`) and the anchors of a Markdown file."""
    numbers: set[str] = set()
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = HEADING.match(line)
        if not m:
            continue
        title = m.group(2)
        num = NUMBERED.match(title)
        if num:
            numbers.add(num.group(1).rstrip("."))
        slug = _slug(title)
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return numbers, anchors


def _resolve(doc: str, source: Path) -> Path | None:
    """The Markdown file a citation names: `docs/X.md` from the root, `X.md` beside a doc."""
    if doc.startswith("docs/"):
        path = ROOT / doc
    elif "/" not in doc and source.parent == ROOT / "docs":
        path = ROOT / "docs" / doc
    else:
        return None
    return path if path.exists() else None


def _check_line(path: Path, rel: str, line: str, cache: dict[Path, tuple[set[str], set[str]]]) -> list[str]:
    problems: list[str] = []

    def sections(doc: Path) -> tuple[set[str], set[str]]:
        if doc not in cache:
            cache[doc] = _sections(doc)
        return cache[doc]

    for pattern, why in OUTSIDE:
        if pattern.search(line):
            problems.append(why)
    if rel.startswith(HISTORY_SCOPE) and rel not in HISTORY_EXEMPT:
        for pattern, why in HISTORY:
            for m in pattern.finditer(line):
                if pattern is HISTORY[0][0] and UPSTREAM_ISSUE.search(line[: m.start()]):
                    continue
                problems.append(why)
                break
    if HISTORY_TEST_NAME.search(line):
        problems.append("a test named after history ('test_seed...'): name it after what it checks")
    if CATALOGUE.search(line) and rel != "docs/reliability.md" and "reliability.md" not in line:
        problems.append("'catalogue' without naming docs/reliability.md, which holds it")

    for m in DOC_NAME.finditer(line):
        if UPSTREAM_BEFORE.search(line[: m.start()]):
            continue
        if not (ROOT / m.group("doc")).exists():
            problems.append(f"{m.group('doc')} is not in the repository")

    rest = line
    for m in SECTION_CITATION.finditer(line):
        doc = _resolve(m.group("doc"), path)
        rest = rest.replace(m.group(0), " " * len(m.group(0)), 1)
        if doc is None:
            if not UPSTREAM_BEFORE.search(line[: m.start()]):
                problems.append(f"{m.group('doc')}: no such document for a § citation")
            continue
        numbers, _ = sections(doc)
        for sec in SECTION_NUMBER.findall(m.group("secs")):
            if sec.rstrip(".") not in numbers:
                problems.append(f"{m.group('doc')} has no section {sec}")
    if "§" in rest:
        # A bare § is a section of the document it is written in (docs only).
        if path.suffix == ".md" and path.parent == ROOT / "docs":
            numbers, _ = sections(path)
            for sec in SECTION_NUMBER.findall(rest):
                if sec.rstrip(".") not in numbers:
                    problems.append(f"{rel} has no section {sec}")
        else:
            problems.append("a § citation that names no document")

    for m in ANCHOR_CITATION.finditer(line):
        doc = _resolve(m.group("doc"), path)
        if doc is None:
            problems.append(f"{m.group('doc')}: no such document for an anchor")
            continue
        _, anchors = sections(doc)
        if m.group("anchor") not in anchors:
            problems.append(f"{m.group('doc')} has no heading #{m.group('anchor')}")
    return problems


def find_bad_citations() -> list[str]:
    cache: dict[Path, tuple[set[str], set[str]]] = {}
    found: list[str] = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for problem in _check_line(path, rel, line, cache):
                found.append(f"{rel}:{lineno}: {problem}: {line.strip()[:100]}")
    return found


@pytest.mark.slow
def test_every_citation_points_inside_the_repository_or_upstream() -> None:
    found = find_bad_citations()
    assert not found, f"{len(found)} citation(s) that cannot be followed:\n" + "\n".join(found)


def test_the_checker_catches_each_kind() -> None:
    """The patterns above, on lines written the way the old citations were."""
    docs = ROOT / "docs" / "protocol.md"
    src = ROOT / "src" / "thrust" / "x.py"
    bad = [
        "# the broker caps pops (reference §7.5 item 5)",
        "# upstream acks them (7.5 step 6)",
        "# the receipt handle's fields (7.6),",
        "# (reference 7.4: the acting queue)",
        '"""Request signing (reference doc 2)."""',
        "# an RPC costs the same (reference Table 4)",
        "# see /work/shared/reference/reliability-catalogue.md",
        "# (seed 000 item 5a)",
        "# the ack batcher (seed items 1 and 4)",
        "# the catalogue's P3 bound",
        "# Java `expired()`, §4.4",
        "# docs/nonexistent.md says so",
        "# docs/protocol.md §99.9",
        "# docs/protocol.md#no-such-heading",
        "--json /tmp/benchrun/final.json",
        "# the loop choice (issue 17, item 7)",
        "# the half-open TCP of ISSUE #1309",
        "in the issue-17 tables on the embedded server",
        "# as measured in the previous session",
        "def test_seed1_acks_are_batched() -> None:",
    ]
    for line in bad:
        assert _check_line(src, "src/thrust/x.py", line, {}), line
    good = [
        "# the broker caps pops at 32 (docs/protocol.md §1)",
        "# (F14, docs/reliability.md's catalogue)",
        "# apache/rocketmq proxy/.../ReceiveMessageActivity.java",
        "# rocketmq-clients docs/message_id.md",
        "# a random seed 1234 for the fuzzer",
        "# the proxy's shutdown (apache/rocketmq-clients #816, fixed by PR #992)",
        "# a fix proposed in apache/rocketmq#10967",
        "# the client's session to this endpoint",
        "# a pytest session fixture",
    ]
    for line in good:
        assert not _check_line(src, "src/thrust/x.py", line, {}), line
    # The dated record may say how things were; a test file may not be named after it either way.
    history = ROOT / "docs" / "history.md"
    assert not _check_line(history, "docs/history.md", "(issue 17, item 7) in the previous session", {})
    assert _check_line(history, "docs/history.md", "def test_seed2_x() -> None:", {})
    if docs.exists():
        assert not _check_line(docs, "docs/protocol.md", "see §1", {})
