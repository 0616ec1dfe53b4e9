"""``mjctl evaluate`` (issue 3 item 7): JSON Lines in, one JSON line out per line, in order."""

import io
import json
import subprocess
import sys
from typing import Any

import pytest
from mjctl.__main__ import main
from mjctl.evaluate import evaluate_line, evaluate_stream

PLAIN_WIN = '{"variant": "sichuan_bloody", "concealed": "123m456m456p789p5p", "win_tile": "5p"}'
ISSUE_EXAMPLE = {
    "variant": "sichuan_bloody",
    "concealed": "234678m9p",
    "melds": [{"kind": "pong", "tile": "5p"}, {"kind": "kong", "tile": "7p", "exposure": "exposed"}],
    "win_tile": "9p",
    "win_by": "self_draw",
    "missing_suit": "s",
}


def fan_ids(answer: dict[str, Any]) -> list[str]:
    return [fan["id"] for fan in answer["fans"]]


def test_the_issue_example_scores_plain_root_and_self_draw() -> None:
    answer = evaluate_line(json.dumps(ISSUE_EXAMPLE))
    assert answer["ok"] and answer["win"]
    assert fan_ids(answer) == ["plain", "root", "self_draw"]
    assert answer["multiplier"] == 4
    assert answer["fans"][1] == {"id": "root", "name": "根", "multiplier": 2}


def test_full_flush_answer_names_the_fan_in_chinese() -> None:
    answer = evaluate_line('{"variant": "sichuan_bloody", "concealed": "123456789m1235m", "win_tile": "5m"}')
    assert answer == {
        "ok": True,
        "win": True,
        "multiplier": 4,
        "points_per_payer": 4,
        "fans": [{"id": "full_flush", "name": "清一色", "multiplier": 4}],
    }


def test_cap_and_add_one_show_in_points_per_payer() -> None:
    request = {
        "variant": "sichuan_bloody",
        "concealed": "1111335577m99m2m",
        "win_tile": "2m",
        "win_by": "self_draw",
        "self_draw_bonus": "add_one",
        "cap_points": 8,
    }
    answer = evaluate_line(json.dumps(request))
    assert answer["multiplier"] == 32
    assert answer["points_per_payer"] == 9
    assert fan_ids(answer) == ["pure_dragon_pairs"]


def test_not_a_win() -> None:
    line = '{"variant": "sichuan_bloody", "concealed": "123m456m456p789p5p", "win_tile": "6p"}'
    assert evaluate_line(line) == {"ok": True, "win": False}


def test_omitted_missing_suit_is_the_absent_suit() -> None:
    line = '{"variant": "sichuan_bloody", "concealed": "123m456m456p789p5s", "win_tile": "5s"}'
    assert evaluate_line(line) == {"ok": True, "win": False}


def test_waits_mode() -> None:
    answer = evaluate_line('{"mode": "waits", "variant": "sichuan_bloody", "concealed": "1122335566778m"}')
    assert answer["ok"] and answer["ready"]
    assert [(wait["tile"], wait["multiplier"]) for wait in answer["waits"]] == [("5m", 4), ("8m", 16)]
    assert answer["waits"][1]["fans"] == [{"id": "pure_seven_pairs", "name": "清七对", "multiplier": 16}]


@pytest.mark.parametrize(
    ("line", "error_part"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"concealed": "1m"}', "variant"),
        ('{"variant": "formula", "concealed": "1m"}', "missing key: win_tile"),
        ('{"variant": "sichuan_bloody", "concealed": "0m", "win_tile": "1m"}', "'0m'"),
        ('{"variant": "sichuan_bloody", "concealed": "55555m", "win_tile": "1m"}', "5m"),
        ('{"variant": "sichuan_bloody", "concealed": "123m", "win_tile": "1m"}', "expected 13"),
        ('{"variant": "sichuan_bloody", "concealed": "123m456m456p789p5p"}', "win_tile"),
        ('{"variant": "sichuan_bloody", "concealed": "123m456m456p789p5p", "win_tile": "5p", "x": 1}', "x"),
        (PLAIN_WIN[:-1] + ', "win_by": "ron"}', "ron"),
        ('{"variant": "sichuan_bloody", "mode": "nope", "concealed": "1m"}', "mode"),
        (
            '{"variant": "sichuan_bloody", "concealed": "123m456m789m5p", '
            '"melds": [{"kind": "kong", "tile": "7p"}], "win_tile": "5p"}',
            "exposure",
        ),
    ],
    ids=[
        "not json",
        "not an object",
        "no variant",
        "formula",
        "bad tile",
        "fifth copy",
        "wrong size",
        "no win tile",
        "unknown key",
        "bad win_by",
        "bad mode",
        "kong without exposure",
    ],
)
def test_malformed_lines_answer_ok_false(line: str, error_part: str) -> None:
    answer = evaluate_line(line)
    assert answer["ok"] is False
    assert error_part in answer["error"]


def test_stream_answers_every_line_in_order_and_goes_on_after_errors() -> None:
    lines = [json.dumps(ISSUE_EXAMPLE), "garbage", '{"variant": "formula"}', json.dumps(ISSUE_EXAMPLE)]
    output = io.StringIO()
    evaluate_stream([line + "\n" for line in lines], output)
    answers = [json.loads(line) for line in output.getvalue().splitlines()]
    assert [answer["ok"] for answer in answers] == [True, False, False, True]


def test_main_dispatches_to_evaluate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(ISSUE_EXAMPLE) + "\n"))
    assert main(["evaluate"]) == 0
    assert json.loads(capsys.readouterr().out)["multiplier"] == 4


def test_the_installed_command_over_a_pipe() -> None:
    stdin = "\n".join([json.dumps(ISSUE_EXAMPLE), "{", '{"variant": "formula"}']) + "\n"
    completed = subprocess.run(
        [sys.executable, "-m", "mjctl", "evaluate"], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    answers = [json.loads(line) for line in completed.stdout.splitlines()]
    assert len(answers) == 3
    assert answers[0]["win"] is True
    assert answers[1]["ok"] is False
    assert answers[2] == {"ok": False, "error": "missing key: concealed"}
