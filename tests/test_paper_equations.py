"""scripts/paper_equations.py: LaTeX's equation numbering, and citations by label rewritten."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import paper_equations as pe  # noqa: E402

TEX = r"""
\documentclass{article}
\usepackage{amsmath}
\numberwithin{equation}{section}
\begin{document}
\begin{equation}\label{eq:pre} a \end{equation}
\section{One}
\begin{equation}
\label{eq:a}
\begin{aligned} x &= 1 \\ y &= 2 \end{aligned}
\end{equation}
% \begin{equation}\label{eq:commented} \end{equation}
\begin{equation*} z \end{equation*}
\begin{align}
p &= 1 \nonumber\\
q &= 2 \label{eq:q}\\
r &= \begin{cases} 1 \\ 2 \end{cases} \label{eq:r}
\end{align}
\begin{eqnarray}
u &=& 1, \label{eq:u}\\
v &=& 2 \notag\\
w &=& 3 \label{eq:w}
\end{eqnarray}
\begin{equation}\tag{$\star$}\label{eq:star} s \end{equation}
\begin{equation}\label{eq:after-tag} t \end{equation}
\section*{Unnumbered}
\begin{equation}\label{eq:in-star-section} t \end{equation}
\section{Two}\label{sec:two}
\begin{multline}\label{eq:m} a \\ b \end{multline}
\appendix
\section{First appendix}
\begin{equation}\label{eq:app} c \end{equation}
\section{Second appendix}
\begin{align*} d \\ e \end{align*}
\begin{equation}\label{eq:app2} c \end{equation}
\end{document}
"""


def test_numbering_follows_latex() -> None:
    n = pe.equation_numbers(TEX)
    assert n == {
        "eq:pre": "0.1",
        "eq:a": "1.1",
        "eq:q": "1.2",
        "eq:r": "1.3",
        "eq:u": "1.4",
        "eq:w": "1.5",
        "eq:star": "$\\star$",
        "eq:after-tag": "1.6",
        "eq:in-star-section": "1.7",
        "eq:m": "2.1",
        "eq:app": "A.1",
        "eq:app2": "B.1",
    }


def test_numbering_without_numberwithin_is_global() -> None:
    tex = TEX.replace(r"\numberwithin{equation}{section}", "")
    n = pe.equation_numbers(tex)
    assert n["eq:pre"] == "1" and n["eq:a"] == "2" and n["eq:m"] == "9" and n["eq:app2"] == "11"


def test_committed_map_matches_the_paper() -> None:
    """The committed data is what the parser gives on the paper (when its source is here)."""
    data = json.loads(pe.DATA.read_text())["equations"]
    # spot checks against the paper's structure (section 2 holds the LAM equations)
    assert data["eq:HamHam_quad_only_J"] == "2.8"
    assert data["eq:intra"] == "2.10" and data["eq:inter"] == "2.11"
    assert data["eq:update_MC_iclr"] == "2.12"
    assert data["eq:spiked-decomp"] == "4.1"
    assert data["eq:kappa-inv"] == "B.8"
    if not pe.DEFAULT_TEX.exists():
        pytest.skip(f"no paper source at {pe.DEFAULT_TEX}")
    assert pe.equation_numbers(pe.DEFAULT_TEX.read_text()) == data


def test_rewrite_citations() -> None:
    numbers = {"eq:HamHam_quad_only_J": "2.8", "eq:intra": "2.10", "eq:inter": "2.11",
               "eq:net_field": "2.9", "eq:coverage": "2.26", "eq:overlap_crit": "2.14",
               "eq:acc_crit": "2.19"}
    text = (
        "({cite:p}`paper`, eq. *HamHam_quad_only_J*) and eqs. *net_field*, *intra*, *inter*;"
        " eqs. *intra*/*inter*; eqs. *overlap_crit*–*acc_crit*; equation `intra`; eq.\n"
        "  *HamHam_quad_only_J* as printed; the *coverage* of a class"
    )
    new, changes = pe.rewrite_text(text, numbers)
    assert new == (
        "({cite:p}`paper`, eq. (2.8)) and paper eqs. (2.9), (2.10), (2.11);"
        " paper eqs. (2.10)/(2.11); paper eqs. (2.14)–(2.19); paper eq. (2.10); paper eq.\n"
        "  (2.8) as printed; the *coverage* of a class"
    )
    assert len(changes) == 6
    assert pe.bare_citations(new, numbers) == []
    assert pe.bare_citations("the Hamiltonian `HamHam_quad_only_J` has", numbers) == [
        "HamHam_quad_only_J"
    ]
