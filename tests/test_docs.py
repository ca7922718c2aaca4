"""The docs tell the truth: quoted figures match the committed results they quote, links
resolve, the code in them parses, and the README's code runs (on the tiny models).

A table copied from a results file is marked with its source, `<!-- numbers: PATH -->` (or
`<!-- numbers: PATH; columns=N -->` to check only its first N columns); each of its rows must
find the row of the same method in PATH, and every number it shows must be one of that row's.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- numbers: (?P<path>\S+?)(?:; columns=(?P<cols>\d+))? -->")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
RULE = re.compile(r"\|[\s|:-]+")


def _key(cell: str) -> str:
    """A row's method: the first `code` span of its first cell, or the cell itself."""
    code = re.search(r"`([^`]+)`", cell)
    return (code.group(1) if code else cell).replace("*", "").strip()


def _rows(lines: list[str]) -> list[list[str]]:
    """The body rows of every Markdown table in `lines` (header and rule rows left out)."""
    rows, in_table = [], False
    for line in lines:
        line = line.strip()
        if not line.startswith("|"):
            in_table = False
        elif RULE.fullmatch(line):
            in_table = True  # what follows the rule is the body
        elif in_table:
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def check_quotes(docs: list[Path], root: Path) -> tuple[int, list[str]]:
    """(tables checked, problems) over every marked table of `docs`."""
    checked, problems = 0, []
    for doc in docs:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines):
            m = MARKER.search(line)
            if not m:
                continue
            where, src = f"{doc.name}:{i + 1}", root / m["path"]
            if not src.is_file():
                problems.append(f"{where}: {m['path']} does not exist")
                continue
            table = []
            for follow in lines[i + 1 :]:
                if not follow.startswith("|"):
                    break
                table.append(follow)
            rows = _rows(table)
            if not rows:
                problems.append(f"{where}: the marker is not followed by a table")
            known: dict[str, set[str]] = {}
            for row in _rows(src.read_text().splitlines()):
                known.setdefault(_key(row[0]), set()).update(NUMBER.findall(" ".join(row[1:])))
            cols = int(m["cols"]) if m["cols"] else None
            for row in rows:
                key = _key(row[0])
                if key not in known:
                    problems.append(f"{where}: no row {key!r} in {m['path']}")
                    continue
                for cell in row[1:cols]:
                    problems += [f"{where}: {key} quotes {n} ({cell!r}), not in {m['path']}"
                                 for n in NUMBER.findall(cell) if n not in known[key]]  # fmt: skip
            checked += 1
    return checked, problems


def test_the_readme_fits_on_a_screen_or_four():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_every_marked_figure_matches_the_committed_result_it_quotes():
    checked, problems = check_quotes(DOCS, ROOT)
    assert checked >= 3 and not problems, problems
    assert "<!-- numbers:" in (ROOT / "README.md").read_text()  # the landing page's table too


def test_the_quote_check_catches_a_figure_that_drifted(tmp_path):
    (tmp_path / "summary.md").write_text(
        "| method | n | acc |\n|---|---|---|\n"
        "| target | 100 | 59.0 % (49–68) |\n| sd | 100 | 59.0 % |\n"
    )
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- numbers: summary.md -->\n| method | acc |\n|---|---|\n"
                   "| `target`: the target alone | 59.0 % |\n| **sd** | 58.0 % |\n"
                   "| rsd | 1.0 |\n")  # fmt: skip
    checked, problems = check_quotes([doc], tmp_path)
    assert checked == 1
    assert problems == [
        "doc.md:1: sd quotes 58.0 ('58.0 %'), not in summary.md",
        "doc.md:1: no row 'rsd' in summary.md",
    ]


def test_relative_links_in_the_docs_resolve():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


def _python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_the_python_in_the_docs_parses(doc):
    for block in _python_blocks(doc):
        ast.parse(block)


def test_the_readme_code_runs_on_the_tiny_models(tiny, monkeypatch, capsys):
    """The README's Python, block after block in one namespace, with the embedded models
    swapped for the tiny ones (the real pair runs the same path in tests/test_real_pair.py)."""
    from specguard_graph.models import loading

    monkeypatch.setattr(loading, "load_lm", lambda role, *a, **k: getattr(tiny, role))
    monkeypatch.setattr(loading, "load_embedder", lambda *a, **k: tiny.embedder)
    blocks = _python_blocks(ROOT / "README.md")
    assert blocks
    namespace: dict = {"q": "What is 2 + 3?"}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["result"]["status"] and namespace["result"]["steps"]
    assert "step" in capsys.readouterr().out


def test_every_benchmark_script_is_listed_in_the_benchmarks_readme():
    bench = ROOT / "benchmarks"
    listed = (bench / "README.md").read_text()
    scripts = [p for p in bench.rglob("*.py") if "results" not in p.relative_to(bench).parts]
    assert scripts
    missing = [str(p.relative_to(bench)) for p in scripts if f"`{p.name}`" not in listed]
    assert not missing, f"not in benchmarks/README.md: {missing}"


def test_every_cited_benchmark_script_exists():
    """Docs, code and committed results name scripts by path; a moved script leaves none
    of them pointing nowhere."""
    cited = re.compile(r"benchmarks/[\w/]+\.py")
    texts = [*DOCS, ROOT / "benchmarks" / "README.md", *(ROOT / "specguard_graph").rglob("*.py"),
             *(ROOT / "specguard_graph").rglob("*.cpp"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "benchmarks" / "results").rglob("*.txt"),
             *(ROOT / "benchmarks" / "results").rglob("*.md")]  # fmt: skip
    broken = {
        f"{t.relative_to(ROOT)}: {path}"
        for t in texts
        for path in cited.findall(t.read_text(errors="replace"))
        if not (ROOT / path).exists()
    }
    assert not broken, sorted(broken)
