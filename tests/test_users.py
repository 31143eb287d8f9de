"""Simulated users (Task.user): a message without a tool call goes to the user, whose reply is the observation,
until the user ends the conversation or the turn limit. Scripted users offline, an LLM user through the real
openai client against a local fake server; the user never sees hidden/ or the reference."""

from __future__ import annotations

import json

import gymnasium
import pytest
from typer.testing import CliRunner

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.cli import app
from envgen.episodes.episode import Episode, replay
from envgen.episodes.gym import ENV_ID, PackEnv
from envgen.episodes.prompt import DEFAULT_SYSTEM_PROMPT, USER_SYSTEM_PROMPT
from envgen.episodes.users import STOP_MARKER, LLMUser, ScriptedUser, dialogue, make_user, user_system_prompt
from envgen.errors import InputError, PackError
from envgen.pack import format as packmod
from envgen.passcheck.check import check
from envgen.passcheck.config import CheckConfig
from envgen.policies.base import Policy
from envgen.policies.builtin import make_policy, rollout
from envgen.sandbox import open_sandbox

from conftest import make_tiny_pack
from fake_llm import FakeLLM, Reply

ORDER = "W-48213"
CANARY = "HIDDEN-CANARY-7f3a"
OPENING = "Hi, I need my order put on record."
ASK = "Sure. What is your order id?"
FINAL = f"Done: order {ORDER} is recorded."

SPEC = {
    "goal": f"Get your order {ORDER} recorded.",
    "persona": "Terse; answers only what is asked.",
    "facts": [{"name": "order_id", "value": ORDER, "ask": r"order (id|number)", "reply": f"It's {ORDER}."}],
    "rules": [{"when": r"\bname\b", "reply": "I'd rather not say."}],
    "default": "I just want my order recorded.",
    "stop": [r"\brecorded\b"],
    "closing": "Great, thanks!",
}


def user_task(i: int = 0, **spec) -> packmod.Task:
    return packmod.Task(
        id=f"user-{i}", prompt=[{"role": "user", "content": OPENING}],
        verifier={"kind": "program", "args": {"params": {"key": "order", "expected": ORDER}}},
        reference={"messages": [{"after": 0, "content": ASK}],
                   "calls": [{"tool": "put", "args": {"key": "order", "value": ORDER}},
                             {"tool": "submit", "args": {"answer": ORDER}}],
                   "answer": FINAL},
        difficulty=2, user={**SPEC, **spec})


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> packmod.Pack:
    """The tiny pack plus a user task (and a canary file in hidden/ the user must never see)."""
    tmp = tmp_path_factory.mktemp("users")
    base = make_tiny_pack(tmp / "base")
    (base.root / "hidden" / "secret.txt").write_text(CANARY)
    return packmod.save(packmod.Pack(base.manifest, [*base.tasks, user_task()], base.root), tmp / "users")


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": f"c_{name}", "type": "function",
                                           "function": {"name": name, "arguments": json.dumps(args)}}]}


class Script(Policy):
    """Plays fixed actions, one per turn (by info["turns"]); repeats the last one."""

    def __init__(self, *actions):
        self.actions = actions

    def act(self, observation, info):
        return self.actions[min(int(info["turns"]), len(self.actions) - 1)]


# ---------------------------------------------------------------- the spec and the scripted user


def test_scripted_user_reveals_the_order_id_only_when_asked():
    spec = packmod.UserSpec.model_validate(SPEC)
    user = ScriptedUser(spec)
    conv = [{"role": "user", "content": OPENING}]
    for wrong in ("How can I help?", "What is your name?", "Which order?"):
        text, done = user.reply(conv + [{"role": "assistant", "content": wrong}])
        assert ORDER not in text and not done
    assert user.reply(conv + [{"role": "assistant", "content": "Your ORDER ID please?"}]) == (f"It's {ORDER}.", False)
    assert user.reply(conv + [{"role": "assistant", "content": "All recorded."}]) == ("Great, thanks!", True)


def test_max_replies_ends_the_conversation():
    user = make_user(packmod.UserSpec.model_validate({**SPEC, "max_replies": 2}), "scripted")
    conv = [{"role": "assistant", "content": "hm"}]
    assert user.reply(conv)[1] is False
    assert user.reply(conv)[1] is True


def test_a_bad_spec_fails_loading_naming_the_field(tmp_path, pack):
    bad = json.loads(user_task().model_dump_json())
    bad["user"]["facts"][0]["ask"] = "order ("
    lines = (pack.root / "tasks.jsonl").read_text() + json.dumps(bad | {"id": "bad"}) + "\n"
    import shutil

    shutil.copytree(pack.root, tmp_path / "p")
    (tmp_path / "p" / "tasks.jsonl").write_text(lines)
    with pytest.raises(PackError, match=r"tasks.jsonl:5: user.facts\[0\].ask: .*not a valid regular expression"):
        packmod.load(tmp_path / "p")
    with pytest.raises(InputError, match="unknown user model"):
        PackEnv(pack, user="claude")


def test_the_agent_never_sees_the_spec(pack):
    env = PackEnv(pack)
    try:
        obs, info = env.reset(options={"task_id": "user-0"})
        seen = json.dumps(info) + obs
        assert ORDER not in seen and "Terse" not in seen and OPENING in obs
        assert info["messages"][0] == {"role": "system", "content": USER_SYSTEM_PROMPT}
        _, info = env.reset(options={"task_id": "tiny-0"})
        assert info["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    finally:
        env.close()


# ---------------------------------------------------------------- episodes through gymnasium.make


def test_oracle_asks_then_acts_and_scores_one_with_the_user_turns_recorded(pack):
    env = gymnasium.make(ENV_ID, pack=str(pack.root))
    try:
        t = rollout(env, make_policy("oracle"), task_id="user-0")
    finally:
        env.close()
    assert (t.reward, t.terminated, t.truncated, t.user_turns, t.turns) == (1.0, True, False, 2, 4)
    said = [(m["role"], m["content"]) for m in t.messages if m["role"] in ("user", "assistant") and m["content"]]
    assert said == [("user", OPENING), ("assistant", ASK), ("user", f"It's {ORDER}."), ("assistant", FINAL),
                    ("user", "Great, thanks!")]


def test_conversation_is_in_info_and_the_episode_with_turns(pack):
    env = PackEnv(pack)
    try:
        env.reset(options={"task_id": "user-0"})
        obs, r, term, trunc, info = env.step(ASK)
        assert (obs, r, term, trunc) == (f"It's {ORDER}.", 0.0, False, False)
        assert info["user_turns"] == 1
        assert info["conversation"] == [{"role": "user", "content": OPENING, "turn": 0},
                                        {"role": "assistant", "content": ASK, "turn": 1},
                                        {"role": "user", "content": f"It's {ORDER}.", "turn": 1}]
        env.step(call("put", key="order", value=ORDER))
        env.step(call("submit", answer=ORDER))
        obs, r, term, trunc, info = env.step(FINAL)
        assert (obs, r, term, trunc) == ("", 1.0, True, False)
        assert env.unwrapped._episode.messages[-2:] == [{"role": "assistant", "content": FINAL, "turn": 4},
                                                         {"role": "user", "content": "Great, thanks!", "turn": 4}]
        assert [c["turn"] for c in env.unwrapped._episode.calls] == [2, 3]
    finally:
        env.close()


def test_asking_wrongly_gets_no_id_and_a_guess_scores_zero(pack):
    env = PackEnv(pack)
    try:
        t = rollout(env, Script("What is your name?", "Anything else?", call("put", key="order", value="W-1"),
                                call("submit", answer="W-1"), "Your order is recorded."), task_id="user-0")
    finally:
        env.close()
    assert ORDER not in json.dumps(t.messages)
    assert (t.reward, t.terminated, t.user_turns) == (0.0, True, 3)
    assert t.messages[3]["content"] == "I'd rather not say." and t.messages[5]["content"] == SPEC["default"]


def test_the_user_ending_by_rule_ends_and_verifies(pack, tmp_path):
    task = user_task(rules=[{"when": "manager", "reply": "Forget it. Bye.", "stop": True}])
    p = packmod.save(packmod.Pack(pack.manifest, [task], pack.root), tmp_path / "p")
    env = PackEnv(p)
    try:
        env.reset(options={"task_id": "user-0"})
        obs, r, term, trunc, info = env.step("Let me get my manager.")
    finally:
        env.close()
    assert (obs, r, term, trunc) == ("", 0.0, True, False)
    assert info["messages"][-1] == {"role": "user", "content": "Forget it. Bye."}
    assert info["reward_details"].get("reason") == "no submission"  # the verifier ran


def test_the_turn_limit_truncates_a_conversation_that_does_not_end(pack):
    env = PackEnv(pack, max_turns=3)
    try:
        t = rollout(env, Script("Hello?"), task_id="user-0")
    finally:
        env.close()
    assert (t.reward, t.terminated, t.truncated, t.turns, t.user_turns) == (0.0, False, True, 3, 3)
    assert t.reward_details["truncated"] == "max_turns"


def test_replay_plays_the_reference_conversation(pack):
    sbx = open_sandbox(pack, "local")
    try:
        task = pack.task("user-0")
        ep = replay(sbx, task, task.reference.calls, task.reference.answer, task.reference.messages)
    finally:
        sbx.close()
    assert isinstance(ep, Episode) and ep.verdict.reward == 1.0
    assert [(m["role"], m["turn"]) for m in ep.messages] == [("user", 0), ("assistant", 1), ("user", 1),
                                                             ("assistant", 4), ("user", 4)]


# ---------------------------------------------------------------- the pass check and envgen run


def test_pass_check_keeps_the_user_task_with_the_oracle_and_not_with_null(pack, tmp_path):
    one = pack.with_tasks([pack.task("user-0")])
    p = packmod.save(packmod.Pack(one.manifest, one.tasks, pack.root), tmp_path / "one")
    for policy, kept in (("oracle", 1), ("null", 0)):
        rep = check(str(p.root), policy, CheckConfig(k=2, workers=1, store_url=str(tmp_path / f"{policy}.db")))
        assert len(rep.kept) == kept, policy


def test_envgen_run_prints_the_user_turns(pack):
    res = CliRunner().invoke(app, ["run", str(pack.root), "--task", "user-0", "--user", "scripted", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["reward"] == 1.0 and out["user_turns"] == 2
    assert {"role": "user", "content": f"It's {ORDER}."} in out["messages"]
    res = CliRunner().invoke(app, ["run", str(pack.root), "--task", "user-0"])
    assert "2 user replies" in res.output and "[user]\nGreat, thanks!" in res.output


# ---------------------------------------------------------------- an LLM user over HTTP


def test_llm_user_through_a_fake_openai_server_sees_the_spec_and_nothing_hidden(pack):
    def responder(body):
        last = body["messages"][-1]["content"]
        if "order id" in last:
            return Reply(content=f"Sure, it is {ORDER}.")
        if "recorded" in last:
            return Reply(content=f"Perfect, thank you. {STOP_MARKER}")
        return Reply(content="I need my order recorded.")

    with FakeLLM(responder) as llm:
        env = gymnasium.make(ENV_ID, pack=str(pack.root), user=f"openai:sim-user?base_url={llm.url}&temperature=0")
        try:
            t = rollout(env, Script("Hello! How can I help?", ASK, call("put", key="order", value=ORDER),
                                    call("submit", answer=ORDER), "All recorded for you."), task_id="user-0")
        finally:
            env.close()
        bodies = [r.body for r in llm.log]
    assert not llm.errors
    assert (t.reward, t.terminated, t.user_turns) == (1.0, True, 3)
    assert t.messages[-1] == {"role": "user", "content": "Perfect, thank you."}  # the marker is not shown
    assert len(bodies) == 3 and all(b["model"] == "sim-user" and b["temperature"] == 0 for b in bodies)
    first = bodies[0]["messages"]
    system = first[0]["content"]
    assert first[0]["role"] == "system" and SPEC["goal"] in system and SPEC["persona"] in system
    assert f"order id: {ORDER}" in system and STOP_MARKER in system
    # roles mirrored: the opening prompt is the user's own (assistant) turn, the agent's words are `user` turns
    assert [m["role"] for m in bodies[1]["messages"][1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert bodies[1]["messages"][2] == {"role": "assistant", "content": OPENING}
    raw = json.dumps(bodies)
    for secret in (CANARY, "def verify", FINAL, "submit", '"put"', '"tools"', "tool_calls", "no submission"):
        assert secret not in raw, secret


def test_llm_user_is_the_pack_default_and_a_run_can_override_it(pack, tmp_path):
    manifest = pack.manifest.model_copy(update={"user_model": "openai:m?base_url=http://127.0.0.1:9/v1"})
    p = packmod.save(packmod.Pack(manifest, pack.tasks, pack.root), tmp_path / "p")
    assert packmod.load(p.root).manifest.user_model.startswith("openai:m")
    env = PackEnv(p)
    env.reset(options={"task_id": "user-0"})
    assert isinstance(env._user, LLMUser)
    env.close()
    env = PackEnv(p, user="scripted")
    env.reset(options={"task_id": "user-0"})
    assert isinstance(env._user, ScriptedUser)
    env.close()
    with pytest.raises(Exception, match="user_model"):
        packmod.Manifest.model_validate({**manifest.model_dump(), "user_model": "gpt"})


# ---------------------------------------------------------------- the TRL adapter


def test_trl_environment_talks_to_the_user_through_message_user(pack):
    pytest.importorskip("datasets", reason="the rl extra (datasets) is not installed")
    from envgen.rl.env import TRL_USER_RULES, USER_TOOL, environment_class, pack_dataset, verifier_reward

    cls = environment_class(pack)
    rows = {r["task_id"]: r for r in pack_dataset(pack)}
    assert rows["user-0"]["prompt"][0]["content"] == TRL_USER_RULES
    assert rows["tiny-0"]["prompt"][0]["content"] == DEFAULT_SYSTEM_PROMPT
    env = cls()
    try:
        env.reset(**rows["user-0"])
        assert env.message_user(message="Can I help?") == SPEC["default"]
        assert env.message_user(message=ASK) == f"It's {ORDER}."
        env.put(key="order", value=ORDER)
        env.submit(answer=ORDER)
        assert env.message_user(message="It is recorded.").startswith("Great, thanks!\n\nThe user has ended")
        assert "ended the conversation" in env.message_user(message="Anything else?")
        completion = [{"role": "assistant", "content": FINAL}]
        assert verifier_reward([completion], [env]) == [1.0]
        assert [(m["role"], m["turn"]) for m in env._episode.messages][:3] == [("user", 0), ("assistant", None),
                                                                                ("user", None)]
        env.reset(**rows["tiny-0"])
        assert "no_user" in getattr(env, USER_TOOL)(message="hi")
    finally:
        env._close()
    assert not hasattr(environment_class(pack.with_tasks(pack.tasks[:1])), USER_TOOL)


def test_message_user_has_a_tool_schema_trl_can_read(pack):
    utils = pytest.importorskip("transformers.utils", reason="the rl extra (transformers) is not installed")
    from envgen.rl.env import environment_class

    schema = utils.get_json_schema(environment_class(pack)().message_user)
    assert schema["function"]["name"] == "message_user"
    assert schema["function"]["parameters"]["required"] == ["message"]
    assert schema["function"]["parameters"]["properties"]["message"]["type"] == "string"


def test_hub_table_carries_the_user_spec_and_reference_messages(pack, tmp_path):
    pytest.importorskip("datasets", reason="the hub extra (datasets) is not installed")
    from envgen.pack.hub import _check_table, task_from_row, task_row, write_task_table

    task = pack.task("user-0")
    assert task_from_row(task_row(task)) == task
    write_task_table(pack.tasks, tmp_path / "t.parquet")
    _check_table(tmp_path / "t.parquet", pack.tasks, "here")  # raises if the table disagrees with tasks.jsonl


# ---------------------------------------------------------------- a scripted user that behaves like a customer


def said(user, *messages: str) -> list[str]:
    """The user's replies to the agent's ``messages``, one after another in one conversation."""
    conv, out = [{"role": "user", "content": OPENING}], []
    for text in messages:
        conv.append({"role": "assistant", "content": text})
        reply, _ = user.reply(conv)
        conv.append({"role": "user", "content": reply})
        out.append(reply)
    return out


def scripted(**spec) -> ScriptedUser:
    return ScriptedUser(packmod.UserSpec.model_validate({**SPEC, **spec}))


def test_consent_asked_in_any_wording_gets_a_yes_and_a_question_of_fact_does_not():
    """Issue 29's false negatives: natural consent questions were answered "Sorry, what do you need from me?"."""
    asks = ["I'll record order W-48213 for you. Is that OK with you?", "Would you like me to do that?",
            "Do you want me to go on?", "Can I go ahead and record it?", "Shall I proceed?"]
    for question, reply in zip(asks, said(scripted(), *asks)):
        assert reply == packmod.AGREE and dialogue.agreement(reply) == "yes", question
    told = said(scripted(), "What is your order id?", "I'll record your order id W-48213. Is that OK with you?")
    assert told == [f"It's {ORDER}.", packmod.AGREE]  # the restated fact is not told again
    facts = ["Should I look at order W-48213?", "Should I check the order first?", "How can I help?"]
    for question, reply in zip(facts, said(scripted(), *facts)):
        assert reply == SPEC["default"] and dialogue.agreement(reply) is None, question


def test_consent_declines_and_regrets_as_the_spec_says():
    user = scripted(consent=[
        {"when": r"\bcancel", "answer": "no", "reply": "No, don't cancel it."},
        {"when": r"\brecord", "answer": "yes", "regret": "Actually, wait, I changed my mind: please don't do that."}])
    replies = said(user, "Shall I cancel order W-48213?", "Shall I record order W-48213?",
                   "Great, recording it now.", "Should I record order W-48213 after all?", "Shall I proceed?")
    assert replies[0] == "No, don't cancel it." and dialogue.agreement(replies[0]) == "no"
    assert replies[1] == packmod.AGREE
    assert replies[2].startswith("Actually, wait") and dialogue.agreement(replies[2]) == "no"  # the next message
    assert replies[3] == packmod.DECLINE  # taken back: the entry now says no
    assert replies[4] == packmod.AGREE  # a question no entry matches: yes


def test_a_withheld_fact_is_told_only_on_the_second_ask():
    user = scripted(facts=[{**SPEC["facts"][0], "asks": 2, "withheld": "Hmm, I don't have it at hand."}])
    assert said(user, "What is your order id?", "Your name?", "Could you check your order number?") == [
        "Hmm, I don't have it at hand.", "I'd rather not say.", f"It's {ORDER}."]


def test_a_wrong_detail_comes_first_and_is_corrected_when_it_does_not_match_or_is_asked_again():
    fact = {**SPEC["facts"][0], "wrong": "W-48231"}
    first, fixed, again = said(scripted(facts=[fact]), "What is your order id?",
                               "I couldn't find an order W-48231.", "And your order id once more?")
    assert first == "It's W-48231." and ORDER in fixed and "W-48231" not in fixed and again == f"It's {ORDER}."
    assert said(scripted(facts=[fact]), "Order id?", "Hm. What was the order id again?") == [
        "It's W-48231.", f"Sorry, my mistake. It's {ORDER}."]
    with pytest.raises(Exception, match="wrong: .*is the right value"):
        packmod.UserFact.model_validate({**fact, "wrong": ORDER})


def test_preferences_answer_what_was_offered_once_and_come_before_facts():
    user = scripted(preferences={"when": r"store credit", "reply": "I'd rather have a refund to my card."})
    assert said(user, "Would you like store credit? And what is your order id?", "Store credit, then?") == [
        "I'd rather have a refund to my card.", SPEC["default"]]


def test_the_user_insists_after_a_refusal_as_many_times_as_the_spec_says():
    user = scripted(insist=[{"when": r"can(no|')t", "reply": "Please, I really need it recorded.", "times": 2}])
    assert said(user, "Sorry, I can't do that.", "I cannot do that.", "I can't, really.") == [
        "Please, I really need it recorded.", "Please, I really need it recorded.", SPEC["default"]]


@pytest.mark.parametrize("style, expect", [
    ("plain", "Thank you, I am sure: it's W-48213."), ("lowercase", "thank you, i am sure: it's W-48213."),
    ("terse", "I am sure: it's W-48213."), ("casual", "Thanks, I'm sure: it's W-48213"),
    ("formal", "Thank you, I am sure: it is W-48213."), ("like a pirate", "Thank you, I am sure: it's W-48213.")])
def test_a_style_rewrites_what_the_user_says_but_never_a_fact_value(style, expect):
    fact = {**SPEC["facts"][0], "reply": f"Thank you, I am sure: it's {ORDER}."}
    user = scripted(facts=[fact], style=style)
    assert said(user, "Your order id?") == [expect]
    yes, no = said(scripted(style=style, consent=[{"when": "cancel", "answer": "no"}]),
                   "Shall I proceed?", "Shall I cancel it?")
    assert (dialogue.agreement(yes), dialogue.agreement(no)) == ("yes", "no")  # still read as yes and no


def test_the_llm_user_prompt_carries_every_behaviour_of_the_spec():
    spec = packmod.UserSpec.model_validate({
        **SPEC, "style": "casual, lots of typos",
        "facts": [{**SPEC["facts"][0], "asks": 2, "wrong": "W-48231"}],
        "consent": [{"when": "cancel", "answer": "no", "reply": "No way."},
                    {"when": "record", "regret": "Wait, no, don't."}],
        "preferences": {"when": "store credit", "reply": "Refund to my card."},
        "insist": {"when": "cannot", "reply": "Please do it.", "times": 3}, "opening": "Hey, I need help."})
    text = user_system_prompt(spec)
    for part in ("casual, lots of typos", "second time the agent asks", "say W-48231 by mistake", ORDER,
                 "/cancel/: answer no", "No way.", "take it back: \"Wait, no, don't.\"", "/store credit/",
                 "Refund to my card.", "up to 3 time(s)", "Please do it.", "Hey, I need help.", STOP_MARKER):
        assert part in text, part


# ---------------------------------------------------------------- pack-level defaults and the agent speaking first


DEFAULTS = {"stop": [r"\brecorded\b"], "closing": "Cheers!", "style": "formal",
            "rules": [{"when": r"\bname\b", "reply": "I'd rather not say."}]}


def write_pack(base: packmod.Pack, dest, tasks: list[dict], **manifest) -> packmod.Pack:
    """A pack written as a hand-made one is: pack.json and tasks.jsonl as given (then loaded)."""
    import shutil

    shutil.copytree(base.root, dest)
    doc = json.loads((dest / "pack.json").read_text())
    (dest / "pack.json").write_text(json.dumps({**doc, **manifest}))
    (dest / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return packmod.load(dest)


def task_doc(**over) -> dict:
    doc = json.loads(user_task().model_dump_json(exclude_none=True))
    return {**doc, **over}


def test_pack_user_defaults_are_merged_under_each_task_and_saved_back_sparse(pack, tmp_path):
    sparse = {"goal": SPEC["goal"], "facts": SPEC["facts"]}
    p = write_pack(pack, tmp_path / "p", [task_doc(user=sparse), task_doc(id="own", user={**sparse, "closing": "Bye."}),
                                          json.loads(pack.task("tiny-0").model_dump_json())], user=DEFAULTS)
    merged, own = p.task("user-0").user, p.task("own").user
    assert (merged.closing, merged.style, merged.stop, merged.rules[0].reply) == ("Cheers!", "formal", DEFAULTS["stop"],
                                                                                "I'd rather not say.")
    assert own.closing == "Bye." and p.task("tiny-0").user is None  # the task wins; no user stays no user
    env = PackEnv(p)
    try:
        env.reset(options={"task_id": "user-0"})
        assert env.step("All recorded.")[0] == "" and env.unwrapped._episode.messages[-1]["content"] == "Cheers!"
    finally:
        env.close()
    saved = packmod.save(p, tmp_path / "saved")
    lines = [json.loads(x) for x in (saved.root / "tasks.jsonl").read_text().splitlines()]
    assert set(lines[0]["user"]) == {"goal", "facts"} and lines[1]["user"]["closing"] == "Bye."
    assert [t.user for t in saved.tasks] == [t.user for t in p.tasks]
    for bad, where in (({"colour": "red"}, "unknown UserSpec field"), ({"stop": ["("]}, "not a valid regular")):
        with pytest.raises(PackError, match=f"pack.json: user: .*{where}"):
            write_pack(pack, tmp_path / f"bad-{len(where)}", [task_doc()], user=bad)


def test_a_pack_without_the_new_user_fields_is_written_as_before_they_existed(pack):
    """Fields at their defaults are not written, so such packs keep their bytes and content hash."""
    line = json.loads((pack.root / "tasks.jsonl").read_text().splitlines()[-1])
    assert set(line["user"]) == {"goal", "persona", "facts", "rules", "default", "stop", "closing"}
    assert set(line["user"]["facts"][0]) == {"name", "value", "ask", "reply"}
    assert not {"user", "agent_first", "greeting"} & set(json.loads((pack.root / "pack.json").read_text()))
    spec = packmod.UserSpec.model_validate({**SPEC, "style": "terse"})
    assert packmod.UserSpec.model_validate(spec.model_dump()) == spec and spec.model_dump()["style"] == "terse"


GREETING = "Hello, this is the records desk. How can I help?"


def agent_first_pack(pack, dest, **user) -> packmod.Pack:
    return write_pack(pack, dest, [task_doc(prompt=[{"role": "system", "content": "Records desk, be brief."}],
                                            user={**SPEC, "opening": OPENING, **user})],
                      agent_first=True, greeting=GREETING)


def test_the_agent_speaks_first_and_the_user_opens_from_its_spec(pack, tmp_path):
    p = agent_first_pack(pack, tmp_path / "p")
    env = PackEnv(p)
    try:
        obs, info = env.reset(options={"task_id": "user-0"})
        assert obs == OPENING
        assert info["messages"][1:] == [{"role": "assistant", "content": GREETING}, {"role": "user", "content": OPENING}]
        assert info["conversation"] == [{"role": "assistant", "content": GREETING, "turn": 0},
                                        {"role": "user", "content": OPENING, "turn": 0}]
        assert "Records desk" in info["messages"][0]["content"] and ORDER not in json.dumps(info)
        t = rollout(env, make_policy("oracle"), task_id="user-0")
        assert (t.reward, t.user_turns) == (1.0, 2)
    finally:
        env.close()
    sbx = open_sandbox(p, "local")
    try:
        task = p.task("user-0")
        ep = replay(sbx, task, task.reference.calls, task.reference.answer, task.reference.messages)
    finally:
        sbx.close()
    assert ep.verdict.reward == 1.0 and ep.messages[:2] == [{"role": "assistant", "content": GREETING, "turn": 0},
                                                           {"role": "user", "content": OPENING, "turn": 0}]


def test_prompts_that_cannot_start_an_episode_fail_loading(pack, tmp_path):
    with pytest.raises(PackError, match=r"tasks.jsonl:1: prompt: .*agent_first.*only system messages"):
        write_pack(pack, tmp_path / "a", [task_doc(user={**SPEC, "opening": OPENING})], agent_first=True)
    with pytest.raises(PackError, match=r"tasks.jsonl:1: user.opening: missing"):
        write_pack(pack, tmp_path / "b", [task_doc(prompt=[])], agent_first=True)
    with pytest.raises(PackError, match=r"tasks.jsonl:1: prompt: no user message.*or set agent_first"):
        write_pack(pack, tmp_path / "c", [task_doc(prompt=[{"role": "system", "content": "Be brief."}])])
    assert write_pack(pack, tmp_path / "d", [task_doc(prompt=[])], agent_first=True,
                      user={"opening": OPENING}).task("user-0").user.opening == OPENING


def test_an_llm_user_writes_its_own_opening_after_the_greeting(pack, tmp_path):
    p = agent_first_pack(pack, tmp_path / "p", facts=[{**SPEC["facts"][0], "asks": 2}])

    def responder(body):
        last = body["messages"][-1]["content"]
        if last == GREETING:
            return Reply(content="hey, I want an order put on record")
        return Reply(content=f"Fine. {STOP_MARKER}" if "recorded" in last else f"It is {ORDER}.")

    with FakeLLM(responder) as llm:
        env = PackEnv(p, user=f"openai:sim?base_url={llm.url}")
        try:
            obs, info = env.reset(options={"task_id": "user-0"})
            assert obs == "hey, I want an order put on record"
            assert env.step(ASK)[0] == f"It is {ORDER}."
        finally:
            env.close()
        bodies = [r.body for r in llm.log]
    first = bodies[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"] == GREETING
    assert "second time the agent asks" in first[0]["content"] and OPENING in first[0]["content"]
    assert bodies[1]["messages"][1:] == [{"role": "user", "content": GREETING},
                                         {"role": "assistant", "content": "hey, I want an order put on record"},
                                         {"role": "user", "content": ASK}]


def test_a_trl_dataset_of_an_agent_first_pack_shows_the_greeting_and_the_opening(pack, tmp_path):
    pytest.importorskip("datasets", reason="the rl extra (datasets) is not installed")
    from envgen.rl.env import environment_class, pack_dataset

    p = agent_first_pack(pack, tmp_path / "p", style="lowercase")
    row = pack_dataset(p)[0]
    assert row["prompt"][1:] == [{"role": "assistant", "content": GREETING},
                                 {"role": "user", "content": OPENING.lower()}]
    env = environment_class(p)()
    try:
        env.reset(**row)
        assert env.message_user(message=ASK) == f"it's {ORDER}."
        assert [m["content"] for m in env._episode.messages[:2]] == [GREETING, OPENING.lower()]
    finally:
        env._close()
