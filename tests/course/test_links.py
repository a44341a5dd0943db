"""Every relative link a reader can follow in the course, the docs and the research wing resolves.

Walks the markdown a reader sees: the markdown cells of the notebooks (the jupytext .py sources
and the built .ipynb), docs/*.md, README.md, and the research wing's READMEs, its record-reading
notebooks and its study notes (research/*.md). A link `[text](target)` whose target is neither a
URL nor a mail address must name a file or folder that exists relative to the file holding the
link; an anchor (`target#heading`, or `#heading` alone) must name a heading of the markdown file
or notebook it points into, slugged as GitHub slugs headings. Code blocks and inline code are
skipped: `f(x)[0](y)` in code is not a link.
"""

import re
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)


def markdown_files() -> list[Path]:
    notebooks = [*ROOT.glob("notebooks/*.py"), *ROOT.glob("notebooks/deeper/*.py"),
                 *ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("notebooks/deeper/*.ipynb"),
                 *ROOT.glob("research/notebooks/*.ipynb"),
                 *[p for p in ROOT.glob("research/notebooks/*.py") if p.stem not in {"__init__", "build"}]]
    notebooks = [p for p in notebooks if p.name not in {"build.py", "checks.py", "course.py"}]
    pages = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("research/*.md"), *ROOT.glob("research/**/README.md")]
    return sorted(set(notebooks + pages))


def markdown_of(path: Path) -> str:
    """The text a reader sees as markdown: a page whole, a notebook's markdown cells joined."""
    if path.suffix == ".md":
        return path.read_text()
    notebook = nbformat.read(path, as_version=4) if path.suffix == ".ipynb" else jupytext.read(path)
    return "\n\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def without_code(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen, anchors = {}, set()
    for heading in HEADING.findall(FENCE.sub("", markdown_of(path))):
        base = slug(heading)
        count = seen.get(base, 0)
        anchors.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return anchors | set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", markdown_of(path)))


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(without_code(markdown_of(path))):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        # A notebook source links to its built .ipynb's neighbours: both sit in the same folder.
        resolved = path if not file_part else (path.parent / file_part).resolve()
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix in {".md", ".ipynb", ".py"} and resolved.is_file() \
                and (resolved.suffix != ".py" or resolved == path) and anchor not in anchors_of(resolved):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


FILES = markdown_files()


def test_the_walk_covers_the_course_docs_and_research():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "docs/math.md", "notebooks/04_starvation_watched.py", "notebooks/deeper/branches_explored.ipynb",
            "research/README.md", "research/notebooks/three_sources.py"} <= names


def test_slug_follows_github():
    assert slug("The drift study (digit_conflict): every method at one learning rate") == \
        "the-drift-study-digit_conflict-every-method-at-one-learning-rate"
    assert slug("§6 Two `wings`, one kernel") == "6-two-wings-one-kernel"


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_every_relative_link_resolves(path):
    assert not broken_links(path), f"{path.relative_to(ROOT)}: " + "; ".join(broken_links(path))
