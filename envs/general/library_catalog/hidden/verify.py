"""Verifier of the library-desk tasks (the pack's hidden/verify.py; stdlib only, Python 3.8+).

It reads the database the episode left behind and checks the request was carried out: the right loans
renewed once, exactly one new loan of the right book at the right branch for the right member, late
books checked in, fines settled, and a final ``submit_result`` naming the member and exactly the loans
created or renewed. Lookup tasks need an answer naming the right book that appeared in a tool result of
the episode. That nothing else changed (other members' loans and fines, extra loans, new tables) is the
kit's whole-database check, declared in the task's verifier args as ``changes``: it compares every row
with the pristine database plus the reference's change set, and overrides this function's score.
"""

import datetime
import re
import sqlite3

TODAY = "2025-03-14"
LOAN_DUE = "2025-04-04"  # TODAY + 21 days, the loan period


def verify(answer, calls, params, ctx):
    con = ctx.db("state/library.db")
    con.row_factory = sqlite3.Row
    try:
        kind = params["kind"]
        if kind == "newest":
            return _newest(con, answer, calls, params)
        sub = [c for c in calls if c.get("tool") == "submit_result" and c.get("ok")]
        if not sub:
            return 0.0, {"reason": "no accepted submit_result call"}
        args = sub[-1].get("args") or {}
        if args.get("member_id") != params["member"]:
            return 0.0, {"reason": f"submitted member {args.get('member_id')!r}, the request was for {params['member']}"}
        submitted = args.get("loan_ids")
        if not isinstance(submitted, list):
            return 0.0, {"reason": "loan_ids is not a list"}
        return (_renew if kind == "renew" else _borrow)(con, params, submitted)
    finally:
        con.close()


def _newest(con, answer, calls, p):
    rows = con.execute("SELECT id, year FROM books WHERE author = ?", (p["author"],)).fetchall()
    top = max(r["year"] for r in rows)
    newest = {r["id"] for r in rows if r["year"] == top}
    named = _book_ids(answer or "")
    if len(named) != 1:
        return 0.0, {"reason": f"the answer names {len(named)} book ids; the request asks for one"}
    book = named.pop()
    if book not in newest:
        return 0.0, {"reason": f"{book} is not {p['author']}'s newest book", "expected_any_of": sorted(newest)}
    if not any(c.get("ok") and book in str(c.get("content", "")) for c in calls):
        return 0.0, {"reason": f"{book} never appeared in a tool result: the answer is not grounded"}
    return 1.0, {"book": book}


def _book_ids(text):
    """Book ids however written: NFKC (full-width forms), any dash or minus sign, any case, so
    "BK-0042 (or bk\u20110043)" names two books."""
    import unicodedata

    text = unicodedata.normalize("NFKC", text).translate(
        dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\ufe58\ufe63\uff0d"), "-"))
    return {"BK-" + d for d in re.findall(r"(?<![A-Z0-9])BK\s?-\s?(\d{4})(?!\d)", text.upper())}


def _renew(con, p, submitted):
    if con.execute("SELECT count(*) FROM loans").fetchone()[0] != p["loans_total"]:
        return 0.0, {"reason": "a new loan was created; the request was only to renew"}
    for loan_id in p["renew"]:
        before = p["loans_before"][loan_id]
        row = con.execute("SELECT due, renewals, returned_on FROM loans WHERE id = ?", (loan_id,)).fetchone()
        want = (datetime.date.fromisoformat(before["due"]) + datetime.timedelta(days=14)).isoformat()
        if (row["due"], row["renewals"], row["returned_on"]) != (want, before["renewals"] + 1, None):
            return 0.0, {"reason": f"loan {loan_id} was not renewed exactly once (due {row['due']}, "
                                   f"renewals {row['renewals']})"}
    if sorted(submitted) != sorted(p["renew"]):
        return 0.0, {"reason": f"submitted loans {sorted(submitted)}, renewed {sorted(p['renew'])}"}
    return 1.0, {"renewed": sorted(p["renew"])}


def _borrow(con, p, submitted):
    new = con.execute("SELECT l.*, c.book_id, c.status, b.name AS branch FROM loans l JOIN copies c ON "
                      "c.id = l.copy_id JOIN branches b ON b.id = c.branch_id WHERE l.id NOT IN "
                      "(SELECT id FROM loans ORDER BY id LIMIT ?)", (p["loans_total"],)).fetchall()
    if len(new) != 1:
        return 0.0, {"reason": f"{len(new)} new loans; the request needed exactly one"}
    loan = new[0]
    if loan["member_id"] != p["member"] or loan["book_id"] != p["book"] or loan["branch"] != p["branch"]:
        return 0.0, {"reason": f"the new loan is {loan['book_id']} at {loan['branch']} for {loan['member_id']}; "
                               f"the request was {p['book']} at {p['branch']} for {p['member']}"}
    if loan["returned_on"] is not None or loan["status"] != "on loan":
        return 0.0, {"reason": "the new loan is not active"}
    if loan["renewals"] != 0 or loan["due"] != LOAN_DUE:
        return 0.0, {"reason": f"the new loan was altered (due {loan['due']}, renewals {loan['renewals']})"}
    for copy_id in p.get("returns", []):
        row = con.execute("SELECT returned_on FROM loans WHERE copy_id = ? AND member_id = ? ORDER BY id LIMIT 1",
                          (copy_id, p["member"])).fetchone()
        if row is None or row["returned_on"] != TODAY:
            return 0.0, {"reason": f"copy {copy_id} was not checked in"}
    fines = con.execute("SELECT fines FROM members WHERE id = ?", (p["member"],)).fetchone()[0]
    if fines != 0:
        return 0.0, {"reason": f"the member still owes {fines} EUR"}
    if submitted != [loan["id"]]:
        return 0.0, {"reason": f"submitted loans {submitted}, created {loan['id']}"}
    return 1.0, {"loan": loan["id"]}
