"""One self-contained HTML page per run: why each step was accepted or recomputed.

No network at view time (inline CSS, no script): the question, a summary strip (steps by
source, time by model), then each step with its source, score against τ, both signals, each
token shaded by its log-probability and its grounded mass, the k candidates with their vote
shares, and what the target wrote instead of a rejected draft step.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InputError

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:18px}
.q{background:#f4f4f8;padding:10px;border-radius:6px;white-space:pre-wrap}
.strip{display:flex;gap:18px;margin:12px 0;flex-wrap:wrap}
.strip div{background:#eef;padding:6px 10px;border-radius:6px}
.step{
  border:1px solid #ddd;
  border-left:6px solid #4a4;
  border-radius:6px;
  margin:10px 0;
  padding:8px 12px;
}
.step.rejected{border-left-color:#d80}
.step.tool{border-left-color:#48c}
.step.human{border-left-color:#a4c}
.head{display:flex;gap:14px;flex-wrap:wrap;font-size:13px;color:#444}
.head b{color:#000}
.bar{
  display:inline-block;
  width:120px;
  height:8px;
  background:#eee;
  position:relative;
  vertical-align:middle;
}
.bar i{position:absolute;left:0;top:0;bottom:0;background:#4a4}
.bar s{position:absolute;top:-3px;bottom:-3px;width:2px;background:#000}
.tokens{font-family:ui-monospace,monospace;white-space:pre-wrap;margin:6px 0;line-height:1.9}
.tok{border-bottom:3px solid transparent;padding:1px 0}
.tok.kept{outline:1px solid #4a4}
.text{
  white-space:pre-wrap;
  font-family:ui-monospace,monospace;
  background:#fafafa;
  padding:6px;
  border-radius:4px;
}
table.c{border-collapse:collapse;font-size:12px;margin-top:6px;width:100%}
table.c td,table.c th{border:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
tr.sel{background:#f3fff3}
.why{color:#a50}
.legend span{padding:1px 6px;margin-right:6px}
.grade.correct{color:#282}
.grade.wrong{color:#c22;font-weight:bold}
table.index td,table.index th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left}
"""


def _e(x: object) -> str:
    return html.escape(str(x))


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _lp_colour(lp: float) -> str:
    """Background: white at log p = 0, red as the token becomes unlikely (−8 and below)."""
    a = min(1.0, max(0.0, -lp / 8.0)) if math.isfinite(lp) else 1.0
    return f"rgba(220,40,40,{0.08 + 0.6 * a:.2f})"


def _g_colour(g: float) -> str:
    """Underline: blue for mass grounded on the context, grey when the token floats free."""
    a = min(1.0, max(0.0, g))
    return f"rgba(40,90,220,{0.15 + 0.85 * a:.2f})"


def _tokens(detail: Mapping[str, Any] | None, kept: int = 0) -> str:
    """The step's tokens; the first `kept` outlined (the tokens the target verified as its own)."""
    if not detail or not detail.get("pieces"):
        return ""
    pieces, lps = detail["pieces"], detail.get("logprobs") or []
    ground = detail.get("grounding") or []
    spans = []
    for i, piece in enumerate(pieces):
        style, title = "", []
        if i < len(lps):
            style += f"background:{_lp_colour(lps[i])};"
            title.append(f"log p {lps[i]:.2f}")
        if i < len(ground):
            style += f"border-bottom-color:{_g_colour(ground[i])};"
            title.append(f"grounded {ground[i]:.2f}")
        cls = "tok kept" if i < kept else "tok"
        spans.append(f'<span class="{cls}" style="{style}" title="{_e(", ".join(title))}">'
                     f"{_e(piece)}</span>")  # fmt: skip
    return f'<div class="tokens">{"".join(spans)}</div>'


def _candidates(signals: Sequence[Mapping[str, Any]] | None, selected: int | None) -> str:
    if not signals or len(signals) < 2:
        return ""
    rows = ["<tr><th>#</th><th>vote</th><th>ground</th><th>min log p</th><th>text</th></tr>"]
    for i, c in enumerate(signals):
        cls = ' class="sel"' if i == selected else ""
        rows.append(f"<tr{cls}><td>{i}</td><td>{_num(c.get('vote'))}</td>"
                    f"<td>{_num(c.get('grounding'))}</td><td>{_num(c.get('logprob'), 2)}</td>"
                    f"<td>{_e(c.get('text', ''))}</td></tr>")  # fmt: skip
    return f'<table class="c">{"".join(rows)}</table>'


def _spent(spent: Mapping[str, float] | None) -> str:
    """Where the step's time went: drafting, verifying (selector and signals), the target."""
    if not spent:
        return ""
    parts = [f"{k.removesuffix('_s')} {v:.2f}" for k, v in spent.items() if v is not None]
    return f' <span class="spent">({", ".join(parts)})</span>'


def _verified(v: Mapping[str, int], fallback: str | None) -> str:
    """How the target wrote a rejected step: what it kept of the draft's, and what it checked."""
    if fallback == "rewrite":
        return '<div class="verified">the target rewrote it token by token</div>'
    if not v:
        return ""
    return (
        f'<div class="verified">the target kept the first {v.get("kept", 0)} of '
        f"{v.get('candidate', 0)} drafted tokens (outlined), then accepted "
        f"{v.get('drafted', 0)} of {v.get('proposed', 0)} draft proposals and "
        f"{v.get('found', 0)} of {v.get('looked_up', 0)} looked-up tokens, in "
        f"{v.get('forwards', 0)} forwards</div>"
    )


def _step(step: Mapping[str, Any], more: Mapping[str, Any]) -> str:
    source = step.get("source", "draft")
    rejected = source == "target"
    cls = "step rejected" if rejected else f"step {source}"
    score, tau = step.get("score"), more.get("tau")
    bar = ""
    if score is not None:
        tick = f'<s style="left:{100 * tau:.0f}%"></s>' if tau is not None else ""
        bar = f'<span class="bar"><i style="width:{100 * score:.0f}%"></i>{tick}</span>'
    head = (f'<div class="head"><b>step {step.get("index")}</b><span>by <b>{_e(source)}</b>'
            f'</span><span>score {_num(score)} vs τ {_num(tau)} {bar}</span>'
            f'<span>grounding {_num(step.get("grounding"))}</span>'
            f'<span>log p {_num(step.get("logprob"), 2)}</span>'
            f'<span>{_num(more.get("time_s"), 2)} s{_spent(more.get("spent"))}</span>'
            "</div>")  # fmt: skip
    body = []
    if rejected:
        v = more.get("verified") or {}
        body.append(f'<div class="why">recomputed: {_e(more.get("reason") or "")}</div>')
        body.append(f"<div>the draft wrote:</div>{_tokens(more.get('detail'), v.get('kept', 0))}")
        body.append(_verified(v, more.get("fallback")))
        if not (more.get("detail") or {}).get("pieces"):
            body.append(f'<div class="text">{_e(more.get("draft_text") or "")}</div>')
        body.append("<div>the target wrote instead:</div>")
        body.append(f'<div class="text">{_e(step.get("text", ""))}</div>')
    else:
        body.append(
            _tokens(more.get("detail")) or f'<div class="text">{_e(step.get("text"))}</div>'
        )
    body.append(_candidates(more.get("candidate_signals"), more.get("selected")))
    return f'<section class="{cls}">{head}{"".join(body)}</section>'


def _strip(trace: Mapping[str, Any]) -> str:
    steps = trace.get("steps") or []
    by = {}
    for s in steps:
        by[s.get("source")] = by.get(s.get("source"), 0) + 1
    t = trace.get("timing") or {}
    cells = [f"<b>{len(steps)}</b> steps"] + [f"{n} by {_e(k)}" for k, n in by.items()]
    cells += [f"total {_num(t.get('total_s'), 1)} s", f"draft {_num(t.get('draft_s'), 1)} s",
              f"verify {_num(t.get('verify_s'), 2)} s", f"target {_num(t.get('target_s'), 1)} s",
              f"answer <b>{_e(trace.get('answer'))}</b> ({_e(trace.get('status'))})"]  # fmt: skip
    return '<div class="strip">' + "".join(f"<div>{c}</div>" for c in cells) + "</div>"


def as_trace(record: dict[str, Any]) -> dict[str, Any]:
    """A `solve --out` trace as it is; a `bench` record as a trace: its `step_records`, or its
    whole text where the method has no steps (target-only, token-level SD)."""
    if "step_records" in record or ("text" in record and "steps" not in record):
        steps = record.get("step_records") or []
        return {**record, "steps": steps, "detail": steps,
                "timing": record.get("timing") or {"total_s": record.get("latency_s")},
                "question": record.get("question", f"problem {record.get('id')}")}  # fmt: skip
    if "steps" not in record:
        raise InputError("a line is neither a solve trace nor a bench record")
    return record


def section(trace: Mapping[str, Any]) -> str:
    """One run: question, summary strip, steps."""
    details = trace.get("detail") or [{} for _ in trace.get("steps") or []]
    steps = "".join(
        _step(s, d or {}) for s, d in zip(trace.get("steps") or [], details, strict=False)
    )
    if not steps and trace.get("text"):  # a method without steps: its whole text
        steps = f'<div class="text">{_e(trace["text"])}</div>'
    grade = ""
    if "correct" in trace:
        mark = "correct" if trace["correct"] else "wrong"
        grade = f'<p class="grade {mark}">{mark}: gold answer {_e(trace.get("gold"))}</p>'
    return (f'<h1>Question</h1><div class="q">{_e(trace.get("question", ""))}</div>'
            f"{grade}{_strip(trace)}{steps}")  # fmt: skip


def page(traces: Sequence[Mapping[str, Any]], title: str = "specguard run") -> str:
    legend = ('<p class="legend"><span style="background:rgba(220,40,40,.5)">red</span>unlikely '
              'token (log p) <span style="border-bottom:3px solid rgba(40,90,220,1)">blue</span>'
              "grounded on the question and accepted steps</p>")  # fmt: skip
    body = "<hr>".join(section(t) for t in traces)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>{legend}{body}</body></html>")  # fmt: skip
