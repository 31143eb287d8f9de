"""Customer service: an online shop's desk (orders, cancellations, address changes, returns, exchanges) under a written policy, with a scripted customer.

Runs on the host. A tau-bench-retail-style category of the general family, and the one that uses every
part of the pack format made for conversational domains:

- the shop's policy (``policy.md``) is the pack's ``instructions``, stored once;
- every task has a simulated customer (``Task.user``) who opens with a vague request and tells their email,
  zip code, order number, the item and the rest only when asked; the reference plays the conversation
  (``reference.messages``);
- the tools take typed arguments (enums, a list of ids, a nested address object: ``env/tools.py``);
- every verifier is a ``composite``: the end database (``state`` in replay mode, or ``no_write`` where the
  right outcome is to change nothing), what the agent told the customer (``said``, with ``evidence``), and
  the procedure (the kit's ``identified``, ``confirmed`` and, for a hand-off, ``transferred``: identity
  verified before any order is touched, private details asked for, not guessed, and each change described,
  then agreed to by the customer, before it is made). No part alone is enough.

Each task is drawn to have exactly one right end state. Kinds, by level:

    1  status      the tracking number and the total of an order (said; weighted with a judged tone rubric)
    2  cancel      cancel a pending order for the customer's reason; say the refund
    2  address     change the shipping address of a pending order (a nested object argument)
    2  shipped     refuse to cancel an order that has shipped (no_write + said, with a forbidden cancel)
    3  return      return delivered items within the window, refund to the original payment method
    3  window      refuse a return outside the 30-day window (no_write + said the delivery date)
    3  identity    the customer gives a zip code that does not match: refuse to touch any order
    4  exchange    exchange an item for another variant; say the price difference
    5  transfer    an item worth over $100 arrived damaged: transfer to a human (a ticket row), no refund
"""

from __future__ import annotations

import datetime
import json
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from sqlalchemy import ForeignKey, Integer, String, create_engine, insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from envgen.build.sdk import Generated, ReferenceFailed, ToolRecorder, create_schema, fresh_workdir, load_module
from envgen.pack import Limits, Task

HERE = Path(__file__).resolve().parent
FAMILY, CATEGORY = "general", "customer-service"
VERSION = 1
DB = "state/shop.db"
DEFAULT_TASKS = 120
MAX_ATTEMPTS = 200
TODAY = datetime.date(2025, 6, 15)
WINDOW_START = TODAY - datetime.timedelta(days=30)  # delivered on or after this day: returnable
DAMAGE_LIMIT = 10000  # cents: damaged items above this go to a human
KINDS = ("status", "cancel", "address", "shipped", "return", "window", "identity", "exchange", "transfer")
LEVEL = {"status": 1, "cancel": 2, "address": 2, "shipped": 2, "return": 3, "window": 3, "identity": 3,
         "exchange": 4, "transfer": 5}

FIRST = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam", "Mei",
         "Noah", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Victor", "Wen", "Yusuf", "Zoe"]
LAST = ["Berg", "Costa", "Diaz", "Evans", "Fischer", "Garcia", "Hughes", "Ito", "Jones", "Khan", "Lopez", "Meyer",
        "Nakamura", "Okafor", "Patel", "Reyes", "Silva", "Turner", "Umar", "Vance", "Walsh", "Young", "Zhang"]
STREETS = ["Oak", "Maple", "Cedar", "Elm", "Pine", "Lake", "Hill", "Park", "River", "Sunset", "Willow", "Main"]
CITIES = [("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Madison", "WI"), ("Denver", "CO"),
          ("Raleigh", "NC"), ("Boise", "ID"), ("Tucson", "AZ"), ("Albany", "NY"), ("Savannah", "GA"),
          ("Fresno", "CA"), ("Dayton", "OH")]
PRODUCTS = [  # name, base price (cents), option dimensions
    ("T-Shirt", 1800, {"color": ["black", "white", "navy", "red"], "size": ["S", "M", "L", "XL"]}),
    ("Hoodie", 4900, {"color": ["grey", "black", "green"], "size": ["S", "M", "L", "XL"]}),
    ("Running Shoes", 8900, {"color": ["blue", "black", "white"], "size": ["8", "9", "10", "11"]}),
    ("Backpack", 6500, {"color": ["black", "olive", "grey"], "capacity": ["20L", "30L"]}),
    ("Water Bottle", 2200, {"color": ["steel", "blue", "pink"], "capacity": ["500ml", "750ml", "1L"]}),
    ("Desk Lamp", 3900, {"color": ["white", "black"], "finish": ["matte", "gloss"]}),
    ("Office Chair", 18900, {"color": ["black", "grey"], "material": ["mesh", "leather"]}),
    ("Bluetooth Speaker", 7900, {"color": ["black", "red", "blue"], "size": ["mini", "standard"]}),
    ("Wireless Headphones", 12900, {"color": ["black", "silver", "white"], "style": ["over-ear", "on-ear"]}),
    ("Coffee Maker", 9900, {"color": ["black", "steel"], "capacity": ["4 cups", "8 cups", "12 cups"]}),
    ("Electric Kettle", 4500, {"color": ["white", "steel", "black"], "capacity": ["1L", "1.7L"]}),
    ("Yoga Mat", 2900, {"color": ["purple", "blue", "black"], "thickness": ["4mm", "6mm"]}),
    ("Smart Watch", 24900, {"color": ["black", "rose", "silver"], "size": ["40mm", "44mm"]}),
    ("Tablet Stand", 2500, {"color": ["silver", "black"], "material": ["aluminium", "plastic"]}),
    ("Air Fryer", 11900, {"color": ["black", "white"], "capacity": ["3L", "5L"]}),
    ("Rain Jacket", 9500, {"color": ["yellow", "navy", "black"], "size": ["S", "M", "L"]}),
    ("Mechanical Keyboard", 10900, {"color": ["black", "white"], "switches": ["linear", "tactile", "clicky"]}),
    ("Camping Tent", 21900, {"color": ["green", "orange"], "capacity": ["2-person", "4-person"]}),
]
STOP = [r"anything else"]


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[str] = mapped_column(String(6), primary_key=True)
    name: Mapped[str] = mapped_column(String(40))
    email: Mapped[str] = mapped_column(String(60), unique=True)
    street: Mapped[str] = mapped_column(String(60))
    city: Mapped[str] = mapped_column(String(30))
    state: Mapped[str] = mapped_column(String(2))
    zip_code: Mapped[str] = mapped_column(String(5))


class PaymentMethod(Base):
    __tablename__ = "payment_methods"
    id: Mapped[str] = mapped_column(String(7), primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("customers.id"), index=True)
    kind: Mapped[str] = mapped_column(String(12))
    label: Mapped[str] = mapped_column(String(40))


class Product(Base):
    __tablename__ = "products"
    id: Mapped[str] = mapped_column(String(5), primary_key=True)
    name: Mapped[str] = mapped_column(String(40))


class Variant(Base):
    __tablename__ = "variants"
    id: Mapped[str] = mapped_column(String(7), primary_key=True)
    product_id: Mapped[str] = mapped_column(ForeignKey("products.id"), index=True)
    options: Mapped[str] = mapped_column(String(120))
    price_cents: Mapped[int] = mapped_column(Integer)
    in_stock: Mapped[int] = mapped_column(Integer)


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("customers.id"), index=True)
    status: Mapped[str] = mapped_column(String(10))
    placed_on: Mapped[str] = mapped_column(String(10))
    delivered_on: Mapped[str | None] = mapped_column(String(10), nullable=True)
    tracking_number: Mapped[str | None] = mapped_column(String(14), nullable=True)
    ship_street: Mapped[str] = mapped_column(String(60))
    ship_city: Mapped[str] = mapped_column(String(30))
    ship_state: Mapped[str] = mapped_column(String(2))
    ship_zip: Mapped[str] = mapped_column(String(5))
    payment_method_id: Mapped[str] = mapped_column(ForeignKey("payment_methods.id"))
    total_cents: Mapped[int] = mapped_column(Integer)
    cancel_reason: Mapped[str | None] = mapped_column(String(20), nullable=True)


class OrderItem(Base):
    __tablename__ = "order_items"
    id: Mapped[str] = mapped_column(String(9), primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("orders.id"), index=True)
    variant_id: Mapped[str] = mapped_column(ForeignKey("variants.id"))
    price_cents: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(10))
    new_variant_id: Mapped[str | None] = mapped_column(ForeignKey("variants.id"), nullable=True)


class Transaction(Base):
    __tablename__ = "transactions"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("orders.id"), index=True)
    payment_method_id: Mapped[str] = mapped_column(ForeignKey("payment_methods.id"))
    kind: Mapped[str] = mapped_column(String(8))
    amount_cents: Mapped[int] = mapped_column(Integer)
    created_on: Mapped[str] = mapped_column(String(10))
    note: Mapped[str] = mapped_column(String(40))


class Ticket(Base):
    __tablename__ = "tickets"
    id: Mapped[str] = mapped_column(String(6), primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("customers.id"))
    order_id: Mapped[str] = mapped_column(ForeignKey("orders.id"))
    topic: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(8))
    opened_on: Mapped[str] = mapped_column(String(10))


def _day(days_ago: int) -> str:
    return (TODAY - datetime.timedelta(days=days_ago)).isoformat()


def _address(rng: random.Random) -> dict:
    city, state = rng.choice(CITIES)
    return {"street": f"{rng.randint(2, 980)} {rng.choice(STREETS)} {rng.choice(['Street', 'Avenue', 'Road', 'Lane'])}",
            "city": city, "state": state, "zip_code": f"{rng.randint(10000, 99899):05d}"}


def build_db(path: Path, seed: int) -> dict[str, int]:
    """Write the shop for ``seed`` to ``path``; return row counts per table."""
    rng = random.Random(f"shop-db:{seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    products, variants = [], []
    for i, (name, base, dims) in enumerate(PRODUCTS, 1):
        pid = f"P-{i:03d}"
        products.append(dict(id=pid, name=name))
        (d1, v1s), (d2, v2s) = dims.items()
        for k2, v2 in enumerate(v2s):
            for v1 in v1s:
                price = base + 500 * k2 + rng.choice([0, 0, 200, 400])  # a bigger size costs more
                variants.append(dict(id=f"V-{len(variants) + 1:05d}", product_id=pid,
                                     options=json.dumps({d1: v1, d2: v2}), price_cents=price,
                                     in_stock=int(rng.random() < 0.8)))
    by_product: dict[str, list[dict]] = {}
    for v in variants:
        by_product.setdefault(v["product_id"], []).append(v)
    customers, pms, orders, items, txs, tickets = [], [], [], [], [], []
    emails = set()
    for i in range(1, 201):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com"
        if email in emails:
            continue
        emails.add(email)
        cid = f"C-{i:04d}"
        customers.append(dict(id=cid, name=f"{first} {last}", email=email, **_address(rng)))
        mine = []
        for kind in rng.sample(["credit_card", "paypal", "gift_card", "credit_card"], rng.randint(1, 3)):
            label = {"credit_card": f"{rng.choice(['Visa', 'Mastercard', 'Amex'])} ending {rng.randint(1000, 9999)}",
                     "paypal": f"PayPal {email}", "gift_card": f"Gift card {rng.randint(100000, 999999)}"}[kind]
            pm = dict(id=f"PM-{len(pms) + 1:04d}", customer_id=cid, kind=kind, label=label)
            pms.append(pm)
            mine.append(pm)
        for _ in range(rng.randint(1, 4)):
            status = rng.choices(["pending", "shipped", "delivered", "cancelled"], [25, 22, 48, 5])[0]
            oid = f"W{rng.randint(1000000, 9999999)}"
            if any(o["id"] == oid for o in orders):
                continue
            placed = {"pending": rng.randint(0, 2), "shipped": rng.randint(2, 6), "cancelled": rng.randint(3, 40)}.get(
                status, 0)
            delivered = None
            if status == "delivered":
                days = rng.randint(2, 80)
                delivered, placed = _day(days), days + rng.randint(2, 6)
            ship = customers[-1] if rng.random() < 0.85 else _address(rng)
            chosen = rng.sample(products, rng.randint(1, 4))
            total = 0
            pm = rng.choice(mine)
            for p in chosen:
                v = rng.choice(by_product[p["id"]])
                items.append(dict(id=f"IT-{len(items) + 1:05d}", order_id=oid, variant_id=v["id"],
                                  price_cents=v["price_cents"], status="cancelled" if status == "cancelled" else "ordered",
                                  new_variant_id=None))
                total += v["price_cents"]
            orders.append(dict(id=oid, customer_id=cid, status=status, placed_on=_day(placed), delivered_on=delivered,
                               tracking_number=None if status in ("pending", "cancelled") else
                               f"1Z{rng.randint(10 ** 9, 10 ** 10 - 1)}",
                               ship_street=ship["street"], ship_city=ship["city"], ship_state=ship["state"],
                               ship_zip=ship["zip_code"], payment_method_id=pm["id"], total_cents=total,
                               cancel_reason="no longer needed" if status == "cancelled" else None))
            if status == "cancelled":
                txs.append(dict(id=f"TX-{len(txs) + 1:05d}", order_id=oid, payment_method_id=pm["id"], kind="refund",
                                amount_cents=total, created_on=_day(placed), note="order cancelled"))
    for o in rng.sample(orders, 25):
        tickets.append(dict(id=f"T-{len(tickets) + 1:04d}", customer_id=o["customer_id"], order_id=o["id"],
                            topic=rng.choice(["billing", "other"]), status="closed", opened_on=_day(rng.randint(5, 60))))
    engine = create_engine(f"sqlite:///{path}")
    create_schema(Base.metadata, engine)
    with Session(engine) as s:
        for model, data in ((Customer, customers), (PaymentMethod, pms), (Product, products), (Variant, variants),
                            (Order, orders), (OrderItem, items), (Transaction, txs), (Ticket, tickets)):
            s.execute(insert(model), data)
        s.commit()
    engine.dispose()
    con = sqlite3.connect(path)
    con.execute("VACUUM")
    con.close()
    return {"customers": len(customers), "orders": len(orders), "order_items": len(items), "variants": len(variants)}


class Infeasible(Exception):
    """This draw has no valid task: draw again."""


class Shop:
    """Read-only view of the pristine database for the templates."""

    def __init__(self, db: Path):
        self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        self.con.row_factory = sqlite3.Row

    def q(self, sql: str, *args) -> list:
        return self.con.execute(sql, args).fetchall()

    def order(self, rng: random.Random, where: str, *args) -> dict:
        rows = self.q(f"SELECT o.*, c.name, c.email, c.zip_code AS czip FROM orders o JOIN customers c ON "
                      f"c.id = o.customer_id WHERE {where} ORDER BY o.id", *args)
        if not rows:
            raise Infeasible(f"no order where {where}")
        return dict(rng.choice(rows))

    def items(self, order_id: str) -> list[dict]:
        return [dict(r) for r in self.q(
            "SELECT i.*, v.product_id, v.options, p.name AS product FROM order_items i JOIN variants v ON v.id = "
            "i.variant_id JOIN products p ON p.id = v.product_id WHERE i.order_id = ? ORDER BY i.id", order_id)]


# ------------------------------------------------------------------ drawing a task


def _names(items: list[dict]) -> str:
    names = [f"the {i['product']}" for i in items]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _identity_facts(o: dict, zip_code: str | None = None) -> list[dict]:
    z = zip_code or o["czip"]
    return [{"name": "email", "value": o["email"], "ask": r"e-?mail", "reply": f"My email is {o['email']}."},
            {"name": "zip_code", "value": z, "ask": r"\bzip|postal|post code", "reply": f"My zip code is {z}."},
            {"name": "order_id", "value": o["id"], "ask": r"order (number|id|#|no\.)|which order",
             "reply": f"The order number is {o['id']}."}]



def draw(shop: Shop, kind: str, rng: random.Random) -> dict:
    """The task's spec: what the customer wants, what they know, and what the right outcome is."""
    spec: dict = {"kind": kind}
    if kind == "status":
        o = shop.order(rng, "o.status = 'shipped'")
        spec.update(opening="Hi, could you tell me the tracking number of one of my orders, and how much I paid "
                            "for it?", goal="Learn the tracking number and the total paid for your order.")
    elif kind in ("cancel", "shipped"):
        o = shop.order(rng, "o.status = ?", "pending" if kind == "cancel" else "shipped")
        reason = rng.choice(["no longer needed", "ordered by mistake"])
        spec.update(reason=reason, opening="Hello, I'd like to cancel an order I placed.",
                    goal="Cancel your order" + (" (you will accept it if it cannot be cancelled)." if kind == "shipped"
                                                else "."))
        spec["facts"] = [{"name": "reason", "value": reason, "ask": r"reason|why",
                          "reply": "I ordered it by mistake." if reason == "ordered by mistake" else
                          "I no longer need it."}]
    elif kind == "address":
        o = shop.order(rng, "o.status = 'pending'")
        new = _address(rng)
        text = f"{new['street']}, {new['city']}, {new['state']} {new['zip_code']}"
        spec.update(address=new, opening="Hi, I need to change the shipping address of an order.",
                    goal=f"Have your pending order shipped to {text} instead.")
        spec["facts"] = [{"name": "new_address", "value": text,
                          "ask": r"new (shipping |delivery )?address|which address|what address|(ship|send|deliver) it",
                          "reply": f"Please ship it to {text}."}]
    elif kind in ("return", "window", "transfer"):
        if kind == "window":
            o = shop.order(rng, "o.status = 'delivered' AND o.delivered_on < ?",
                           (WINDOW_START - datetime.timedelta(days=5)).isoformat())
        else:
            o = shop.order(rng, "o.status = 'delivered' AND o.delivered_on >= ?",
                           (WINDOW_START + datetime.timedelta(days=4)).isoformat())
        its = [i for i in shop.items(o["id"]) if i["status"] == "ordered"]
        if kind == "transfer":
            its = [i for i in its if i["price_cents"] > DAMAGE_LIMIT]
            if not its:
                raise Infeasible("nothing dear enough")
            chosen = [rng.choice(its)]
        else:
            chosen = rng.sample(its, rng.randint(1, min(2, len(its))))
        spec.update(items=[i["id"] for i in chosen], refund=sum(i["price_cents"] for i in chosen),
                    delivered_on=o["delivered_on"])
        if kind == "transfer":
            spec.update(opening="Hello, something I ordered arrived damaged.",
                        goal=f"The {chosen[0]['product']} you received arrived broken; you want it sorted out.")
            spec["facts"] = [{"name": "items", "value": chosen[0]["product"],
                              "ask": r"which (item|product)|what (item|product)|damaged|broken",
                              "reply": f"The {chosen[0]['product']} arrived broken."}]
        else:
            spec.update(opening="Hi, I'd like to return something I bought.",
                        goal=f"Return {_names(chosen)} from your order for a refund.")
            spec["facts"] = [{"name": "items", "value": _names(chosen),
                              "ask": r"which (items?|products?)|what (items?|products?)|(items?|products?) (do|would) you",
                              "reply": f"I want to return {_names(chosen)}."}]
    elif kind == "exchange":
        o = shop.order(rng, "o.status = 'delivered' AND o.delivered_on >= ?",
                       (WINDOW_START + datetime.timedelta(days=4)).isoformat())
        it = rng.choice([i for i in shop.items(o["id"]) if i["status"] == "ordered"])
        have = json.loads(it["options"])
        dim = rng.choice(sorted(have))
        others = [dict(v) for v in shop.q("SELECT * FROM variants WHERE product_id = ? ORDER BY id", it["product_id"])]
        match = [v for v in others if json.loads(v["options"]) == {**have, dim: json.loads(v["options"])[dim]}
                 and json.loads(v["options"])[dim] != have[dim] and v["in_stock"] and v["price_cents"] != it["price_cents"]]
        if not match:
            raise Infeasible("no other in-stock variant at another price")
        new = rng.choice(match)
        want = json.loads(new["options"])[dim]
        spec.update(items=[it["id"]], variant=new["id"], difference=new["price_cents"] - it["price_cents"],
                    opening="Hi, I'd like to exchange an item I received.",
                    goal=f"Exchange the {it['product']} ({dim} {have[dim]}) for the same one in {dim} {want}.")
        spec["facts"] = [{"name": "items", "value": it["product"],
                          "ask": r"which (item|product)|what (item|product)|(item|product) (do|would) you",
                          "reply": f"The {it['product']}."},
                         {"name": "new_option", "value": f"{dim} {want}",
                          "ask": r"instead|exchange (it )?for|(which|what) (size|colou?r|variant|option|capacity|"
                                 r"finish|material|style|switches|thickness)",
                          "reply": f"I'd like it with {dim} {want} instead; everything else the same."}]
    elif kind == "identity":
        o = shop.order(rng, "o.status = 'pending'")
        wrong = f"{rng.randint(10000, 99899):05d}"
        if shop.q("SELECT 1 FROM customers WHERE lower(email) = lower(?) AND zip_code = ?", o["email"], wrong):
            raise Infeasible("the wrong zip code matches")
        spec.update(wrong_zip=wrong, opening="Hello, I'd like to cancel an order I placed.",
                    goal="Cancel your order. You believe your zip code is the one you give, and you do not know "
                         "another.")
        spec["facts"] = [{"name": "reason", "value": "no longer needed", "ask": r"reason|why",
                          "reply": "I no longer need it."}]
    else:
        raise ValueError(kind)
    spec.update(order=o["id"], customer=o["customer_id"], name=o["name"], email=o["email"],
                zip=spec.get("wrong_zip") or o["czip"], tracking=o["tracking_number"], total=o["total_cents"],
                pm=o["payment_method_id"])
    spec["facts"] = _identity_facts(o, spec.get("wrong_zip")) + spec.get("facts", [])
    return spec


def _money(cents: int) -> str:
    return f"${abs(cents) / 100:,.2f}"


class Conversation:
    """The reference's messages to the customer, each placed before the next tool call."""

    def __init__(self, tb: ToolRecorder):
        self.tb, self.messages = tb, []

    def say(self, text: str) -> None:
        self.messages.append({"after": len(self.tb.calls), "content": text})


END = " Is there anything else I can help you with?"


def solve(spec: dict, tb: ToolRecorder) -> tuple[list[dict], str, dict]:
    """The reference conversation: (messages, final answer, verifier parts beyond the database), played
    through ``tb`` as a careful agent would."""
    kind, conv = spec["kind"], Conversation(tb)
    conv.say("I can help with that. First I need to authenticate you: what are the email address and the zip "
             "code on your account?")
    me = tb.authenticate_customer(email=spec["email"], zip_code=spec["zip"])
    if kind == "identity":
        if me["verified"]:
            raise ReferenceFailed("identity verified")
        answer = (f"I'm sorry, but I could not verify your identity: no account has the email address "
                  f"{spec['email']} with the zip code {spec['zip']}. For your security I can't look up or change "
                  f"orders without it.{END}")
        # evidence quoted as the tool's JSON writes them: exactly the details the customer gave were tried
        # the reason is a negative statement: the negation is part of the fact (a bare "verified" is the opposite)
        return conv.messages, answer, {"facts": [{"expected": "could not verify", "aliases": [
                                                      "cannot verify", "can't verify", "couldn't verify",
                                                      "unable to verify", "not able to verify", "could not be verified",
                                                      "was not verified", "failed to verify", "verification failed"],
                                                  "name": "reason"}],
                                       "evidence": [json.dumps(spec["email"]), json.dumps(spec["zip"])]}
    if not me["verified"] or me["customer_id"] != spec["customer"]:
        raise ReferenceFailed("not verified")
    conv.say(f"Thank you, {me['name'].split()[0]}, that matches your account. What is the order number?")
    order = tb.get_order(order_id=spec["order"])
    oid = order["order_id"]
    if kind == "status":
        total = order["total"]
        return conv.messages, (f"Your order {oid} has shipped. Its tracking number is {order['tracking_number']}. "
                               f"You paid ${total:,.2f} for it.{END}"), \
            {"facts": [{"expected": order["tracking_number"], "name": "tracking number"},
                       {"expected": total, "name": "total"}], "evidence": [order["tracking_number"]]}
    if kind == "shipped":
        answer = (f"I'm sorry, but order {oid} has already shipped (tracking number {order['tracking_number']}), so "
                  f"I cannot cancel it.{END}")
        return conv.messages, answer, {"facts": [{"expected": "shipped", "name": "reason"}],
                                       "evidence": [order["tracking_number"]]}
    if kind == "cancel":
        conv.say("What is the reason for the cancellation?")
        conv.say(f"To confirm: I will cancel the whole order {oid} (reason: {spec['reason']}), and its total goes back "
                 f"to {order['payment_method']['label']}. Shall I proceed?")
        out = tb.cancel_order(order_id=oid, reason=spec["reason"])
        return conv.messages, (f"Order {oid} is cancelled. The refund of ${out['refund']:,.2f} goes to "
                               f"{order['payment_method']['label']}.{END}"), \
            {"facts": [{"expected": out["refund"], "name": "refund"}]}
    if kind == "address":
        conv.say("What is the new shipping address?")
        a = spec["address"]
        conv.say(f"To confirm: I will change the shipping address of order {oid} to {a['street']}, {a['city']}, "
                 f"{a['state']} {a['zip_code']}. Shall I proceed?")
        tb.modify_order_address(order_id=oid, address=a)
        return conv.messages, f"Done: order {oid} now ships to the new address.{END}", {}
    by_id = {i["item_id"]: i for i in order["items"]}
    chosen = [by_id[i] for i in spec["items"]]
    if kind == "window":
        conv.say("Which item would you like to return?")
        answer = (f"I'm sorry, but order {oid} was delivered on {order['delivered_on']}, more than 30 days ago, "
                  f"which is past our return window. I cannot return it.{END}")
        return conv.messages, answer, {"facts": [{"expected": order["delivered_on"], "name": "delivery date"}],
                                       "evidence": [order["delivered_on"]]}
    if kind == "transfer":
        conv.say("I'm sorry to hear that. Which item arrived damaged?")
        conv.say(f"The {chosen[0]['product']} cost ${chosen[0]['price']:,.2f}, above the $100.00 our policy lets me "
                 "handle myself, so a human agent has to take this claim over. Shall I transfer you?")
        out = tb.transfer_to_human_agent(order_id=oid, topic="damaged_item")
        return conv.messages, (f"I have transferred your claim to a human agent. Your ticket id is "
                               f"{out['ticket_id']}.{END}"), \
            {"facts": [{"expected": out["ticket_id"], "name": "ticket"}], "evidence": [out["ticket_id"]]}
    if kind == "return":
        conv.say("Which item or items would you like to return?")
        pm = order["payment_method"]
        conv.say(f"To confirm: I will return {_names([{'product': c['product']} for c in chosen])} from order {oid}, "
                 f"refunded to the original payment method, {pm['label']}. Shall I proceed?")
        out = tb.return_items(order_id=oid, item_ids=[c["item_id"] for c in chosen], payment_method_id=pm["id"])
        return conv.messages, (f"The return is recorded: ${out['refund']:,.2f} will be refunded to {pm['label']}."
                               f"{END}"), {"facts": [{"expected": out["refund"], "name": "refund"}]}
    if kind == "exchange":
        conv.say("Which item would you like to exchange, and what would you like instead?")
        item = chosen[0]
        product = tb.get_product(product_id=item["product_id"])
        new = next(v for v in product["variants"] if v["variant_id"] == spec["variant"])
        pm = order["payment_method"]
        conv.say(f"To confirm: I will exchange your {item['product']} from order {oid} for the variant "
                 f"{', '.join(f'{k} {v}' for k, v in new['options'].items())}, with the price difference settled on "
                 f"{pm['label']}. Shall I proceed?")
        out = tb.exchange_items(order_id=oid, item_ids=[item["item_id"]], new_variant_ids=[new["variant_id"]],
                                payment_method_id=pm["id"])
        diff = out["price_difference"]
        verb = "charged to" if diff > 0 else "refunded to"
        return conv.messages, (f"The exchange is done: the price difference of ${abs(diff):,.2f} is {verb} "
                               f"{pm['label']}.{END}"), {"facts": [{"expected": abs(diff), "name": "price difference"}]}
    raise ValueError(kind)


FORBIDDEN = {  # the write a no-change task must not make (the plausible wrong one)
    "shipped": lambda s: {"tool": "cancel_order", "args": {"order_id": s["order"], "reason": s["reason"]}},
    "identity": lambda s: {"tool": "cancel_order", "args": {"order_id": s["order"], "reason": "no longer needed"}},
    "window": lambda s: {"tool": "return_items", "args": {"order_id": s["order"], "item_ids": s["items"],
                                                          "payment_method_id": s["pm"]}},
    "transfer": lambda s: {"tool": "return_items", "args": {"order_id": s["order"], "item_ids": s["items"],
                                                            "payment_method_id": s["pm"]}},
}


AUTH, ACCESS = ["authenticate_customer"], ["get_order", "cancel_order", "modify_order_address", "return_items",
                                          "exchange_items", "transfer_to_human_agent"]
WRITES = {"cancel_order": ["order_id"], "modify_order_address": ["order_id", "address"],
          "return_items": ["order_id", "item_ids", "payment_method_id"],
          "exchange_items": ["order_id", "item_ids", "new_variant_ids", "payment_method_id"]}
"""The changes the customer must agree to, with what their description names (items by id or product name,
variants by id or options, payment methods by id or label). A hand-off to a human changes no order: it
needs no yes."""


def verifier(spec: dict, said: dict) -> dict:
    """The task's composite: database + what was said + the procedure (the kit's built-in policy checks:
    identity before access, every change described and agreed to, and the hand-off where one is due)."""
    kind = spec["kind"]
    db = ({"name": "nothing_changed", "kind": "no_write", "args": {"db": DB}}
          if kind in ("status", "shipped", "window", "identity") else
          {"name": "end_state", "kind": "state", "args": {"db": DB, "changes": {"replay": True}}})
    procedure = [{"name": "identified", "kind": "identified",
                  "args": {"auth": AUTH, "access": ACCESS, "customer": None if kind == "identity" else spec["customer"],
                           "told": ["email", "zip_code", "order_id"]}},
                 {"name": "confirmed", "kind": "confirmed", "args": {"writes": WRITES}}]
    if kind == "transfer":
        procedure.append({"name": "transferred", "kind": "transferred",
                          "args": {"tool": "transfer_to_human_agent", "args": {"order_id": spec["order"],
                                                                               "topic": "damaged_item"}}})
    parts = [db] + ([{"name": "told", "kind": "said", "args": said}] if said else []) + procedure
    if kind == "status":  # weighted: a judged tone rubric may add, never make up for a missing part
        for p in parts:
            p["weight"] = 3
        parts.append({"name": "tone", "kind": "rubric", "weight": 1, "args": {"criteria": [
            {"id": "polite", "text": "The agent is polite and answers in plain words.", "weight": 1}]}})
        return {"kind": "composite", "args": {"mode": "weighted", "threshold": 0.9, "parts": parts}}
    return {"kind": "composite", "args": {"mode": "all", "parts": parts}}


def user_spec(spec: dict) -> dict:
    return {"goal": spec["goal"], "persona": "A customer of the shop. Polite and brief; answers only what is asked "
                                             "and does not volunteer details.",
            "facts": spec["facts"], "default": "Sorry, what do you need from me?", "stop": STOP,
            "closing": "No, that's all. Thank you!", "max_replies": 10}


def generate(workdir: Path, n_tasks: int, seed: int) -> Generated:
    """Build the shop and ``n_tasks`` customer conversations for ``seed`` (task i depends on seed and i only)."""
    env, hidden = fresh_workdir(workdir, HERE)
    t0 = time.perf_counter()
    db = env / DB
    build_db(db, seed)
    t_db = time.perf_counter() - t0
    tools = load_module(HERE / "env" / "tools.py", "envgen_categories.general.customer_service_tools")
    shop = Shop(db)
    scratch = Path(tempfile.mkdtemp(prefix="envgen-shop-ref-"))
    tasks, used = [], set()
    try:
        for i in range(n_tasks):
            kind = KINDS[i % len(KINDS)]
            for attempt in range(MAX_ATTEMPTS):
                rng = random.Random(f"shop-task:{seed}:{i}:{attempt}")
                try:
                    spec = draw(shop, kind, rng)
                    if spec["order"] in used:
                        raise Infeasible("order already used by another task")
                    shutil.copyfile(db, scratch / "shop.db")
                    tb = ToolRecorder(tools, db=scratch / "shop.db")
                    messages, answer, said = solve(spec, tb)
                except (Infeasible, ReferenceFailed, StopIteration):
                    continue
                break
            else:
                raise RuntimeError(f"customer-service: {kind} found no feasible task in {MAX_ATTEMPTS} draws")
            used.add(spec["order"])
            meta = {"source": "procedural", "family": FAMILY, "category": CATEGORY, "level": LEVEL[kind],
                    "template": kind, "seed": seed}
            tasks.append(Task(
                id=f"shop-s{seed}-{i:04d}", prompt=[{"role": "user", "content": spec["opening"]}],
                user=user_spec(spec), verifier=verifier(spec, said),
                reference={"calls": [c.model_dump() for c in tb.calls], "answer": answer, "messages": messages,
                           "forbidden": [FORBIDDEN[kind](spec)] if kind in FORBIDDEN else []},
                difficulty=max(LEVEL[kind], len(tb.calls)), meta=meta))
    finally:
        shop.con.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return Generated(
        name="general-customer-service",
        description="Serve an online shop's customers under its written policy: order status, cancellations, "
                    "address changes, returns, exchanges, refusals and hand-overs to a human.",
        family=FAMILY, category=CATEGORY, env_dir=env, hidden_dir=hidden, tasks=tasks,
        instructions=(HERE / "policy.md").read_text(encoding="utf-8"),
        limits=Limits(max_turns=30, step_timeout_s=10.0), generator=f"envs/general/customer_service v{VERSION}",
        timings={"db": t_db, "tasks": time.perf_counter() - t0 - t_db})
