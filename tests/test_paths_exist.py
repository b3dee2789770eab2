"""Every repository path the code's docstrings and comments name, and every path and
relative link in the Markdown files, exists.

What counts as a path (precise, so a miss is a real one):

- in docstrings and comments (found with ``ast`` and ``tokenize``, never in string
  literals): a word that starts with a top-level folder of the repository (``evaluator/``,
  ``docs/``, ``examples/``, ...) and is not glued to a longer word (a URL's
  ``.../tests/x`` is not one), or a root file name in capitals ending ``.md``;
- in Markdown: the same words inside inline code spans and fenced blocks, and every
  relative link target (``[text](target)``, images too), resolved from the page's folder,
  with its ``#anchor`` checked against the target page's headings.

Not paths: a word followed by ``<``, ``{``, ``*`` or ``[`` (a pattern, ``test_<module>.py``),
one with a component in capitals (a placeholder, ``benchmarks/NAME``), one of a single
component without a dot or a closing slash (the unit in "686 examples/s"), and one right
after a possessive (another project's: "httpcore's ``tests/...``"). Trailing punctuation is
not part of a path.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("evaluator", "reward", "llm_client", "skynet", "tests", "benchmarks", "examples", "docs")
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist"}

_TOPS = "|".join(TOP)
_PATH = re.compile(rf"(?<![\w./~-])((?:{_TOPS})/[\w./-]*|[A-Z][A-Z_]*\.md)")
_PATTERN_NEXT = set("<{*[")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
_POSSESSIVE = re.compile(r"\w's[\s`]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def paths_in(text: str) -> Iterator[tuple[int, str]]:
    """(offset, path) of every repository path named in ``text``."""
    for m in _PATH.finditer(text):
        path = m.group(1).rstrip(".")
        end = m.start(1) + len(path)
        if end < len(text) and text[end] in _PATTERN_NEXT:
            continue
        parts = path.rstrip("/").split("/")
        if any(_PLACEHOLDER.match(part) for part in parts[1:]):
            continue
        if len(parts) == 2 and "." not in parts[1] and not path.endswith("/"):
            continue
        if _POSSESSIVE.search(text, 0, m.start(1)):
            continue
        yield m.start(1), path


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def python_texts(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each docstring and comment of a Python source that may name
    a path: a source whose lines name none is not parsed, one whose lines that name a
    path hold no ``#`` is not tokenized."""
    lines = source.split("\n")
    named = [number for number, line in enumerate(lines, 1) if _PATH.search(line)]
    if not named:
        return
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:  # statements only: a docstring is never inside an expression
        node = todo.pop()
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    yield body[0].lineno, value
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo += [child for child in getattr(node, field, ()) if isinstance(child, ast.AST)]
    if not any("#" in lines[number - 1] for number in named):
        return
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def markdown_parts(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(code, prose) of a Markdown text: code spans and fenced lines, and the rest with its
    code spans blanked; each as (line, text)."""
    code: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            code.append((number, line))
            continue
        for m in _CODE_SPAN.finditer(line):
            code.append((number, m.group(2)))
        prose.append((number, _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return code, prose


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _files(root: Path, suffix: str) -> Iterator[Path]:
    """The files under ``root`` ending ``suffix``, sorted, never descending into a skipped
    folder (a virtual environment in the checkout holds tens of thousands of files)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [Path(folder, name) for name in files if name.endswith(suffix)]
    yield from sorted(found)


def broken(root: Path) -> list[str]:
    """Every path or link under ``root`` that names nothing, as ``file:line: what``."""
    out: list[str] = []

    def check(where: Path, line: int, path: str) -> None:
        if not (root / path).exists():
            out.append(f"{where.relative_to(root)}:{line}: {path} does not exist")

    for top in TOP:
        if not (root / top).is_dir():
            continue
        for file in _files(root / top, ".py"):
            source = file.read_text(encoding="utf-8")
            for first, text in python_texts(source):
                for offset, path in paths_in(text):
                    check(file, first + _line(text, offset), path)

    for page in _files(root, ".md"):
        text = page.read_text(encoding="utf-8")
        code, prose = markdown_parts(text)
        for line, part in code:
            for _, path in paths_in(part):
                check(page, line, path)
        for line, part in prose:
            for m in _LINK.finditer(part):
                target = m.group(1)
                if _SCHEME.match(target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(root)}:{line}: link {target}"
                if not dest.exists():
                    out.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    out.append(f"{where}: no heading #{anchor} in {dest.name}")
    return out


def test_every_named_path_and_link_exists() -> None:
    """Docstrings, comments and Markdown name only files and folders that exist, and
    every relative link (and its anchor) resolves."""
    assert broken(ROOT) == []


def test_a_made_up_path_or_link_is_caught(tmp_path: Path) -> None:
    """A made-up path in a docstring, a comment, a code span or a link is reported, with
    its file and line; patterns, URLs and real paths are not."""
    (tmp_path / "evaluator").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# Real page\n\n## A part: `x`\n")
    made_up = "evaluator/" + "_made_up.py"
    (tmp_path / "evaluator" / "mod.py").write_text(
        f'"""See {made_up} and docs/real.md."""\n'
        "x = 'evaluator/not_a_docstring.py'\n"
        f"# {'docs/' + 'gone.md'}, and tests/test_<module>.py is a pattern\n"
    )
    (tmp_path / "README.md").write_text(
        "Read [the page](docs/real.md#a-part-x), [gone](docs/nothing.md),\n"
        "[no part](docs/real.md#missing) and [the web](https://example.com/docs/x.md).\n"
        "`examples/" + "nope.py` and https://github.com/o/r/tree/main/tests/none.py\n"
        "```console\n$ python benchmarks/" + "missing.py\n```\n"
    )
    assert sorted(broken(tmp_path)) == sorted(
        [
            f"evaluator/mod.py:1: {made_up} does not exist",
            "evaluator/mod.py:3: docs/gone.md does not exist",
            "README.md:1: link docs/nothing.md: no such file",
            "README.md:2: link docs/real.md#missing: no heading #missing in real.md",
            "README.md:3: examples/nope.py does not exist",
            "README.md:5: benchmarks/missing.py does not exist",
        ]
    )


def test_a_stale_reference_of_the_old_kinds_is_caught(tmp_path: Path) -> None:
    """The two kinds of stale reference issue 25 found: a docs file that moved, named in a
    docstring, and a root file in capitals that does not exist."""
    (tmp_path / "llm_client").mkdir()
    (tmp_path / "llm_client" / "__init__.py").write_text(
        '"""docs/' + "architecture-llm.md draws the whole; the rules are ``" + 'CONTRACT.md``."""\n'
    )
    assert broken(tmp_path) == [
        "llm_client/__init__.py:1: docs/architecture-llm.md does not exist",
        "llm_client/__init__.py:1: CONTRACT.md does not exist",
    ]
