"""`envgen import tau2` on a small domain the test writes in tau2-bench's layout (nothing of tau2 is committed):
pydantic data model, a ToolKitBase toolkit with READ/WRITE/GENERIC tools, '#W' ids, transfer_to_human_agents,
calculate, and tasks with tau2's evaluation criteria. The pack it makes is played in the local sandbox."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from envgen.cli import app
from envgen.episodes.episode import replay
from envgen.errors import ImportSourceError
from envgen.importers.tau2 import first_person, import_tau2
from envgen.pack import ToolCall, load
from envgen.sandbox import open_sandbox

DATA_MODEL = '''
from typing import Dict, List, Optional

from pydantic import BaseModel, Field

from tau2.domains.shop.utils import SHOP_DB_PATH
from tau2.environment.db import DB


class Order(BaseModel):
    order_id: str = Field(description="The order id, such as '#W0000001'")
    user_id: str
    status: str
    total: float
    items: List[str]
    cancel_reason: Optional[str] = None


class User(BaseModel):
    user_id: str
    email: str
    gift_card_balance: float


class ShopDB(DB):
    orders: Dict[str, Order]
    users: Dict[str, User]
'''

TOOLS = '''
"""Toolkit for the shop domain."""

from typing import List

from tau2.domains.shop.data_model import Order, ShopDB
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool


class ShopTools(ToolKitBase):
    """All the tools for the shop domain."""

    db: ShopDB

    def __init__(self, db: ShopDB) -> None:
        super().__init__(db)

    def _get_order(self, order_id: str) -> Order:
        if order_id not in self.db.orders:
            raise ValueError("Order not found")
        return self.db.orders[order_id]

    @is_tool(ToolType.READ)
    def find_user_id_by_email(self, email: str) -> str:
        """Find user id by email.

        Args:
            email: The email of the user, such as 'ana@example.com'.

        Returns:
            str: The user id if found.
        """
        for uid, user in self.db.users.items():
            if user.email.lower() == email.lower():
                return uid
        raise ValueError("User not found")

    @is_tool(ToolType.READ)
    def get_order_details(self, order_id: str) -> Order:
        """Get the status and details of an order.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the beginning.
        """
        return self._get_order(order_id)

    @is_tool(ToolType.WRITE)
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel a pending order; the total is refunded to the gift card.

        Args:
            order_id: The order id, such as '#W0000000'.
            reason: The reason, either 'no longer needed' or 'ordered by mistake'.
        """
        order = self._get_order(order_id)
        if order.status != "pending":
            raise ValueError("Non-pending order cannot be cancelled")
        if reason not in {"no longer needed", "ordered by mistake"}:
            raise ValueError("Invalid reason")
        order.status = "cancelled"
        order.cancel_reason = reason
        user = self.db.users[order.user_id]
        user.gift_card_balance = round(user.gift_card_balance + order.total, 2)
        return order

    @is_tool(ToolType.WRITE)
    def modify_items(self, order_id: str, item_ids: List[str]) -> Order:
        """Replace the items of a pending order.

        Args:
            order_id: The order id.
            item_ids: The new item ids.
        """
        order = self._get_order(order_id)
        order.items = list(item_ids)
        return order

    @is_tool(ToolType.GENERIC)
    def calculate(self, expression: str) -> str:
        """Calculate the result of a mathematical expression.

        Args:
            expression: The expression, such as '2 + 2'.
        """
        if not all(c in "0123456789+-*/(). " for c in expression):
            raise ValueError("Invalid characters in expression")
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"
'''

UTILS = '''
from tau2.utils.utils import DATA_DIR

SHOP_DB_PATH = DATA_DIR / "tau2" / "domains" / "shop" / "db.json"
'''

DB = {"orders": {"#W1001": {"order_id": "#W1001", "user_id": "ana_7", "status": "pending", "total": 54.2,
                            "items": ["111", "222"], "cancel_reason": None},
                 "#W1002": {"order_id": "#W1002", "user_id": "ana_7", "status": "delivered", "total": 19.99,
                            "items": ["333"], "cancel_reason": None}},
      "users": {"ana_7": {"user_id": "ana_7", "email": "ana@example.com", "gift_card_balance": 10.0}}}


def _task(tid, actions, reason, *, info=(), nl=None, basis=("DB",)):
    return {"id": tid, "description": {"purpose": None},
            "user_scenario": {"persona": None, "instructions": {
                "task_instructions": "You are polite. If the agent asks why, say you no longer need it.",
                "domain": "shop", "reason_for_call": reason, "known_info": "Your email is ana@example.com.",
                "unknown_info": "You do not remember your order total."}},
            "initial_state": None,
            "evaluation_criteria": {"actions": [{"action_id": f"{tid}_{i}", "name": n, "arguments": a, "info": None,
                                                 **({"requestor": r} if r else {})}
                                                for i, (n, a, r) in enumerate(actions)],
                                    "communicate_info": list(info), "nl_assertions": nl,
                                    "reward_basis": list(basis)}}


FIND = ("find_user_id_by_email", {"email": "ana@example.com"}, None)
GET = ("get_order_details", {"order_id": "#W1001"}, None)
TASKS = [
    _task("0", [FIND, GET, ("cancel_pending_order", {"order_id": "#W1001", "reason": "no longer needed"}, None)],
          "You want to cancel order #W1001.", info=["54.2"]),
    _task("1", [FIND, GET], "You want to know the total of order #W1001.", info=["54.2"], basis=("COMMUNICATE",)),
    _task("2", [FIND, ("transfer_to_human_agents", {"summary": "wants a refund on a delivered order"}, None)],
          "You want a refund on delivered order #W1002 and insist on a human.",
          nl=["The agent transfers the user to a human."], basis=("DB", "NL_ASSERTION")),
    _task("3", [FIND, ("modify_items", {"order_id": "#W1001", "item_ids": ["444", "555"]}, None)],
          "You want the items of #W1001 replaced by 444 and 555."),
    _task("4", [("toggle_airplane_mode", {}, "user")], "Your phone has no signal."),
    {**_task("5", [FIND], "You want to know your user id."),
     "initial_state": {"initialization_actions": [{"env_type": "assistant", "func_name": "cancel_pending_order",
                                                    "arguments": {"order_id": "#W1001", "reason": "ordered by mistake"}}]}},
]


def write_checkout(root, *, db=True):
    src = root / "src" / "tau2" / "domains" / "shop"
    src.mkdir(parents=True)
    (root / "src" / "tau2" / "__init__.py").write_text("")
    for name, text in (("__init__.py", ""), ("data_model.py", DATA_MODEL), ("tools.py", TOOLS), ("utils.py", UTILS),
                       ("environment.py", "from tau2.environment.environment import Environment\n")):
        (src / name).write_text(textwrap.dedent(text))
    data = root / "data" / "tau2" / "domains" / "shop"
    data.mkdir(parents=True)
    if db:
        (data / "db.json").write_text(json.dumps(DB, indent=4))
    (data / "tasks.json").write_text(json.dumps(TASKS, indent=2))
    (data / "split_tasks.json").write_text(json.dumps({"train": ["0", "1"], "test": ["2", "3", "4", "5"]}))
    (data / "policy.md").write_text("# Shop agent policy\n\nAuthenticate the user by email before any action. "
                                    "Ask for explicit confirmation (yes) before any change.\n")
    return root


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = write_checkout(tmp_path_factory.mktemp("tau2"))
    report = import_tau2(root, "shop", tmp_path_factory.mktemp("out") / "pack")
    return root, report


@pytest.fixture(scope="module")
def sbx(imported):
    s = open_sandbox(imported[1].pack, "local")
    yield s
    s.close()


def test_the_domain_imports_to_a_pack_that_loads(imported):
    root, report = imported
    pack = load(report.pack.root)
    assert report.tasks == 4 and set(report.skipped) == {"4", "5"} and "user's" in report.skipped["4"]
    assert "initial state" in report.skipped["5"]
    assert report.write_tools == ["cancel_pending_order", "modify_items"]
    assert pack.manifest.instructions.startswith("# Shop agent policy")
    tools = {t.name: t.function for t in pack.manifest.tools}
    assert set(tools) == {"find_user_id_by_email", "get_order_details", "cancel_pending_order", "modify_items",
                          "calculate", "transfer_to_human_agents"}
    items = tools["modify_items"].parameters["properties"]["item_ids"]
    assert items["type"] == "array" and items["items"] == {"type": "string"} and items["description"] == "The new item ids."
    assert tools["modify_items"].parameters["required"] == ["order_id", "item_ids"]
    # tau2's code is carried byte for byte; the state is the domain's db in canonical form
    assert (pack.env_dir / "tau2/domains/shop/tools.py").read_text() == textwrap.dedent(TOOLS)
    assert json.loads((pack.env_dir / "state/db.json").read_text()) == DB
    # the agent sees tau2's greeting and the user's opening, or a neutral opening; the scenario is the hidden user's
    t0 = pack.task("tau2-shop-0")
    assert t0.prompt == [] and pack.manifest.agent_first and pack.manifest.greeting.startswith("Hi!")
    assert t0.user.opening == "I want to cancel order #W1001."
    assert "cancel order #W1001" in t0.user.goal and "no longer need" in t0.user.goal
    assert {f.name: f.reply for f in t0.user.facts}["known_info"] == "My email is ana@example.com."
    assert t0.user.closing == "No, that's all. Thank you!"
    assert "that's all" not in (pack.root / "tasks.jsonl").read_text()  # pack-level user defaults: stored once
    parts = {p["name"]: p for p in t0.verifier.args["parts"]}
    assert parts["end_state"]["args"] == {"json": "state/db.json", "changes": {"replay": True}}
    assert parts["told"]["args"]["facts"][0]["expected"] == 54.2
    assert pack.task("tau2-shop-1").verifier.args["parts"][0]["kind"] == "no_write"
    t2 = pack.task("tau2-shop-2").verifier.args
    assert t2["mode"] == "weighted" and t2["parts"][1]["kind"] == "rubric"


def test_reference_scores_1_null_0_and_a_wrong_write_0(imported, sbx):
    pack = imported[1].pack
    for task in pack.tasks:
        ref = task.reference
        ep = replay(sbx, task, ref.calls, ref.answer, ref.messages)
        assert ep.verdict.reward == 1.0, (task.id, ep.verdict.details)
        null = replay(sbx, task, [], "", None).verdict.reward
        assert null == 0.0, task.id  # task 2 changes nothing and tells nothing, but `transferred` asks the hand-off
    t0 = pack.task("tau2-shop-0")
    wrong = [*t0.reference.calls[:2], ToolCall(tool="cancel_pending_order",
                                               args={"order_id": "#W1001", "reason": "ordered by mistake"})]
    assert replay(sbx, t0, wrong, t0.reference.answer, t0.reference.messages).verdict.reward == 0.0
    t3 = pack.task("tau2-shop-3")
    wrong = [t3.reference.calls[0], ToolCall(tool="modify_items", args={"order_id": "#W1001", "item_ids": ["555", "444"]})]
    assert replay(sbx, t3, wrong, t3.reference.answer, t3.reference.messages).verdict.reward == 0.0


def test_split_and_cli(tmp_path):
    root = write_checkout(tmp_path / "tau2")
    out = CliRunner().invoke(app, ["import", "tau2", str(root), "--domain", "shop", "--split", "train", "--out",
                                   str(tmp_path / "pack"), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["tasks"] == 2
    assert [t.meta["tau2_id"] for t in load(tmp_path / "pack").tasks] == ["0", "1"]


@pytest.mark.parametrize("case", ["no_db", "bad_db", "bad_shape", "pointer", "domain", "not_tau2", "split", "heavy"])
def test_errors_name_the_input(tmp_path, case):
    root = write_checkout(tmp_path / "tau2", db=case != "no_db")
    db = root / "data/tau2/domains/shop/db.json"
    kw = {}
    if case == "bad_db":
        db.write_text("{oops")
    elif case == "bad_shape":
        db.write_text(json.dumps({"orders": {}, "users": {"ana_7": {"user_id": "ana_7"}}}))
    elif case == "heavy":  # a domain that needs more of tau2's framework than a pack carries
        tools = root / "src/tau2/domains/shop/tools.py"
        tools.write_text("from tau2.environment.tool import as_tool\n" + tools.read_text())
    elif case == "pointer":
        db.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 5000000\n")
    elif case == "split":
        kw["split"] = "dev"
    domain = "nope" if case == "domain" else "shop"
    where = tmp_path if case == "not_tau2" else root
    with pytest.raises(ImportSourceError) as e:
        import_tau2(where, domain, tmp_path / "pack", **kw)
    msg = str(e.value)
    assert "\n" not in msg
    assert {"no_db": "db.json is missing", "bad_db": "db.json is not valid JSON", "pointer": "large-file pointer",
            "bad_shape": "ValidationError: 2 validation errors for ShopDB / users.ana_7.email",
            "heavy": "imports tau2.environment.tool, part of tau2's framework an imported pack does not carry",
            "domain": "the checkout has shop", "not_tau2": "not a tau2-bench checkout",
            "split": "no split 'dev'; it has test, train"}[case] in msg


def test_first_person():
    assert first_person("You are Yusuf Rossi in zip code 19122. Your email is a@b.c.") == \
        "I am Yusuf Rossi in zip code 19122. My email is a@b.c."


@pytest.mark.docker
def test_the_pack_runs_in_docker(imported):
    """The image installs pydantic for tau2's data model; tools and the verifier's reference replay run there."""
    pack = imported[1].pack
    task = pack.task("tau2-shop-0")
    ref = task.reference
    with open_sandbox(pack, "docker") as box:
        assert replay(box, task, ref.calls, ref.answer, ref.messages).verdict.reward == 1.0
        assert replay(box, task, [], "", None).verdict.reward == 0.0


def test_nl_assertions_can_gate_the_reward(tmp_path):
    root = write_checkout(tmp_path / "tau2")
    v = import_tau2(root, "shop", tmp_path / "pack", nl_assertions="require").pack.task("tau2-shop-2").verifier.args
    assert v["mode"] == "all" and v["parts"][-1]["kind"] == "rubric"
    assert v["parts"][-1]["args"]["criteria"] == [{"id": "a1", "text": "The agent transfers the user to a human.",
                                                   "weight": 1}]
    with pytest.raises(ImportSourceError, match="--nl-assertions 'judge'"):
        import_tau2(root, "shop", tmp_path / "pack2", nl_assertions="judge")
