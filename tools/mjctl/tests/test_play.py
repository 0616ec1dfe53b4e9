"""``mjctl play``'s screen and keys, without a server: the hand sorted by suit and numbered, every
seat's melds and discards, the wildcard, the waits hint, and each key's command for a view."""

from __future__ import annotations

import pytest
from mahjong.v1 import scoring_service_pb2
from mahjong.v1 import table_service_pb2 as messages
from mjctl.play import Game, KeyError_, command_for_key, legal_keys, screen_lines, sorted_hand, waits_text


def view(**fields: object) -> messages.TableView:
    base = messages.TableView(
        table_id="t-1234567890",
        room_id="formula-fan",
        sequence=41,
        your_seat=1,
        dealer_seat=0,
        phase="turn",
        turn_seat=1,
        hand="19s2z5m1f37p",
        wall_remaining=50,
        wildcard="6s",
        wildcard_indicator="5s",
    )
    for seat in range(4):
        base.seats.add(seat=seat, player_id=f"p{seat}", concealed_count=13, discards=[f"{seat + 1}m"])
    base.seats[2].melds.add(kind="chow", tile="3p", from_seat=1)
    base.seats[3].flowers = "2f"
    for name, value in fields.items():
        if name == "legal_actions":
            base.legal_actions.extend(value)  # type: ignore[arg-type]
        else:
            setattr(base, name, value)
    return base


def test_the_hand_is_sorted_by_suit_then_rank() -> None:
    assert sorted_hand("19s2z5m1f37p") == ["5m", "3p", "7p", "1s", "9s", "2z", "1f"]


def test_the_screen_shows_every_seat_the_wildcard_the_numbered_hand_and_the_waits_hint() -> None:
    game = Game(view=view(), waits_hint="3p ×2", events=["seat 0 (p0) discards 1m"])
    text = "\n".join(screen_lines(game))
    assert "wildcard 6s (indicator 5s)" in text and "wall 50 left" in text and "your turn" in text
    assert all(f"seat {seat} " in text for seat in range(4)) and "seat 1 you" in text
    assert all(f"discards: {seat + 1}m" in text for seat in range(4))
    assert "melds chow 3p from seat 1" in text and "flowers 2f" in text
    assert "1:5m  2:3p  3:7p  4:1s  5:9s  6:2z  7:1f" in text and "5m 37p 19s 2z 1f" in text
    assert "Waits: 3p ×2" in text and "seat 0 (p0) discards 1m" in text


def test_a_number_discards_that_tile_of_the_sorted_hand_when_it_is_allowed() -> None:
    current = view(legal_actions=[messages.LegalAction(kind="discard", tiles=["3p", "7p", "9s"])])
    request = command_for_key("3", current)
    assert request.discard.tile == "7p" and request.expected_sequence == 41 and request.table_id
    with pytest.raises(KeyError_, match="5m may not be discarded now"):
        command_for_key("1", current)
    with pytest.raises(KeyError_, match=r"1\.\.7"):
        command_for_key("8", current)
    assert "[2-3 5] discard" in legal_keys(current)


def test_claim_keys_win_pong_kong_chow_and_pass() -> None:
    current = view(
        phase="claim",
        claimable_tile="4p",
        legal_actions=[
            messages.LegalAction(kind="win"),
            messages.LegalAction(kind="pong"),
            messages.LegalAction(kind="kong"),
            messages.LegalAction(kind="chow", tiles=["2p", "3p"]),
            messages.LegalAction(kind="pass"),
        ],
    )
    assert command_for_key("w", current).HasField("win")
    assert command_for_key("p", current).HasField("pong")
    assert command_for_key("k", current).kong.tile == ""  # claiming the discard names no tile
    assert command_for_key("c2", current).chow.tile == "3p"
    assert command_for_key("s", current).WhichOneof("command") == "pass"
    with pytest.raises(KeyError_, match=r"c1\.\.c2"):
        command_for_key("c3", current)
    keys = legal_keys(current)
    assert "[w] win" in keys and "[p] pong 4p" in keys and "[c2] chow from 3p" in keys and "[s] pass" in keys


def test_sichuan_opening_keys_exchange_and_missing_suit() -> None:
    exchange = view(
        hand="1234m56p789s", phase="exchange", legal_actions=[messages.LegalAction(kind="exchange_three")]
    )
    assert command_for_key("x 5 6 7", exchange).exchange_three.tiles == "5p6p7s"
    assert len(command_for_key("x", exchange).exchange_three.tiles) == 4  # the suggestion: "789s"-like
    with pytest.raises(KeyError_, match="three different"):
        command_for_key("x 1 1 2", exchange)
    missing = view(
        phase="missing_suit",
        legal_actions=[messages.LegalAction(kind="declare_missing_suit", suits=["m", "p", "s"])],
    )
    assert command_for_key("p", missing).declare_missing_suit.suit == "p"
    assert "[s] bamboo missing" in legal_keys(missing)


def test_enter_sends_the_suggested_move_and_a_key_out_of_turn_says_why() -> None:
    current = view(legal_actions=[messages.LegalAction(kind="discard", tiles=["3p", "7p"])])
    assert command_for_key("", current).discard.tile in ("3p", "7p")
    with pytest.raises(KeyError_, match="wait for your turn"):
        command_for_key("1", view())
    with pytest.raises(KeyError_, match="not a key for now"):
        command_for_key("w", current)


def test_waits_read_as_multipliers_in_sichuan_and_fans_in_formula() -> None:
    answer = scoring_service_pb2.ListWaitsResponse(ready=True)
    answer.waits.add(tile="3p", multiplier=2, fan=9, meets_min=True)
    answer.waits.add(tile="6p", multiplier=4, fan=5, meets_min=False)
    assert waits_text(answer, formula=False) == "3p ×2 · 6p ×4"
    assert waits_text(answer, formula=True) == "3p 9 fan"


def test_the_simultaneous_picks_are_sent_without_the_optimistic_check() -> None:
    """RULES.md 1.2, 1.3: another seat's exchange or missing-suit pick changes nothing of this one,
    so it must not make the table refuse it (a turn command keeps the check, above)."""
    exchanging = view(
        phase="exchange", hand="1234567m123456p", legal_actions=[messages.LegalAction(kind="exchange_three")]
    )
    assert command_for_key("x 1 2 3", exchanging).expected_sequence == 0
    assert command_for_key("", exchanging).expected_sequence == 0
    declaring = view(
        phase="missing_suit",
        legal_actions=[messages.LegalAction(kind="declare_missing_suit", suits=["m", "s"])],
    )
    request = command_for_key("m", declaring)
    assert request.declare_missing_suit.suit == "m" and request.expected_sequence == 0
