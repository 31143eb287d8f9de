"""The search family's LLM pipeline (DeepSeek-V3.2): long-tail entity -> question -> answers -> verdicts -> rubric.

For each long-tail entity sampled from a corpus (``envgen.retrieval.corpus``):

1. a question-construction agent (one of several named configurations, each with a depth and a
   breadth) explores it with ``search``/``open`` and submits a question, its ground truth, aliases and
   the evidence pages it opened;
2. answer agents with different configurations (closed-book, quick search, deep search, ...) answer it;
3. a verifier agent with search checks, over several independent passes, that the ground truth is
   proven and unique, and judges every candidate answer;
4. the keep rule: keep the question only when the ground truth is verified (every pass) and every
   candidate is wrong (``max_correct``, default 0; a candidate that matches the ground truth by the
   answer kit's normalised match counts as correct whatever the verifier says);
5. a rubric writer turns the kept question into weighted criteria and pitfalls (seeded with the wrong
   candidates), for the rubric judge (``envgen.llm.judge``).

Kept questions become ``rubric`` tasks (the sandbox checks the short answer; the host's judge applies
the rubric) whose reference replays the evidence through the pack's own search tools, and go through
the same red-team gate and atomic save as every family (``envgen.build.offline.build_generated``).

Everything is resumable like the general family: one store stage per entity (state, candidates, paid
LLM calls and search answers live in the store); running the same command again skips finished
entities and replays paid calls.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...llm.client import LLMConfig, LLMPool
from ...llm.agent import AgentResult, FunctionTools, ToolOutput, Tools
from ...build.offline import Progress, build_generated, check_out
from ...build.distributed import LEASE_S, check_executor
from ...build.pipeline import LLMPipeline
from ...build.report import BuildReport, count_reasons
from ...retrieval.corpus import Doc, Entity, build_index, index_corpus, mine_entities, open_index, sample_entities
from ...errors import InputError, SearchSynthesisError
from ...build.sdk import Generated, load_module
from ...llm.judge import Rubric
from ...pack.format import Limits, Task
from ...paths import bundled
from ...retrieval.pages import CachedBackend, LocalBackend, PageBackend, SearchCache, WebBackend, agent_tools
from ...paths import cache_dir

GENERATOR = "envgen.families.search/1"
ROLES = ("search-question-constructor", "search-answerer", "search-verifier", "search-rubric-writer")
PACK_LIMITS = Limits(max_turns=24, step_timeout_s=10.0, episode_timeout_s=600.0)
TOOLS_INSTRUCTION = ("Use the search and open tools to look this up. End your reply with a line of the form "
                     "'Answer: <your answer>'.")
CLOSED_INSTRUCTION = ("You have no tools: answer from what you know. End your reply with a line of the form "
                      "'Answer: <your answer>'.")


# ----------------------------------------------------------------------------- configuration


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConstructorConfig(_M):
    """A named question-construction setting: how many hops (depth) and side-by-side entities (breadth)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    depth: int = Field(2, ge=1, le=6)
    breadth: int = Field(1, ge=1, le=8)
    llm: str | None = None
    """Preferred LLM config name in the pool (else the role's, else round-robin)."""
    max_turns: int | None = Field(None, ge=1)


class AnswererConfig(_M):
    """A named answer agent: with or without search tools, its own turn budget and model."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    tools: bool = True
    llm: str | None = None
    max_turns: int | None = Field(None, ge=1)
    note: str = ""
    """Extra instructions appended to the answerer role's system prompt."""


class KeepRule(_M):
    require_verified: bool = True
    """Every verifier pass must find the ground truth supported by the pages."""
    require_unique: bool = True
    """Every verifier pass must find it the only correct answer."""
    max_correct: int = Field(0, ge=0)
    """Candidates allowed to be correct (0: every answer agent must fail, DeepSeek-V3.2's rule)."""


class SearchSynthConfig(_M):
    constructors: list[ConstructorConfig] = Field(default_factory=lambda: [
        ConstructorConfig(name="chain", depth=3, breadth=1),
        ConstructorConfig(name="compare", depth=1, breadth=2),
        ConstructorConfig(name="mixed", depth=2, breadth=2)], min_length=1)
    answerers: list[AnswererConfig] = Field(default_factory=lambda: [
        AnswererConfig(name="closed-book", tools=False, max_turns=1),
        AnswererConfig(name="quick-search", tools=True, max_turns=6),
        AnswererConfig(name="deep-search", tools=True, max_turns=16)], min_length=1)
    verify_passes: int = Field(2, ge=1, le=10)
    keep: KeepRule = Field(default_factory=KeepRule)
    rubrics: bool = True
    """Write a rubric per kept question (tasks get the ``rubric`` verifier); else ``answer`` verifiers."""
    min_score: float = Field(0.0, ge=0, le=1)
    """Entities below this long-tail score are not sampled."""
    entity_kinds: list[Literal["title", "span"]] = Field(default_factory=lambda: ["title"])
    languages: list[str] | None = None
    """Sample only entities in these languages (None: all)."""
    domains: list[str] | None = None
    """Sample only entities from pages of these domains (None: all)."""

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:10]


def load_search_config(path: str | Path) -> SearchSynthConfig:
    """A SearchSynthConfig from YAML or JSON (unknown keys are errors naming the field)."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{p}: cannot read the search config: {e}") from None
    try:
        return SearchSynthConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"{p}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


# ----------------------------------------------------------------------------- host tools of the agents


def _kit_answer():
    return load_module(bundled("verifiers") / "envgen_verifiers" / "answer.py", "envgen_kit_answer")


def answer_check(gt: str, aliases: list[str]) -> dict[str, Any]:
    """The deterministic answer check of a question (the ``answer`` verifier's args)."""
    mode = "numeric" if re.fullmatch(r"[-+]?\d[\d,]*(\.\d+)?", gt.strip()) else "exact"
    args: dict[str, Any] = {"expected": gt.strip(), "aliases": [a for a in aliases if a.strip()], "mode": mode,
                            "extract": "answer-line"}
    if mode == "numeric":
        args["expected"] = float(gt.replace(",", "")) if "." in gt else int(gt.replace(",", ""))
        args["aliases"] = []
        args.update(rel_tol=0.0, abs_tol=0.5)
    else:
        args["accents"] = False
    return args


def matches(check: dict[str, Any], answer: str | None) -> bool:
    if not answer:
        return False
    return _kit_answer().check(check, answer=answer)["reward"] == 1.0


def contains(text: str, phrase: str) -> bool:
    """Whether ``phrase`` appears in ``text`` as whole words (kit normalisation, accents ignored)."""
    kit = _kit_answer()
    norm = lambda t: kit.normalize(kit.strip_accents(str(t)))  # noqa: E731
    p = norm(phrase)
    return bool(p) and f" {p} " in f" {norm(text)} "


class Reader:
    """``search``/``open`` over a backend, remembering the pages opened (evidence must be among them)."""

    def __init__(self, backend: PageBackend):
        self.backend = backend
        self.opened: dict[str, dict[str, Any]] = {}
        search, open_ = agent_tools(backend)
        reader = self

        def open(id_or_url: str) -> dict:  # noqa: A001 (the tool's name)
            page = open_(id_or_url)
            reader.opened[page["id"]] = page
            if page.get("url"):
                reader.opened.setdefault(page["url"], page)
            reader.opened.setdefault(str(id_or_url).strip(), page)
            return page

        open.__doc__ = open_.__doc__
        self.search, self.open = search, open

    def knows(self, ref: str) -> dict[str, Any] | None:
        return self.opened.get(str(ref).strip())


class QuestionBox:
    def __init__(self, reader: Reader):
        self.reader = reader
        self.result: dict[str, Any] | None = None

    def submit_question(self, question: str, answer: str, evidence: list[str], aliases: list[str] | None = None,
                        path: str = "") -> ToolOutput:
        """Hand in the question (once). An empty question means the entity leads nowhere (say why in path).

        Args:
            question: the question for a search agent, naming only the start entity
            answer: the ground truth: short (a name, a code, a number)
            evidence: ids or URLs of the pages you opened that prove the answer, in hop order
            aliases: other accepted spellings of the answer
            path: the chain of facts from the entity to the answer, one hop per sentence
        """
        if not str(question).strip():
            self.result = {"gave_up": True, "path": str(path).strip() or "no reason given"}
            return ToolOutput("Recorded: no question for this entity.", final=True)
        if not str(answer).strip():
            raise ValueError("answer is empty; give the short ground-truth answer")
        if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) for e in evidence):
            raise ValueError("evidence must be a non-empty list of page ids or URLs you opened")
        unread = [e for e in evidence if self.reader.knows(e) is None]
        if unread:
            raise ValueError(f"evidence {unread} was not opened in this session; open each page you cite first")
        aliases = [str(a) for a in (aliases or []) if str(a).strip()]
        if contains(str(question), str(answer)):
            raise ValueError("the question contains its own answer; rephrase it so the answer must be looked up")
        pages = [self.reader.knows(e)["id"] for e in evidence]
        self.result = {"gave_up": False, "question": str(question).strip(), "answer": str(answer).strip(),
                       "aliases": aliases, "evidence": list(dict.fromkeys(pages)), "path": str(path).strip()}
        return ToolOutput("Question recorded.", final=True)


class VerdictBox:
    def __init__(self, candidate_ids: list[str]):
        self.ids = candidate_ids
        self.result: dict[str, Any] | None = None

    def submit_verdict(self, supported: bool, unique: bool, candidates: list[dict], notes: str = "") -> ToolOutput:
        """Hand in your verdict (once).

        Args:
            supported: whether the pages prove the ground truth answers the question as asked
            unique: whether the ground truth is the only correct answer
            candidates: one {"id": CANDIDATE_ID, "correct": true|false} per candidate answer
            notes: what you checked, and any problem found
        """
        if not isinstance(supported, bool) or not isinstance(unique, bool):
            raise ValueError("supported and unique must be true or false")
        if not isinstance(candidates, list):
            raise ValueError("candidates must be a list of {id, correct}")
        got: dict[str, bool] = {}
        for c in candidates:
            if not isinstance(c, dict) or c.get("id") not in self.ids or not isinstance(c.get("correct"), bool):
                raise ValueError(f"each candidate must be {{\"id\": one of {self.ids}, \"correct\": true|false}}")
            got[c["id"]] = c["correct"]
        missing = [i for i in self.ids if i not in got]
        if missing:
            raise ValueError(f"judge every candidate; missing: {missing}")
        self.result = {"supported": supported, "unique": unique, "correct": got, "notes": str(notes).strip()}
        return ToolOutput("Verdict recorded.", final=True)


class RubricBox:
    def __init__(self, question: str, answer: str):
        self.question, self.answer = question, answer
        self.result: dict[str, Any] | None = None

    def submit_rubric(self, criteria: list[dict], pitfalls: list[dict] | None = None) -> ToolOutput:
        """Hand in the rubric (once).

        Args:
            criteria: 2-5 of {"text": what a good answer does, "weight": positive number}
            pitfalls: 0-3 of {"text": a specific wrong answer or mistake, "penalty": number in (0, 1]}
        """
        if not isinstance(criteria, list) or not criteria:
            raise ValueError("criteria must be a non-empty list of {text, weight}")
        if not isinstance(pitfalls or [], list):
            raise ValueError("pitfalls must be a list of {text, penalty}")
        crit = [{"id": f"c{i + 1}", "text": str(c.get("text", "")).strip() if isinstance(c, dict) else "",
                 "weight": c.get("weight", 1) if isinstance(c, dict) else 0} for i, c in enumerate(criteria)]
        pits = [{"id": f"p{i + 1}", "text": str(p.get("text", "")).strip() if isinstance(p, dict) else "",
                 "penalty": p.get("penalty", 1) if isinstance(p, dict) else 0} for i, p in enumerate(pitfalls or [])]
        try:
            rubric = Rubric(question=self.question, reference_answer=self.answer, criteria=crit, pitfalls=pits)
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        self.result = {"criteria": [c.model_dump() for c in rubric.criteria],
                       "pitfalls": [p.model_dump() for p in rubric.pitfalls]}
        return ToolOutput("Rubric recorded.", final=True)


# ----------------------------------------------------------------------------- the pipeline


class _SearchSynth(LLMPipeline):
    def __init__(self, out: Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool, corpus: Any, index: Path | None,
                 questions: int, seed: int, search: str | PageBackend, config: SearchSynthConfig, store_url: str | None,
                 workers: int, sandbox: str, work_dir: Path | None, agents_dir: Path | None,
                 progress: Progress | None, name: str | None, retry_failed: bool = False):
        if questions < 1:
            raise InputError(f"questions must be at least 1, got {questions}")
        if isinstance(search, str) and search not in ("local", "web"):
            raise InputError(f"unknown search backend {search!r} for the search family; use local or web")
        self.out, self.n, self.seed, self.cfg = Path(out), questions, seed, config
        self.workers, self.sandbox = max(1, workers), sandbox
        given = search.inner if isinstance(search, CachedBackend) else search
        self.search_kind = given if isinstance(given, str) else given.name
        work = Path(work_dir) if work_dir is not None else cache_dir() / "synth-search"
        work.mkdir(parents=True, exist_ok=True)
        self.index = self._index(corpus, index, work)
        self.local = LocalBackend(self.index)
        ident = self.local.identity.split(":", 1)[1]
        self.name = name or f"search-{ident[:8]}"
        run_id = f"search/{ident}/{config.digest()}/{self.search_kind}/seed{seed}"
        # LLM requests are salted without the config, so a run with another keep rule replays paid calls
        super().__init__(llm=llm, store_url=store_url, run_id=run_id, roles=ROLES, agents_dir=agents_dir,
                         work=work / run_id.replace("/", "_"), progress=progress,
                         salt=f"search/{ident}/{self.search_kind}/seed{seed}", retry_failed=retry_failed)
        self.cache = SearchCache(self.store)
        if isinstance(search, CachedBackend):
            self.backend = search
        elif isinstance(search, PageBackend):
            self.backend = CachedBackend(search, self.cache, "auto")
        else:
            if search == "web":
                try:
                    import ddgs  # noqa: F401
                except ImportError:
                    raise InputError("--search web needs the 'search' extra: pip install 'envgen[search]'") from None
            self.backend = CachedBackend(self.local if search == "local" else WebBackend(), self.cache, "auto")

    def _index(self, corpus: Any, index: Path | None, work: Path) -> Path:
        if index is not None:
            open_index(index).close()
            return Path(index).resolve()
        if corpus is None:
            raise InputError("the search pipeline needs a corpus (--corpus) or a built index (--index)")
        ident = getattr(corpus, "_fingerprint", None) or repr(corpus)  # a datasets.Dataset's content hash
        key = hashlib.sha256(str(ident).encode()).hexdigest()[:12]
        path = work / "indexes" / f"{key}.sqlite"
        src = Path(str(corpus)) if isinstance(corpus, (str, Path)) and not str(corpus).startswith("hf:") else None
        if not path.is_file() or (src is not None and src.exists() and src.stat().st_mtime > path.stat().st_mtime):
            index_corpus(corpus, path)
        return path

    # -- agents

    def run_agent(self, role: str, stage: str, ordinal: int, tools: list[Callable[..., Any]], message: str, *,
                  suffix: str = "", preferred: str | None = None, max_turns: int | None = None,
                  note: str = "") -> AgentResult:
        """One message to a fresh agent with host-function tools, which the role's spec must list."""
        spec = self.specs[role]
        unknown = sorted({fn.__name__ for fn in tools} - set(spec.tools))
        if unknown:
            raise InputError(f"{spec.path}: header: tools: the pipeline offers {unknown}, which the role does not "
                              f"list; add them to its tools")
        agent = self.agent(role, stage, ordinal, Tools(FunctionTools(tools)) if tools else Tools(), suffix,
                           preferred=preferred, max_turns=max_turns, note=note)
        try:
            return agent.send(message)
        finally:
            self.finish_agent(agent, stage, role + suffix)

    def tally(self) -> dict[str, int]:
        return {"cache_hits": self.backend.hits, "cache_misses": self.backend.misses}

    def add_tally(self, counts: dict[str, int]) -> None:
        with self._usage_lock:
            self.backend.hits += counts.get("cache_hits", 0)
            self.backend.misses += counts.get("cache_misses", 0)

    # -- entities

    def entities(self) -> list[Entity]:
        key = f"entities/n{self.n}"
        st = self.store.stage(self.run_id, key)
        if st is not None and st.status == "done":
            return [Entity(**e) for e in st.result["entities"]]
        ents = mine_entities(self.index, spans="span" in self.cfg.entity_kinds)
        if self.cfg.languages:
            ents = [e for e in ents if (e.lang or "unknown") in self.cfg.languages]
        if self.cfg.domains:
            ents = [e for e in ents if (e.domain or "unknown") in self.cfg.domains]
        picked = sample_entities(ents, self.n, self.seed, min_score=self.cfg.min_score,
                                 kinds=tuple(self.cfg.entity_kinds))
        if not picked:
            raise SearchSynthesisError(f"{self.index}: no entities to sample (min_score {self.cfg.min_score}, kinds "
                                       f"{self.cfg.entity_kinds}, languages {self.cfg.languages}, domains "
                                       f"{self.cfg.domains})")
        self.store.finish_stage(self.run_id, key, {"entities": [e.to_dict() for e in picked],
                                                   "mined": len(ents)})
        return picked

    # -- one entity

    def question(self, i: int, ent: Entity) -> None:
        key = f"q{i:04d}"
        cons = self.cfg.constructors[i % len(self.cfg.constructors)]
        reader = Reader(self.backend)
        box = QuestionBox(reader)
        try:
            page = self.local.open(ent.doc_id)
            start = f"Its page: {page['id']} \"{page['title']}\": {page['text'][:400]}"
        except ValueError:
            start = f"It is mentioned on page {ent.doc_id}."
        msg = (f"Entity: {ent.name} (language: {ent.lang or 'unknown'}, domain: {ent.domain or 'unknown'}, "
               f"long-tail score {ent.score:.2f}).\n{start}\n\nDepth: {cons.depth} hop(s). Breadth: {cons.breadth} "
               f"entit{'y' if cons.breadth == 1 else 'ies'} side by side.\nWrite one question as your instructions "
               "say and submit it with submit_question.")
        res = self.run_agent("search-question-constructor", key, i, [reader.search, reader.open, box.submit_question],
                             msg, suffix=f"-{cons.name}", preferred=cons.llm, max_turns=cons.max_turns)
        base = {"entity": ent.to_dict(), "constructor": cons.name, "depth": cons.depth, "breadth": cons.breadth}
        q = box.result
        if q is None:
            return self._done(key, base, "rejected", f"constructor: no question ({res.outcome})")
        if q["gave_up"]:
            return self._done(key, base, "rejected", "constructor: gave up", {"path": q["path"]})
        base.update(q)
        check = answer_check(q["answer"], q["aliases"])

        answers = []
        for j, a in enumerate(self.cfg.answerers):
            ar = Reader(self.backend)
            tools = [ar.search, ar.open] if a.tools else []
            text = f"{q['question']}\n\n{TOOLS_INSTRUCTION if a.tools else CLOSED_INSTRUCTION}"
            r = self.run_agent("search-answerer", key, i * 16 + j, tools, text, suffix=f"-{a.name}",
                               preferred=a.llm, max_turns=a.max_turns, note=a.note)
            reply = r.answer if r.outcome == "answered" else None
            answers.append({"id": f"A{j + 1}", "agent": a.name, "outcome": r.outcome, "answer": reply,
                            "matches": matches(check, reply)})
        base["candidates"] = answers

        verdicts = []
        listing = "\n".join(f"- {c['id']}: {c['answer'] if c['answer'] is not None else '(no answer)'}"
                            for c in answers)
        for p in range(self.cfg.verify_passes):
            vb = VerdictBox([c["id"] for c in answers])
            vr = Reader(self.backend)
            text = (f"Question:\n{q['question']}\n\nProposed ground truth: {q['answer']}"
                    + (f" (aliases: {', '.join(q['aliases'])})" if q["aliases"] else "")
                    + f"\nAuthor's evidence pages: {', '.join(q['evidence'])}\nAuthor's path: {q['path'] or '-'}"
                    f"\n\nCandidate answers:\n{listing}\n\nThis is verification pass {p + 1} of "
                    f"{self.cfg.verify_passes}: check independently, then submit your verdict.")
            r = self.run_agent("search-verifier", key, i * 16 + p, [vr.search, vr.open, vb.submit_verdict], text,
                               suffix=f"-pass{p + 1}")
            verdicts.append(vb.result or {"supported": False, "unique": False, "correct": {},
                                          "notes": f"no verdict ({r.outcome})"})
        base["verdicts"] = verdicts

        rule = self.cfg.keep
        if rule.require_verified and not all(v["supported"] for v in verdicts):
            return self._done(key, base, "rejected", "verifier: ground truth not supported")
        if rule.require_unique and not all(v["unique"] for v in verdicts):
            return self._done(key, base, "rejected", "verifier: answer not unique")
        correct = [c for c in answers if c["matches"] or any(v["correct"].get(c["id"]) for v in verdicts)]
        base["correct"] = [c["agent"] for c in correct]
        if len(correct) > rule.max_correct:
            return self._done(key, base, "rejected", "answered correctly by " + ", ".join(c["agent"] for c in correct))

        if self.cfg.rubrics:
            rb = RubricBox(q["question"], q["answer"])
            rr = Reader(self.backend)
            wrong = [c["answer"] for c in answers if c["answer"]]
            text = (f"Question:\n{q['question']}\n\nVerified answer: {q['answer']}\nEvidence pages: "
                    f"{', '.join(q['evidence'])}\nPath: {q['path'] or '-'}\nWrong answers given by other agents:\n"
                    + ("\n".join(f"- {w[-300:]}" for w in wrong) or "- (none)") + "\n\nWrite the rubric.")
            r = self.run_agent("search-rubric-writer", key, i, [rr.open, rb.submit_rubric], text)
            if rb.result is None:
                return self._done(key, base, "rejected", f"rubric writer: no rubric ({r.outcome})")
            base["rubric"] = rb.result
        base["task"] = self.task(i, ent, base, check).model_dump(mode="json", exclude_none=True)
        return self._done(key, base, "validated", None)

    def _done(self, key: str, data: dict[str, Any], status: str, reason: str | None,
              extra: dict[str, Any] | None = None) -> None:
        data = {**data, **(extra or {})}
        difficulty = data.get("task", {}).get("difficulty")
        self.store.finish_stage(self.run_id, key, {"status": status, "reason": reason},
                                candidates=[{"key": key, "kind": "question", "status": status, "reason": reason,
                                             "difficulty": difficulty, "data": data}])

    def task(self, i: int, ent: Entity, q: dict[str, Any], check: dict[str, Any]) -> Task:
        calls = []
        if re.search(r"\w", ent.name):
            calls.append({"tool": "search", "args": {"query": ent.name, "limit": 5}})
        calls += [{"tool": "open", "args": {"id_or_url": e}} for e in q["evidence"]]
        prompt = f"{q['question']}\n\n{TOOLS_INSTRUCTION}"
        if self.cfg.rubrics:
            verifier = {"kind": "rubric", "args": {"question": q["question"], "reference_answer": q["answer"],
                                                   "criteria": q["rubric"]["criteria"],
                                                   "pitfalls": q["rubric"]["pitfalls"], "answer": check}}
        else:
            verifier = {"kind": "answer", "args": check}
        return Task(id=f"{self.name}-s{self.seed}-{i:04d}", prompt=[{"role": "user", "content": prompt}],
                    verifier=verifier, reference={"calls": calls, "answer": f"Answer: {q['answer']}"},
                    difficulty=len(calls),
                    meta={"source": "llm", "family": "search", "constructor": q["constructor"], "depth": q["depth"],
                          "breadth": q["breadth"], "language": ent.lang, "domain": ent.domain,
                          "entity": {"name": ent.name, "page": ent.doc_id, "score": ent.score},
                          "candidates": [{"agent": c["agent"], "answer": (c["answer"] or "")[-200:]}
                                         for c in q["candidates"]],
                          "verifier_notes": [v["notes"] for v in q["verdicts"]], "search": self.search_kind})

    # -- the run

    def execute(self) -> BuildReport:
        check_out(self.out)
        started = time.perf_counter()
        self.store.open_run(self.run_id, "synth-search", {
            "index": str(self.index), "questions": self.n, "seed": self.seed, "search": self.search_kind,
            "config": json.loads(self.cfg.model_dump_json()), "models": [c.describe() for c in self.pool.configs]})
        ents = self.entities()
        todo = []
        for i, ent in enumerate(ents):
            st = self.store.stage(self.run_id, f"q{i:04d}")
            if st is not None and st.status == "done":
                self.progress(1)
            else:
                todo.append((i, ent))
        t0 = time.perf_counter()
        if todo:
            self._run_all(todo)
        stages = {"questions": time.perf_counter() - t0}
        return self._assemble(ents, started, stages)

    def _run_all(self, todo: list[tuple[int, Entity]]) -> None:
        self.run_stages([(f"q{i:04d}", (i, ent)) for i, ent in todo], self.question, workers=self.workers,
                        error=SearchSynthesisError, stopped="search pipeline stopped",
                        kept="finished questions, paid LLM calls and search answers", thread_name="envgen-search")

    def _assemble(self, ents: list[Entity], started: float, stages: dict[str, float]) -> BuildReport:
        cands = {c.key: c for c in self.store.candidates(self.run_id)}
        tasks, dropped = [], []
        constructed = verified = 0
        for i in range(len(ents)):
            c = cands.get(f"q{i:04d}")
            if c is None:
                continue
            if "question" in c.data:
                constructed += 1
            if c.data.get("verdicts") and all(v["supported"] for v in c.data["verdicts"]):
                verified += 1
            if c.status == "validated":
                tasks.append(Task.model_validate(c.data["task"]))
            else:
                dropped.append(_reason(c.reason or "unknown"))
        by_reason = count_reasons(dropped)
        build = self.work / "final"
        shutil.rmtree(build, ignore_errors=True)
        (build / "env" / "state").mkdir(parents=True)
        (build / "hidden").mkdir(parents=True)
        shutil.copyfile(bundled("envs") / "search" / "env" / "tools.py", build / "env" / "tools.py")
        t0 = time.perf_counter()
        if self.search_kind == "local":
            shutil.copyfile(self.index, build / "env" / "state" / "corpus.sqlite")
        else:
            pages = self.backend.pages()
            if not pages:
                raise SearchSynthesisError("no web page was opened during the build; nothing to index for the pack")
            build_index((Doc(id=p["id"], title=p.get("title") or p["id"], text=p.get("text") or p["id"],
                             url=p.get("url") if p.get("url") != p["id"] else None,
                             links=[ln["id"] for ln in p.get("links", [])]) for p in _unique_pages(pages)),
                        build / "env" / "state" / "corpus.sqlite")
        stages["index"] = time.perf_counter() - t0
        if not tasks:
            raise SearchSynthesisError(f"no question survived (dropped: {by_reason or 'none built'}); see the "
                                       f"transcripts in {self.transcripts}")
        gen = Generated(name=self.name, description=f"Long-tail search questions built by LLM agents over "
                        f"{'the web (recorded pages)' if self.search_kind == 'web' else 'a local corpus'}, verified "
                        "by a multi-pass verifier agent and kept only when every answer agent failed.",
                        family="search", category="llm", env_dir=build / "env", hidden_dir=build / "hidden",
                        tasks=tasks, limits=PACK_LIMITS, generator=GENERATOR)
        report = build_generated(gen, self.out, seed=self.seed, workers=self.workers, sandbox=self.sandbox,
                                 progress=None, stages=stages, started=started)
        spent = self.store.llm_spend(self.run_id)
        report.details.update(
            entities=len(ents), constructed=constructed, verified=verified,
            dropped_by_reason=by_reason, llm={"session": self.usage.to_dict(), "spent": spent},
            search={"backend": self.search_kind, "cache_hits": self.backend.hits, "cache_misses": self.backend.misses},
            run_id=self.run_id, transcripts=str(self.transcripts))
        out = report
        self.store.finish_run(self.run_id, "done", out.summary())
        return out


def _reason(reason: str) -> str:
    return "answered correctly" if reason.startswith("answered correctly") else reason


def _unique_pages(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for p in pages:
        if p["id"] not in seen:
            seen.add(p["id"])
            out.append(p)
    return out


def synthesize_search(out: str | Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool, corpus: Any = None,
                      index: str | Path | None = None, questions: int = 20, seed: int = 0,
                      search: str | PageBackend = "local",
                      config: SearchSynthConfig | str | Path | None = None, store_url: str | None = None,
                      workers: int = 2, sandbox: str = "local", work_dir: str | Path | None = None,
                      agents_dir: str | Path | None = None, progress: Progress | None = None,
                      name: str | None = None, executor: str = "local", ray_address: str | None = None,
                      lease_s: float = LEASE_S, retry_failed: bool = False) -> BuildReport:
    """Build a search pack with LLM agents from ``questions`` long-tail entities of a corpus, resumably.

    ``corpus`` (anything ``envgen.retrieval.corpus.read_docs`` reads) is indexed once under ``work_dir``; or pass a
    built ``index``. ``search`` is the agents' backend: ``local`` (the index) or ``web`` (ddgs; the pages
    opened are recorded and become the pack's index), or a PageBackend instance (a configured WebBackend).
    ``config`` (a SearchSynthConfig or a YAML/JSON file) names the constructor and answerer
    configurations, verifier passes and the keep rule. State lives in
    ``store_url`` (default ``ENVGEN_STORE``, else ~/.cache/envgen/state.sqlite): rerunning resumes.
    ``progress(1)`` is called once per entity. ``executor="ray"`` runs each entity's agents in a Ray task on
    the cluster at ``ray_address`` (the index at the same path on every node, the state in ``store_url``,
    which every node must reach); the pack is the one a local build writes. ``retry_failed``: stages that
    failed before ask the model afresh instead of replaying their cached calls.
    """
    if isinstance(config, (str, Path)):
        config = load_search_config(config)
    kwargs = dict(out=Path(out), llm=llm, corpus=corpus, index=Path(index) if index is not None else None,
                  questions=questions, seed=seed, search=search, config=config or SearchSynthConfig(),
                  store_url=store_url, workers=workers, sandbox=sandbox,
                  work_dir=Path(work_dir) if work_dir is not None else None,
                  agents_dir=Path(agents_dir) if agents_dir is not None else None, progress=progress, name=name,
                  retry_failed=retry_failed)
    synth = _SearchSynth(**kwargs)
    if check_executor(executor) == "ray":  # one Ray task per entity; the index is read where the task runs
        if not isinstance(search, str):
            raise InputError("a search build on Ray takes search='local' or 'web' (each task builds its own "
                             f"backend), not {type(search).__name__}")
        synth.on_ray(_SearchSynth, {**kwargs, "corpus": None, "index": synth.index, "store_url": synth.store.url,
                                    "work_dir": synth.work.parent}, address=ray_address, lease_s=lease_s)
    return synth.run()
