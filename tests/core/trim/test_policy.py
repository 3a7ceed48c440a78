"""The trim policy decides from numbers alone."""

from __future__ import annotations

from app.core.trim.policy import (
    Action,
    HistoryMessage,
    TrimRequest,
    choose_kept,
    plan_trim,
)


def history(*tokens):
    roles = ["user", "assistant"]
    return [
        HistoryMessage(key=i, role=roles[i % 2], tokens=t) for i, t in enumerate(tokens)
    ]


def request(hist, new=20, max_tokens=50, limit=512, **kw):
    fixed = 30
    prompt = fixed + sum(m.tokens for m in hist) + new
    return TrimRequest(
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        history=hist,
        new_message_tokens=new,
        fixed_tokens=fixed,
        limit=limit,
        keep_ratio=kw.pop("keep_ratio", 0.6),
        summary_max_tokens=kw.pop("summary_max_tokens", 64),
        **kw,
    )


def test_under_the_limit_proceeds():
    plan = plan_trim(request(history(40, 40)))
    assert plan.action is Action.PROCEED
    assert plan.projected_tokens == 30 + 80 + 20 + 50


def test_over_the_limit_drops_the_oldest_and_keeps_whole_recent_turns():
    hist = history(100, 100, 60, 60, 50, 50)
    plan = plan_trim(request(hist))
    assert plan.action is Action.TRIM
    # keep budget 0.6 * 512 - 20 = 287: the newest 50+50+60+60 = 220 fit, the next 100 not.
    assert plan.keep == [2, 3, 4, 5]
    assert plan.drop == [0, 1]
    assert plan.after_trim_tokens <= 512
    assert plan.cause == "limit" and plan.limit == 512 == plan.threshold


def test_kept_part_starts_with_a_user_message():
    hist = history(
        100, 100, 100, 90, 90
    )  # newest fit: 90+90 = 180 (keys 3,4); key 3 is assistant
    plan = plan_trim(request(hist, keep_ratio=0.45))
    assert plan.keep and hist[plan.keep[0]].role == "user"
    assert plan.drop + plan.keep == [m.key for m in hist]


def test_auto_trim_off_refuses_with_the_numbers():
    plan = plan_trim(request(history(300, 300), auto_trim=False))
    assert plan.action is Action.REFUSE
    assert (
        "700" in plan.reason
        and "512" in plan.reason
        and "Auto-trim is off" in plan.reason
    )


def test_nothing_left_to_drop_refuses():
    plan = plan_trim(request([], new=600))
    assert plan.action is Action.REFUSE and "no older history" in plan.reason


def test_warning_pressure_trims_earlier():
    hist = history(80, 80, 80, 80)  # projected 30 + 320 + 20 + 50 = 420 < 512
    assert plan_trim(request(hist)).action is Action.PROCEED
    plan = plan_trim(request(hist, pressure="warning"))
    assert plan.action is Action.TRIM and plan.threshold == 384
    assert "memory pressure" in plan.reason
    assert plan.cause == "pressure" and plan.limit == 512


def test_critical_pressure_trims_now_and_refuses_the_prefill():
    hist = history(40, 40, 40, 40)
    plan = plan_trim(request(hist, pressure="critical", keep_ratio=0.2))
    assert plan.action is Action.TRIM and plan.refuse_after_trim
    assert "critical" in plan.reason and plan.cause == "critical"
    assert plan_trim(request([], pressure="critical")).action is Action.REFUSE


def test_choose_kept_never_splits_a_message():
    hist = history(10, 10, 10)
    assert choose_kept(hist, 25) == 2  # 10+10 fit but index 1 is an assistant reply
    assert choose_kept(hist, 30) == 0
    assert choose_kept(hist, 5) == 3


def test_a_turn_over_the_limit_is_a_limit_trim_even_under_pressure():
    # Pressure would have trimmed at 384, but this turn passes the limit itself.
    plan = plan_trim(request(history(100, 100, 60, 60, 50, 50), pressure="warning"))
    assert plan.action is Action.TRIM and plan.cause == "limit"
    assert plan_trim(request(history(40, 40))).cause == ""  # proceeding: no cause
