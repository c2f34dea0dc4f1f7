"""The paper's equation numbers, as its PDF prints them, and the book's citations of them.

The source paper (``paper.tex``) labels its equations with LaTeX labels such as
``eq:HamHam_quad_only_J``; a reader of the book has the PDF, which shows numbers. This script

* parses ``paper.tex`` and numbers every displayed equation the way LaTeX does
  (``python scripts/paper_equations.py --tex PATH --write``), writing the map
  label -> printed number to ``book/_data/paper_equations.json`` (committed: the book must
  build without the paper's source next to it);
* rewrites citations by label in the markdown cells of notebooks, e.g.
  "eq. *HamHam_quad_only_J*" -> "eq. (2.10)", "eqs. *intra*/*inter*" -> "eqs. (2.12)/(2.13)"
  (``--rewrite NB.ipynb ...``), and lists the citations it would rewrite (``--list NB ...``).

Numbering rules implemented (LaTeX 2e + amsmath, as used by the paper):

* the paper loads ``jheppub.sty``, which sets ``\\numberwithin{equation}{section}`` and
  ``\\theequation = \\thesection.\\arabic{equation}``: numbers read "(S.n)", the counter is
  reset at every numbered ``\\section``; ``\\section*`` does not step the section counter;
  after ``\\appendix`` sections are lettered A, B, ... (``\\numberwithin`` is detected in the
  source too, so a document without jheppub numbers equations 1, 2, 3, ...);
* ``equation`` takes one number (labels anywhere inside it, e.g. in a nested ``aligned``,
  get that number); ``align``, ``eqnarray``, ``gather``, ``flalign``, ``alignat`` number every
  row (rows split by ``\\\\`` at the environment's own nesting level) unless the row carries
  ``\\nonumber``/``\\notag``; ``multline`` takes one number; starred environments, ``\\[ \\]``
  and ``$$`` none; ``\\tag{x}`` prints x and does not step the counter;
* comments (``%`` to the end of the line) are ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "_data" / "paper_equations.json"
# the paper's source sits next to the repository in the project's layout; override with
# $FEDLAM_PAPER_TEX (the committed map is all the book needs)
DEFAULT_TEX = Path(os.environ.get("FEDLAM_PAPER_TEX", ROOT.parent / "shared" / "paper" / "paper.tex"))

ROW_ENVS = {"align", "eqnarray", "gather", "flalign", "alignat"}
ONE_ENVS = {"equation", "multline"}


def strip_comments(tex: str) -> str:
    """Drop ``%`` comments (an escaped ``\\%`` is kept)."""
    return "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())


def _alph(n: int) -> str:
    s = ""
    while n > 0:
        n, r = divmod(n - 1, 26)
        s = chr(ord("A") + r) + s
    return s


_TOKEN = re.compile(
    r"\\begin\{(?P<begin>[A-Za-z*]+)\}"
    r"|\\end\{(?P<end>[A-Za-z*]+)\}"
    r"|\\(?P<section>section)(?P<star>\*?)\s*[\[{]"
    r"|\\(?P<appendix>appendix)\b"
    r"|\\label\{(?P<label>[^}]*)\}"
    r"|\\(?P<nonumber>nonumber|notag)\b"
    r"|\\tag\*?\{(?P<tag>[^}]*)\}"
    r"|(?P<newrow>\\\\)"
)


def equation_numbers(tex: str) -> dict[str, str]:
    """Map every label of a numbered display in ``tex`` to its printed number (no parentheses).

    Labels of unnumbered rows, of sections, theorems, figures, ... are not in the map.
    """
    tex = strip_comments(tex)
    begin = tex.find(r"\begin{document}")
    end = tex.find(r"\end{document}")
    body = tex[begin if begin >= 0 else 0 : end if end >= 0 else len(tex)]
    per_section = bool(re.search(r"\\numberwithin\{equation\}\{section\}", tex)) or bool(
        re.search(r"\\usepackage(\[[^]]*\])?\{jheppub\}", tex)
    )

    section = 0
    appendix = False
    counter = 0
    numbers: dict[str, str] = {}

    # state of the display being read: env name, nesting depth, labels and flags of the row
    env: str | None = None
    depth = 0
    row_labels: list[str] = []
    row_tag: str | None = None
    row_nonumber = False

    def label_of(n: int) -> str:
        if not per_section:
            return str(n)
        sec = _alph(section) if appendix else str(section)
        return f"{sec}.{n}"

    def close_row() -> None:
        nonlocal counter, row_labels, row_tag, row_nonumber
        if row_tag is not None:
            printed: str | None = row_tag
        elif row_nonumber:
            printed = None
        else:
            counter += 1
            printed = label_of(counter)
        if printed is not None:
            for lab in row_labels:
                numbers[lab] = printed
        row_labels, row_tag, row_nonumber = [], None, False

    for m in _TOKEN.finditer(body):
        if env is None:
            if m.group("section") and not m.group("star"):
                section += 1
                if per_section:
                    counter = 0
            elif m.group("appendix"):
                appendix, section = True, 0
            elif m.group("begin") in ROW_ENVS | ONE_ENVS:
                env, depth = m.group("begin"), 0
                row_labels, row_tag, row_nonumber = [], None, False
            continue
        # inside a numbered display
        if m.group("begin"):
            depth += 1
        elif m.group("end"):
            if depth == 0 and m.group("end") == env:
                close_row()
                env = None
            else:
                depth -= 1
        elif m.group("label"):
            row_labels.append(m.group("label"))
        elif m.group("nonumber"):
            row_nonumber = True
        elif m.group("tag") is not None:
            row_tag = m.group("tag")
        elif m.group("newrow") and depth == 0 and env in ROW_ENVS:
            close_row()
    return numbers


# ---- citations in the book ------------------------------------------------------------

def short_labels(numbers: dict[str, str]) -> dict[str, str]:
    """The map keyed by label without its ``eq:`` prefix (the book cites the bare name)."""
    return {lab.split(":", 1)[1] if lab.startswith("eq:") else lab: n for lab, n in numbers.items()}


def _citation_regex(names: list[str]) -> re.Pattern[str]:
    alt = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    token = rf"(?:\*|``?)(?:eq:)?(?:{alt})(?:\*|``?)"
    sep = r"(?:\s*(?:,\s*and|,|and|–|—|-|/)\s*)"
    # "eq." / "eqs." / "equation(s)" then one or more marked labels (line breaks allowed)
    return re.compile(rf"(?P<word>\b(?:[Ee]qs?\.|[Ee]quations?))(?P<gap>\s+)(?P<list>{token}(?:{sep}{token})*)")


_MARKED = re.compile(r"(?:\*|``?)(?:eq:)?([A-Za-z][\w-]*)(?:\*|``?)")


def rewrite_text(text: str, numbers: dict[str, str]) -> tuple[str, list[tuple[str, str]]]:
    """Rewrite "eq. *label*" citations in ``text`` into "eq. (N)"; return the text and the changes."""
    names = short_labels(numbers)
    rx = _citation_regex(list(names))
    changes: list[tuple[str, str]] = []

    def repl(m: re.Match[str]) -> str:
        new_list = _MARKED.sub(lambda t: f"({names[t.group(1)]})", m.group("list"))
        word = m.group("word")
        capital = word[0].isupper()
        if word.lower().startswith("equation"):
            word = "eqs." if word.lower().endswith("s") else "eq."
        word = word.lower()
        # the book numbers its own equations "(chapter.n)" too: say whose equation it is
        # unless the sentence just did ("({cite:p}`paper`, eq. ...", "the paper's eq. ...")
        before = m.string[max(0, m.start() - 30) : m.start()]
        if not re.search(r"paper|\bits\s*$", before):
            word = f"paper {word}"
        if capital:
            word = word[0].upper() + word[1:]
        gap = m.group("gap") if "\n" in m.group("gap") else " "
        new = f"{word}{gap}{new_list}"
        changes.append((m.group(0), new))
        return new

    return rx.sub(repl, text), changes


def bare_citations(text: str, numbers: dict[str, str]) -> list[str]:
    """Labels still cited in ``text`` as a marked name (``*label*`` or `` `label` ``).

    Only distinctive labels (with ``_``, ``-``, a digit or a capital) are looked for outside
    an "eq." context: a word such as *coverage* is emphasis, not a citation.
    """
    names = short_labels(numbers)
    found = []
    for m in _MARKED.finditer(text):
        name = m.group(1)
        if name in names and re.search(r"[_\-0-9A-Z]", name):
            found.append(name)
    return found


def _read(path: Path):  # nbformat.NotebookNode
    import nbformat

    return nbformat.read(path, as_version=4)


def rewrite_notebook(path: Path, numbers: dict[str, str], write: bool) -> list[tuple[int, str, str]]:
    """Rewrite the markdown cells of one notebook; return (cell index, old, new) per change."""
    nb = _read(path)
    out = []
    for i, cell in enumerate(nb.cells):
        if cell["cell_type"] != "markdown":
            continue
        src = "".join(cell["source"])
        new, changes = rewrite_text(src, numbers)
        out.extend((i, a, b) for a, b in changes)
        if new != src:
            cell["source"] = new
    if write and out:
        import nbformat

        path.write_text(nbformat.writes(nb) + "\n")
    return out


def load_numbers() -> dict[str, str]:
    return json.loads(DATA.read_text())["equations"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tex", type=Path, default=DEFAULT_TEX, help="the paper's LaTeX source")
    ap.add_argument("--write", action="store_true", help=f"write {DATA.relative_to(ROOT)}")
    ap.add_argument("--rewrite", nargs="*", type=Path, default=[], help="notebooks to rewrite")
    ap.add_argument("--list", nargs="*", type=Path, default=[], help="notebooks to list")
    ap.add_argument(
        "--rewrite-text", nargs="*", type=Path, default=[],
        help="other text files (e.g. fedlam/*.py, whose docstrings cite the paper) to rewrite",
    )
    args = ap.parse_args(argv)

    if args.write:
        numbers = equation_numbers(args.tex.read_text())
        DATA.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "source": "paper.tex (parsed by scripts/paper_equations.py)",
            "numbering": "(section.n), reset at every section; appendix sections lettered",
            "equations": numbers,
        }
        DATA.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"{len(numbers)} equation labels -> {DATA.relative_to(ROOT)}")
    numbers = load_numbers()
    for path in args.rewrite_text:
        text = path.read_text()
        new, changes = rewrite_text(text, numbers)
        for old, rep in changes:
            print(f"{path}: {old!r} -> {rep!r}")
        if new != text:
            path.write_text(new)
    for path in [*args.rewrite, *args.list]:
        changes = rewrite_notebook(path, numbers, write=path in args.rewrite)
        for i, old, new in changes:
            print(f"{path}: cell {i}: {old!r} -> {new!r}")
        for i, cell in enumerate(_read(path).cells):
            if cell["cell_type"] == "markdown":
                text, _ = rewrite_text("".join(cell["source"]), numbers)
                for name in bare_citations(text, numbers):
                    print(f"{path}: cell {i}: label still cited by name (by hand): {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
