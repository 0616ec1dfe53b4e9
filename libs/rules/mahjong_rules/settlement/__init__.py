"""Settlement math of Sichuan Bloody (RULES.md 1.5, 1.6, 1.8, 1.9, 1.10): pure functions from
game facts to payment instructions in points, and their conversion into beans.

No I/O: the caller passes already-computed facts (seats 0..3, multipliers, ready flags, each
player's maximum wait multiplier, whether a player holds three suits).
"""

from .beans import (
    apply_balance,
    beans_by_party,
    limit_to_income,
    points_by_party,
    post_in_order,
    post_instruction,
    rake_instructions,
    received_from,
    to_beans,
)
from .checks import (
    flower_pig_instructions,
    kong_refund_instructions,
    not_ready_instructions,
    wall_exhausted_instructions,
)
from .escape import escape_instruction, escape_owed_points, escape_penalty_points
from .game import Settled, new_game, settle, settle_game
from .kongs import call_transfer_instruction, kong_instructions
from .model import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    SEAT_COUNT,
    BeanInstruction,
    BeanPayment,
    EscapeFact,
    GameFact,
    HandFacts,
    Instruction,
    InvalidSettlementFactError,
    KongFact,
    KongIncome,
    KongKind,
    Party,
    Payment,
    Reason,
    SelfDrawBonus,
    SettlementOptions,
    SettlementState,
    WallExhaustedFact,
    WinBy,
    WinFact,
    Winner,
)
from .wins import win_instructions, win_payment_points

__all__ = [
    "HOUSE_ESCAPE",
    "HOUSE_RAKE",
    "SEAT_COUNT",
    "BeanInstruction",
    "BeanPayment",
    "EscapeFact",
    "GameFact",
    "HandFacts",
    "Instruction",
    "InvalidSettlementFactError",
    "KongFact",
    "KongIncome",
    "KongKind",
    "Party",
    "Payment",
    "Reason",
    "SelfDrawBonus",
    "Settled",
    "SettlementOptions",
    "SettlementState",
    "WallExhaustedFact",
    "WinBy",
    "WinFact",
    "Winner",
    "apply_balance",
    "beans_by_party",
    "call_transfer_instruction",
    "escape_instruction",
    "escape_owed_points",
    "escape_penalty_points",
    "flower_pig_instructions",
    "kong_instructions",
    "kong_refund_instructions",
    "limit_to_income",
    "new_game",
    "not_ready_instructions",
    "points_by_party",
    "post_in_order",
    "post_instruction",
    "rake_instructions",
    "received_from",
    "settle",
    "settle_game",
    "to_beans",
    "wall_exhausted_instructions",
    "win_instructions",
    "win_payment_points",
]
