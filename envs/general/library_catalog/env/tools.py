"""Library-desk tools: search the catalogue of a city library network, look up members, and lend,
return and renew books under the library's rules.

Runs inside the sandbox (stdlib only, Python 3.8+) with the episode's work dir as the current
directory. Unlike the travel tools these change state: the verifier reads the database afterwards.

Rules: today is 2025-03-14. A loan lasts 21 days; a renewal adds 14 days to the due date, at most
twice, and only before the loan is overdue. A member may borrow only with no unpaid fines, no overdue
loans, and fewer active loans than their limit (standard 3, premium 6). Returning a book late adds a
fine of 1 EUR per day late, at most 20 EUR.
"""

import datetime
import sqlite3
from contextlib import closing
from typing import List, Optional

DB = "state/library.db"  # the database the tools use, relative to the work dir; ToolRecorder(tools, db=...) points it elsewhere
TODAY = datetime.date(2025, 3, 14)
LOAN_DAYS, RENEW_DAYS, MAX_RENEWALS, MAX_FINE = 21, 14, 2, 20
LIMITS = {"standard": 3, "premium": 6}


def _connect() -> sqlite3.Connection:
    con = sqlite3.connect(DB)
    con.row_factory = sqlite3.Row
    con.execute("PRAGMA synchronous = OFF")  # the work dir is a per-episode scratch copy
    return con


def _get(con: sqlite3.Connection, table: str, key: str, value, what: str) -> sqlite3.Row:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} id must be a non-empty string")
    row = con.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value.strip(),)).fetchone()
    if row is None:
        raise ValueError(f"no {what} with id {value!r}")
    return row


def _branches(con: sqlite3.Connection) -> dict:
    return dict(con.execute("SELECT id, name FROM branches").fetchall())


def _active_loans(con: sqlite3.Connection, member_id: str) -> list:
    return con.execute("SELECT l.*, c.book_id, b.title FROM loans l JOIN copies c ON c.id = l.copy_id "
                       "JOIN books b ON b.id = c.book_id WHERE l.member_id = ? AND l.returned_on IS NULL "
                       "ORDER BY l.id", (member_id,)).fetchall()


def _overdue(due: str) -> bool:
    return datetime.date.fromisoformat(due) < TODAY


def search_books(title: Optional[str] = None, author: Optional[str] = None, genre: Optional[str] = None,
                 limit: int = 10) -> dict:
    """Search the catalogue (case-insensitive substring match). Each result shows how many copies are
    available to borrow at each branch.

    Args:
        title: part of the title
        author: part of the author's name
        genre: exact genre, e.g. "mystery", "history", "science fiction"
        limit: how many results to return (1-50)
    """
    if title is None and author is None and genre is None:
        raise ValueError("give at least one of title, author or genre")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
        raise ValueError("limit must be a whole number from 1 to 50")
    sql, params = "SELECT * FROM books WHERE 1 = 1", []
    for column, value in (("title", title), ("author", author)):
        if value is not None:
            sql, params = sql + f" AND instr(lower({column}), lower(?)) > 0", params + [str(value).strip()]
    with closing(_connect()) as con:
        if genre is not None:
            genres = [g[0] for g in con.execute("SELECT DISTINCT genre FROM books ORDER BY 1")]
            if str(genre).strip().lower() not in genres:
                raise ValueError(f"unknown genre {genre!r}; genres: {', '.join(genres)}")
            sql, params = sql + " AND genre = ?", params + [str(genre).strip().lower()]
        rows = con.execute(sql + " ORDER BY title, id", params).fetchall()
        names = _branches(con)
        out = []
        for r in rows[:limit]:
            avail = {}
            for branch, n in con.execute("SELECT branch_id, count(*) FROM copies WHERE book_id = ? AND "
                                         "status = 'available' GROUP BY branch_id ORDER BY branch_id", (r["id"],)):
                avail[names[branch]] = n
            out.append({"id": r["id"], "title": r["title"], "author": r["author"], "year": r["year"],
                        "genre": r["genre"], "available": avail})
    return {"matches": len(rows), "results": out}


def get_book(book_id: str) -> dict:
    """One book with every copy: its copy id, branch, status (available, on loan, in repair) and, for
    copies on loan, the due date.

    Args:
        book_id: the book's id, e.g. "BK-0042"
    """
    with closing(_connect()) as con:
        b = dict(_get(con, "books", "id", book_id, "book"))
        names = _branches(con)
        copies = con.execute("SELECT c.id, c.branch_id, c.status, l.due FROM copies c LEFT JOIN loans l ON "
                             "l.copy_id = c.id AND l.returned_on IS NULL WHERE c.book_id = ? ORDER BY c.id",
                             (b["id"],)).fetchall()
    b["copies"] = [{"copy_id": c["id"], "branch": names[c["branch_id"]], "status": c["status"],
                    **({"due": c["due"]} if c["due"] else {})} for c in copies]
    return b


def get_member(member_id: str) -> dict:
    """A member's account: tier and loan limit, unpaid fines, and active loans with due dates, renewals
    used and whether each is overdue.

    Args:
        member_id: the member's id, e.g. "M-0107"
    """
    with closing(_connect()) as con:
        m = _get(con, "members", "id", member_id, "member")
        loans = _active_loans(con, m["id"])
    return {"id": m["id"], "name": m["name"], "tier": m["tier"], "loan_limit": LIMITS[m["tier"]],
            "fines": m["fines"], "today": TODAY.isoformat(),
            "loans": [{"loan_id": l["id"], "copy_id": l["copy_id"], "book_id": l["book_id"], "title": l["title"],
                       "due": l["due"], "renewals": l["renewals"], "overdue": _overdue(l["due"])} for l in loans]}


def checkout_copy(member_id: str, copy_id: str) -> dict:
    """Lend an available copy to a member for 21 days. Refused when the member has unpaid fines or an
    overdue loan, or is at their loan limit.

    Args:
        member_id: the member's id, e.g. "M-0107"
        copy_id: the copy's id, e.g. "CP-01234" (get_book lists a book's copies)
    """
    with closing(_connect()) as con:
        m = _get(con, "members", "id", member_id, "member")
        c = _get(con, "copies", "id", copy_id, "copy")
        if c["status"] != "available":
            raise ValueError(f"copy {c['id']} is not available (status: {c['status']})")
        if m["fines"] > 0:
            raise ValueError(f"member {m['id']} has {m['fines']} EUR of unpaid fines; pay them first")
        loans = _active_loans(con, m["id"])
        late = [l["id"] for l in loans if _overdue(l["due"])]
        if late:
            raise ValueError(f"member {m['id']} has overdue loans {late}; return them first")
        if len(loans) >= LIMITS[m["tier"]]:
            raise ValueError(f"member {m['id']} is at the {m['tier']} limit of {LIMITS[m['tier']]} loans")
        n = con.execute("SELECT coalesce(max(CAST(substr(id, 4) AS INTEGER)), 0) FROM loans").fetchone()[0]
        loan_id = f"LN-{n + 1:04d}"
        due = (TODAY + datetime.timedelta(days=LOAN_DAYS)).isoformat()
        con.execute("INSERT INTO loans (id, member_id, copy_id, loaned_on, due, renewals, returned_on) "
                    "VALUES (?, ?, ?, ?, ?, 0, NULL)", (loan_id, m["id"], c["id"], TODAY.isoformat(), due))
        con.execute("UPDATE copies SET status = 'on loan' WHERE id = ?", (c["id"],))
        con.commit()
    return {"loan_id": loan_id, "member_id": m["id"], "copy_id": c["id"], "due": due}


def cancel_checkout(loan_id: str) -> dict:
    """Undo a checkout made today by mistake, before the member leaves the desk: the loan is deleted and
    the copy is available again. Only for a loan lent today, never renewed and not returned.

    Args:
        loan_id: the id checkout_copy returned, e.g. "LN-0521"
    """
    with closing(_connect()) as con:
        loan = _get(con, "loans", "id", loan_id, "loan")
        if loan["loaned_on"] != TODAY.isoformat() or loan["renewals"] or loan["returned_on"] is not None:
            raise ValueError(f"loan {loan['id']} was not lent today or has been renewed or returned; only a "
                             "checkout made today can be cancelled")
        con.execute("DELETE FROM loans WHERE id = ?", (loan["id"],))
        con.execute("UPDATE copies SET status = 'available' WHERE id = ?", (loan["copy_id"],))
        con.commit()
    return {"cancelled": loan["id"], "copy_id": loan["copy_id"]}


def return_copy(copy_id: str) -> dict:
    """Check a borrowed copy back in. A late return adds a fine of 1 EUR per day late (at most 20 EUR)
    to the borrower's account.

    Args:
        copy_id: the copy's id, e.g. "CP-01234"
    """
    with closing(_connect()) as con:
        c = _get(con, "copies", "id", copy_id, "copy")
        loan = con.execute("SELECT * FROM loans WHERE copy_id = ? AND returned_on IS NULL", (c["id"],)).fetchone()
        if loan is None:
            raise ValueError(f"copy {c['id']} is not on loan")
        late = (TODAY - datetime.date.fromisoformat(loan["due"])).days
        fine = min(MAX_FINE, max(0, late))
        con.execute("UPDATE loans SET returned_on = ? WHERE id = ?", (TODAY.isoformat(), loan["id"]))
        con.execute("UPDATE copies SET status = 'available' WHERE id = ?", (c["id"],))
        if fine:
            con.execute("UPDATE members SET fines = fines + ? WHERE id = ?", (fine, loan["member_id"]))
        con.commit()
        fines = con.execute("SELECT fines FROM members WHERE id = ?", (loan["member_id"],)).fetchone()[0]
    return {"loan_id": loan["id"], "member_id": loan["member_id"], "days_late": max(0, late), "fine_added": fine,
            "member_fines": fines}


def renew_loan(loan_id: str) -> dict:
    """Extend an active loan by 14 days (at most two renewals, and not once it is overdue).

    Args:
        loan_id: the loan's id, e.g. "LN-0311" (get_member lists a member's loans)
    """
    with closing(_connect()) as con:
        loan = _get(con, "loans", "id", loan_id, "loan")
        if loan["returned_on"] is not None:
            raise ValueError(f"loan {loan['id']} was returned on {loan['returned_on']}")
        if _overdue(loan["due"]):
            raise ValueError(f"loan {loan['id']} is overdue (due {loan['due']}) and cannot be renewed")
        if loan["renewals"] >= MAX_RENEWALS:
            raise ValueError(f"loan {loan['id']} has already been renewed {MAX_RENEWALS} times")
        due = (datetime.date.fromisoformat(loan["due"]) + datetime.timedelta(days=RENEW_DAYS)).isoformat()
        con.execute("UPDATE loans SET due = ?, renewals = renewals + 1 WHERE id = ?", (due, loan["id"]))
        con.commit()
    return {"loan_id": loan["id"], "due": due, "renewals": loan["renewals"] + 1}


def pay_fines(member_id: str, amount: int) -> dict:
    """Take a payment towards a member's unpaid fines.

    Args:
        member_id: the member's id, e.g. "M-0107"
        amount: EUR to pay, from 1 up to the unpaid total
    """
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        raise ValueError("amount must be a whole number of EUR, at least 1")
    with closing(_connect()) as con:
        m = _get(con, "members", "id", member_id, "member")
        if amount > m["fines"]:
            raise ValueError(f"member {m['id']} owes {m['fines']} EUR; cannot pay {amount}")
        con.execute("UPDATE members SET fines = fines - ? WHERE id = ?", (amount, m["id"]))
        con.commit()
    return {"member_id": m["id"], "paid": amount, "fines": m["fines"] - amount}


def submit_result(member_id: str, loan_ids: List[str]) -> dict:
    """Finish the request: report the member served and the loans you created or renewed for them.

    Args:
        member_id: the member's id
        loan_ids: ids of the loans created or renewed in this request (empty if none)
    """
    if not isinstance(loan_ids, list) or not all(isinstance(i, str) for i in loan_ids):
        raise ValueError("loan_ids must be a list of loan id strings")
    with closing(_connect()) as con:
        m = _get(con, "members", "id", member_id, "member")
        for loan_id in loan_ids:
            loan = _get(con, "loans", "id", loan_id, "loan")
            if loan["member_id"] != m["id"]:
                raise ValueError(f"loan {loan_id} belongs to another member")
    return {"status": "recorded", "member_id": m["id"], "loans": len(loan_ids)}
