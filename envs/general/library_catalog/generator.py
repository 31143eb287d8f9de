"""Library desk: serve members of a seeded city library network (search, lend, return, renew, fines).

Runs on the host. A second, smaller category of the general family, and the proof that a category is
a folder: the engine (envgen.build.offline, envgen.build.sdk) knows nothing about it. Unlike travel planning its
tools change state, and its verifier judges the whole database the episode leaves behind: it must equal
the pristine one with the reference replayed (the build records that change set), so every task is
drawn to have exactly one right end state (e.g. one available copy of the book at the branch). Levels:

    1   the newest book by an author, answered in text (one search)
    2   renew one named loan
    3   renew every loan due within a week (get the account, renew each)
    4   lend a book at a branch (search, find a copy there, check it out)
    5   the same for a member who must first pay their fines
    6   the same for a member returning an overdue book first (the return adds a fine to pay)
"""

from __future__ import annotations

import datetime
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from sqlalchemy import ForeignKey, Integer, String, create_engine, insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from envgen.build.sdk import (
    Generated,
    ReferenceFailed,
    ToolRecorder,
    create_schema,
    db_changes,
    fresh_workdir,
    load_module,
)
from envgen.pack import Limits, Task

HERE = Path(__file__).resolve().parent
FAMILY, CATEGORY = "general", "library-catalog"
VERSION = 2
DB = "state/library.db"
DEFAULT_TASKS = 120
LEVELS = (1, 2, 3, 4, 5, 6)
MAX_ATTEMPTS = 80
TODAY = datetime.date(2025, 3, 14)
WEEK = (TODAY + datetime.timedelta(days=7)).isoformat()

BRANCHES = ["Central", "Northside", "Riverside", "Old Town", "University"]
GENRES = ["mystery", "science fiction", "fantasy", "history", "biography", "science", "poetry", "travel",
          "cooking", "children"]
FIRST = ["Anna", "Ben", "Clara", "David", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Katja", "Luis",
         "Maya", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tess", "Ugo", "Vera", "Wim", "Yara"]
LAST = ["Almeida", "Berg", "Castell", "Dumont", "Eklund", "Ferrari", "Gruber", "Horvath", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Novak", "Ortega", "Petrov", "Quast", "Rossi", "Schmidt", "Tanaka",
        "Urban", "Varga", "Weber", "Zeller"]
ADJ = ["Silent", "Hidden", "Last", "Crimson", "Endless", "Forgotten", "Golden", "Broken", "Northern", "Quiet",
       "Burning", "Distant", "Secret", "Winter", "Paper", "Glass", "Iron", "Wandering", "Lost", "Bright"]
NOUN = ["Garden", "River", "Station", "Orchard", "Harbour", "Library", "Mountain", "Letter", "Bridge", "Island",
        "Lantern", "Archive", "Forest", "Compass", "Tide", "Clockmaker", "Atlas", "Observatory", "Kitchen", "Map"]


class Base(DeclarativeBase):
    pass


class Branch(Base):
    __tablename__ = "branches"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(30), unique=True)


class Book(Base):
    __tablename__ = "books"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    title: Mapped[str] = mapped_column(String(80))
    author: Mapped[str] = mapped_column(String(40), index=True)
    year: Mapped[int] = mapped_column(Integer)
    genre: Mapped[str] = mapped_column(String(20))
    pages: Mapped[int] = mapped_column(Integer)


class Copy(Base):
    __tablename__ = "copies"
    id: Mapped[str] = mapped_column(String(9), primary_key=True)
    book_id: Mapped[str] = mapped_column(ForeignKey("books.id"), index=True)
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id"))
    status: Mapped[str] = mapped_column(String(12))


class Member(Base):
    __tablename__ = "members"
    id: Mapped[str] = mapped_column(String(7), primary_key=True)
    name: Mapped[str] = mapped_column(String(40))
    tier: Mapped[str] = mapped_column(String(10))
    fines: Mapped[int] = mapped_column(Integer)


class Loan(Base):
    __tablename__ = "loans"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    member_id: Mapped[str] = mapped_column(ForeignKey("members.id"), index=True)
    copy_id: Mapped[str] = mapped_column(ForeignKey("copies.id"), index=True)
    loaned_on: Mapped[str] = mapped_column(String(10))
    due: Mapped[str] = mapped_column(String(10))
    renewals: Mapped[int] = mapped_column(Integer)
    returned_on: Mapped[str | None] = mapped_column(String(10), nullable=True)


def build_db(path: Path, seed: int) -> dict[str, int]:
    """Write the library for ``seed`` to ``path``; return row counts per table."""
    rng = random.Random(f"library-db:{seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    authors = rng.sample([f"{f} {l}" for f in FIRST for l in LAST], 110)
    titles = rng.sample([f"The {a} {n}" for a in ADJ for n in NOUN] + [f"{n} of the {a} {m}" for a in ADJ[:8]
                        for n in NOUN[:10] for m in NOUN[10:]], 520)
    books, copies, members, loans = [], [], [], []
    for i, title in enumerate(titles, 1):
        books.append(dict(id=f"BK-{i:04d}", title=title, author=rng.choice(authors), year=rng.randint(1955, 2024),
                          genre=rng.choice(GENRES), pages=rng.randint(90, 720)))
    for b in books:
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
            copies.append(dict(id=f"CP-{len(copies) + 1:05d}", book_id=b["id"], branch_id=rng.randint(1, len(BRANCHES)),
                               status=rng.choices(["available", "in repair"], [95, 5])[0]))
    for i in range(1, 301):
        members.append(dict(id=f"M-{i:04d}", name=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                            tier=rng.choices(["standard", "premium"], [75, 25])[0],
                            fines=rng.randint(1, 12) if rng.random() < 0.15 else 0))
    lendable = [c for c in copies if c["status"] == "available"]
    rng.shuffle(lendable)
    active = {m["id"]: 0 for m in members}
    for c in lendable[:520]:
        m = rng.choice(members)
        if active[m["id"]] >= (3 if m["tier"] == "standard" else 6):
            continue
        active[m["id"]] += 1
        renewals = rng.choice([0, 0, 1, 2])
        loaned = TODAY - datetime.timedelta(days=rng.randint(1, 20 + 14 * renewals + 6))
        due = loaned + datetime.timedelta(days=21 + 14 * renewals)
        loans.append(dict(id=f"LN-{len(loans) + 1:04d}", member_id=m["id"], copy_id=c["id"],
                          loaned_on=loaned.isoformat(), due=due.isoformat(), renewals=renewals, returned_on=None))
        c["status"] = "on loan"
    engine = create_engine(f"sqlite:///{path}")
    create_schema(Base.metadata, engine)
    with Session(engine) as s:
        s.execute(insert(Branch), [dict(id=i, name=n) for i, n in enumerate(BRANCHES, 1)])
        for model, data in ((Book, books), (Copy, copies), (Member, members), (Loan, loans)):
            s.execute(insert(model), data)
        s.commit()
    engine.dispose()
    con = sqlite3.connect(path)
    con.execute("VACUUM")
    con.close()
    return {"branches": len(BRANCHES), "books": len(books), "copies": len(copies), "members": len(members),
            "loans": len(loans)}


class Infeasible(Exception):
    """This draw has no valid task: draw again."""


class Library:
    """Read-only view of the pristine database for the templates (what a desk clerk's records say)."""

    def __init__(self, db: Path):
        self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        self.con.row_factory = sqlite3.Row
        q = lambda sql, *a: self.con.execute(sql, a).fetchall()
        self.q = q
        self.members = q("SELECT * FROM members ORDER BY id")
        self.loans_total = q("SELECT count(*) FROM loans")[0][0]

    def loans(self, member: str) -> list:
        return self.q("SELECT l.*, c.book_id, b.title FROM loans l JOIN copies c ON c.id = l.copy_id JOIN books b "
                      "ON b.id = c.book_id WHERE l.member_id = ? AND l.returned_on IS NULL ORDER BY l.id", member)

    def base(self, member: dict) -> dict:
        """Verifier params every state task shares: the member and their loans, before."""
        return {"member": member["id"], "loans_total": self.loans_total,
                "loans_before": {l["id"]: {"copy_id": l["copy_id"], "due": l["due"], "renewals": l["renewals"]}
                                 for l in self.loans(member["id"])}}

    def lendable(self, rng: random.Random) -> tuple[dict, str]:
        """A book with exactly one available copy at some branch (so one end state is right), whose title
        finds it in the first page of results."""
        rows = self.q("SELECT c.book_id, br.name AS branch FROM copies c JOIN branches br ON br.id = c.branch_id "
                      "WHERE c.status = 'available' AND (SELECT count(*) FROM copies o WHERE o.book_id = c.book_id "
                      "AND o.branch_id = c.branch_id AND o.status = 'available') = 1 ORDER BY c.id")
        row = rng.choice(rows)
        book = self.q("SELECT * FROM books WHERE id = ?", row["book_id"])[0]
        same = self.q("SELECT count(*) FROM books WHERE instr(lower(title), lower(?)) > 0", book["title"])[0][0]
        if same > 5:
            raise Infeasible("title too ambiguous")
        return dict(book), row["branch"]


def _overdue(due: str) -> bool:
    return datetime.date.fromisoformat(due) < TODAY


def _limit(m) -> int:
    return 3 if m["tier"] == "standard" else 6


def level1(lib: Library, rng: random.Random) -> tuple[dict, str]:
    author = rng.choice(lib.q("SELECT author FROM books GROUP BY author HAVING count(*) >= 2 ORDER BY author"))[0]
    years = [r[0] for r in lib.q("SELECT year FROM books WHERE author = ? ORDER BY year DESC", author)]
    if years[0] == years[1]:
        raise Infeasible("tie")
    ask = rng.choice([f"What is the most recent book by {author} in the catalogue? Please give me its book id.",
                      f"I'd like the newest title {author} has in the library. What is its book id?"])
    return {"kind": "newest", "author": author}, ask


def _who(m) -> str:
    return f"{m['name']} (member {m['id']})"


def level2(lib: Library, rng: random.Random) -> tuple[dict, str]:
    m = rng.choice(lib.members)
    loans = [l for l in lib.loans(m["id"]) if not _overdue(l["due"]) and l["renewals"] < 2]
    if not loans:
        raise Infeasible("nothing renewable")
    loan = rng.choice(loans)
    spec = {"kind": "renew", "scope": "named", "renew": [loan["id"]], **lib.base(m)}
    return spec, (f"Hello, this is {_who(m)}. Could you renew my loan {loan['id']} of \"{loan['title']}\"? "
                  f"Please confirm once it is done.")


def level3(lib: Library, rng: random.Random) -> tuple[dict, str]:
    m = rng.choice(lib.members)
    loans = lib.loans(m["id"])
    soon = [l for l in loans if not _overdue(l["due"]) and l["due"] <= WEEK]
    if not 1 <= len(soon) <= 2 or any(l["renewals"] >= 2 for l in soon) or len(loans) == len(soon):
        raise Infeasible("no clean due-soon set")
    spec = {"kind": "renew", "scope": "due_soon", "renew": [l["id"] for l in soon], **lib.base(m)}
    return spec, (f"Hi, I'm {_who(m)}. Please renew every loan of mine that is due within the next week "
                  f"(on or before {WEEK}) and leave my other loans as they are.")


def _borrow(lib: Library, rng: random.Random, fines: bool, overdue: bool) -> tuple[dict, str]:
    m = rng.choice(lib.members)
    loans = lib.loans(m["id"])
    late = [l for l in loans if _overdue(l["due"])]
    if (m["fines"] > 0) != fines or len(late) != (1 if overdue else 0) or len(loans) >= _limit(m):
        raise Infeasible("member does not fit")
    book, branch = lib.lendable(rng)
    spec = {"kind": "borrow", "book": book["id"], "title": book["title"], "author": book["author"], "branch": branch,
            "returns": [l["copy_id"] for l in late], "return_title": late[0]["title"] if late else None,
            "pay": fines or overdue, **lib.base(m)}
    want = f"\"{book['title']}\" by {book['author']}"
    if overdue:
        text = (f"{_who(m)} is at the desk returning \"{late[0]['title']}\", which is overdue. Please check it in; "
                f"they will pay whatever fines they owe, and then they would like to borrow {want}, picking it up "
                f"at the {branch} branch.")
    elif fines:
        text = (f"{_who(m)} wants to borrow {want} from the {branch} branch. They have agreed to pay any "
                f"outstanding fines today so that the loan can go through.")
    else:
        text = f"Please lend {want} to {_who(m)}; they will collect it at the {branch} branch."
    return spec, text + " When you are done, submit the result."


def level4(lib, rng):
    return _borrow(lib, rng, fines=False, overdue=False)


def level5(lib, rng):
    return _borrow(lib, rng, fines=True, overdue=False)


def level6(lib, rng):
    return _borrow(lib, rng, fines=rng.random() < 0.5, overdue=True)


TEMPLATES = {1: level1, 2: level2, 3: level3, 4: level4, 5: level5, 6: level6}


def solve(spec: dict, tb: ToolRecorder) -> str:
    """The reference: tool calls only, as a careful clerk would make them; returns the final answer."""
    if spec["kind"] == "newest":
        res = [r for r in tb.search_books(author=spec["author"])["results"] if r["author"] == spec["author"]]
        top = max(res, key=lambda r: r["year"])
        return f"The newest is \"{top['title']}\" ({top['year']}), book id {top['id']}."
    member = spec["member"]
    if spec["kind"] == "renew":
        ids = spec["renew"] if spec["scope"] == "named" else [
            l["loan_id"] for l in tb.get_member(member_id=member)["loans"] if not l["overdue"] and l["due"] <= WEEK]
        renewed = [tb.renew_loan(loan_id=i)["loan_id"] for i in ids]
        tb.submit_result(member_id=member, loan_ids=renewed)
        return f"Renewed {', '.join(renewed)}; the new due dates are on the account."
    owed = 0
    if spec["returns"]:
        for loan in tb.get_member(member_id=member)["loans"]:
            if loan["overdue"] and loan["title"] == spec["return_title"]:
                owed = tb.return_copy(copy_id=loan["copy_id"])["member_fines"]
    elif spec["pay"]:
        owed = tb.get_member(member_id=member)["fines"]
    if owed:
        tb.pay_fines(member_id=member, amount=owed)
    found = tb.search_books(title=spec["title"])["results"]
    book = next(r for r in found if r["title"] == spec["title"] and r["author"] == spec["author"])
    copy = next(c for c in tb.get_book(book_id=book["id"])["copies"]
                if c["branch"] == spec["branch"] and c["status"] == "available")
    loan = tb.checkout_copy(member_id=member, copy_id=copy["copy_id"])
    tb.submit_result(member_id=member, loan_ids=[loan["loan_id"]])
    paid = f"Paid {owed} EUR of fines; " if owed else ""
    return f"{paid}lent copy {copy['copy_id']} as loan {loan['loan_id']}, due {loan['due']}."


def generate(workdir: Path, n_tasks: int, seed: int) -> Generated:
    """Build the library and ``n_tasks`` desk requests for ``seed`` (task i depends on seed and i only)."""
    env, hidden = fresh_workdir(workdir, HERE)
    t0 = time.perf_counter()
    db = env / DB
    build_db(db, seed)
    t_db = time.perf_counter() - t0
    changes = db_changes(DB)

    tools = load_module(HERE / "env" / "tools.py", "envgen_categories.general.library_catalog_tools")
    lib = Library(db)
    scratch = Path(tempfile.mkdtemp(prefix="envgen-library-ref-"))
    tasks = []
    try:
        for i in range(n_tasks):
            level = LEVELS[i % len(LEVELS)]
            for attempt in range(MAX_ATTEMPTS):
                rng = random.Random(f"library-task:{seed}:{i}:{attempt}")
                try:
                    spec, text = TEMPLATES[level](lib, rng)
                    shutil.copyfile(db, scratch / "library.db")
                    tb = ToolRecorder(tools, db=scratch / "library.db")
                    answer = solve(spec, tb)
                except (Infeasible, ReferenceFailed, StopIteration):
                    continue
                break
            else:
                raise RuntimeError(f"library-catalog: level {level} found no feasible task in {MAX_ATTEMPTS} draws")
            tasks.append(Task(
                id=f"library-s{seed}-{i:04d}", prompt=[{"role": "user", "content": text}],
                verifier={"kind": "program", "args": {"file": "verify.py", "function": "verify", "params": spec,
                                                      "changes": dict(changes)}},
                reference={"calls": [c.model_dump() for c in tb.calls], "answer": answer},
                difficulty=len(tb.calls),
                meta={"source": "procedural", "family": FAMILY, "category": CATEGORY, "level": level,
                      "template": TEMPLATES[level].__name__, "seed": seed}))
    finally:
        lib.con.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return Generated(
        name="general-library-catalog",
        description="Serve members at a city library's desk: find books, lend, return and renew them, settle fines.",
        family=FAMILY, category=CATEGORY, env_dir=env, hidden_dir=hidden, tasks=tasks, submit_tool="submit_result",
        limits=Limits(max_turns=30, step_timeout_s=10.0), generator=f"envs/general/library_catalog v{VERSION}",
        timings={"db": t_db, "tasks": time.perf_counter() - t0 - t_db})
