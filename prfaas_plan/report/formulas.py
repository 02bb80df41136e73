"""S_kv(l) written out: a :class:`~prfaas_plan.analysis.KvFormula` as sympy would pretty-print and LaTeX it.

``S_kv(l) = a*l + sum_W b_W * min(l, W) + c`` is printed directly, term by term, in the layout
``sympy.pretty(kvcache.kv_bytes_expr(...), use_unicode=True)`` and ``sympy.latex`` give (the
growing term, the windowed terms by W, the constant; ``min(l, W)`` as a two-case Piecewise),
without importing sympy (about a second). Tests hold the two texts equal to sympy's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prfaas_plan.analysis import KvFormula

DOT = "\u22c5"  # sympy's multiplication sign


def _centre(text: str, width: int) -> str:
    pad = width - len(text)
    return " " * (pad // 2) + text + " " * (pad - pad // 2)


def _cases(window_tokens: int) -> list[str]:
    """The three lines of ``(l for l <= W; W otherwise)``, in parentheses."""
    w = str(window_tokens)
    exprs, conds = ("l", w), (f"for l \u2264 {w}", "otherwise")
    we, wc = max(map(len, exprs)), max(map(len, conds))
    rows = [_centre(e, we) + "  " + _centre(c, wc) for e, c in zip(exprs, conds)]
    return [f"\u239b\u23a7{rows[0]}\u239e", f"\u239c\u23a8{' ' * (we + 2 + wc)}\u239f", f"\u239d\u23a9{rows[1]}\u23a0"]


def _coefficient(n: int, symbol: str) -> str:
    return symbol if n == 1 else f"{n}{DOT}{symbol}"


def kv_pretty(f: KvFormula) -> str:
    """``sympy.pretty(expr, use_unicode=True)`` of ``S_kv(l)`` (one line, or three with windows)."""
    lines = ["", "", ""]  # top, baseline, bottom

    def add(text: str) -> None:
        lines[0] += " " * len(text)
        lines[1] += text
        lines[2] += " " * len(text)

    terms = 0
    if f.per_token_bytes:
        add(_coefficient(f.per_token_bytes, "l"))
        terms += 1
    for b, w in f.windows:
        add((" + " if terms else "") + ("" if b == 1 else f"{b}{DOT}"))
        top, mid, bottom = _cases(w)
        lines[0], lines[1], lines[2] = lines[0] + top, lines[1] + mid, lines[2] + bottom
        terms += 1
    if f.fixed_bytes or not terms:
        add((" + " if terms else "") + str(f.fixed_bytes))
    return "\n".join(lines) if f.windows else lines[1]


def kv_latex(f: KvFormula) -> str:
    """``sympy.latex(expr)`` of ``S_kv(l)``."""
    terms = []
    if f.per_token_bytes:
        terms.append("l" if f.per_token_bytes == 1 else f"{f.per_token_bytes} l")
    for b, w in f.windows:
        cases = rf"\begin{{cases}} l & \text{{for}}\: l \leq {w} \\{w} & \text{{otherwise}} \end{{cases}}"
        terms.append(cases if b == 1 else rf"{b} \left({cases}\right)")
    if f.fixed_bytes or not terms:
        terms.append(str(f.fixed_bytes))
    return " + ".join(terms)
