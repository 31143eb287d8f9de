"""Answer matching: normalised exact match, numbers with tolerance, and math equivalence."""

from __future__ import annotations

import math
import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation.replace(".", "").replace("-", ""))
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def normalize(text: str) -> str:
    """NFKC, casefold, drop articles and punctuation (keeping decimal points and signs), squeeze spaces."""
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = text.translate(_PUNCT)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


_ANSWER_LINE = re.compile(r"^\s*(?:\*\*)?(?:final answer|answer)(?:\*\*)?\s*[:：]\s*(.+?)\s*$", re.I | re.M)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def extract(text: str, how: str) -> str:
    """The part of a reply that is the answer: ``none`` (all of it), ``answer-line`` (the text after the last
    "Answer:" line, else a \\boxed{} value, else all of it)."""
    if how == "none":
        return str(text)
    if how != "answer-line":
        raise ValueError(f"unknown extract {how!r}; use none or answer-line")
    lines = _ANSWER_LINE.findall(str(text))
    if lines:
        return lines[-1].strip().strip("*").strip()
    boxed = _BOXED.findall(str(text))
    return boxed[-1] if boxed else str(text)


def strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(str(text))]


def numeric_equal(got: str, expected: float, rel_tol: float, abs_tol: float) -> bool:
    """The answer's last number equals `expected` within tolerance (models often restate the question first)."""
    found = numbers(got)
    return bool(found) and math.isclose(found[-1], float(expected), rel_tol=rel_tol, abs_tol=abs_tol)


def _latex(text) -> str:
    """math-verify extracts expressions only between delimiters; bare ones get them added."""
    text = str(text).strip()
    return text if "$" in text or "\\boxed" in text else f"${text}$"


def math_equal(got: str, expected: str) -> tuple[bool, str]:
    """Equivalence via math-verify, else sympy, else normalised text; returns (equal, engine)."""
    try:
        from math_verify import parse, verify  # type: ignore
    except ImportError:
        pass
    else:
        gold, pred = parse(_latex(expected)), parse(_latex(got))
        if gold and pred:
            return bool(verify(gold, pred)), "math-verify"
    try:
        import sympy  # type: ignore
        from sympy.parsing.sympy_parser import parse_expr  # type: ignore
    except ImportError:
        return normalize(got) == normalize(expected), "text"
    try:
        diff = sympy.simplify(parse_expr(str(got).strip().strip("$")) - parse_expr(str(expected).strip().strip("$")))
        return diff == 0, "sympy"
    except Exception:
        return normalize(got) == normalize(expected), "text"


def check(args: dict, *, answer: str, **_) -> dict:
    """args: expected, aliases=[], mode=auto|exact|numeric|math, rel_tol=1e-6, abs_tol=1e-9,
    extract=none|answer-line (which part of the reply is the answer), accents=true (false: "Bogota" matches
    "Bogotá" in exact mode)."""
    if "expected" not in args:
        raise ValueError("answer verifier needs args.expected")
    expected = args["expected"]
    mode = args.get("mode", "auto")
    if mode == "auto":
        mode = "numeric" if isinstance(expected, (int, float)) and not isinstance(expected, bool) else "exact"
    if not str(answer).strip():
        return {"reward": 0.0, "details": {"mode": mode, "reason": "empty answer"}}
    answer = extract(answer, args.get("extract", "none"))
    golds = [expected, *args.get("aliases", [])]
    engine = mode
    if mode == "exact":
        norm = normalize if args.get("accents", True) else (lambda t: normalize(strip_accents(str(t))))
        ok = norm(answer) in {norm(g) for g in golds}
    elif mode == "numeric":
        ok = any(numeric_equal(answer, float(g), args.get("rel_tol", 1e-6), args.get("abs_tol", 1e-9)) for g in golds)
    elif mode == "math":
        ok = False
        for g in golds:
            ok, engine = math_equal(answer, g)
            if ok:
                break
    else:
        raise ValueError(f"unknown answer mode {mode!r}; use auto, exact, numeric or math")
    return {"reward": 1.0 if ok else 0.0, "details": {"mode": mode, "engine": engine, "expected": expected}}
