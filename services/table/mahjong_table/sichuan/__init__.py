"""The Sichuan Bloody family (RULES.md 1): what its table aggregate does differently from the
kernel (`mahjong_table.core`): the 108-tile wall of three suits, the exchange three, the missing
suit, two-stage claim windows (wins first, then one pong or kong), several wins per game (血战),
the skip-win lock.

`decide` (commands -> events), `evolve` (events -> state), `state`, `hands` (the rule questions
about a hand), `rules_adapter` (the one place calling the rules library), `autoplay` and `views`.
"""
