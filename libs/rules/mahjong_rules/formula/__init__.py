"""Formula (公式) rules of RULES.md 2: Chinese Official (MCR) fans with wildcards, flowers, birds
and dealer doubling. Pure: no I/O, no clocks, randomness only from a seed passed in.

Where each rule lives:

- ``wall``: the 144-tile wall, 补花 from the tail, the wildcard indicator and successor, the bird
  tile (2.1, 2.3)
- ``fans``: the 81 MCR fans (ids, Chinese names, values) and the adapter over the reference MCR
  calculator ``PyMahjongGB`` (2.2); the only module that imports it
- ``wildcards``: the substitution search, 无财神, flowers and the minimum (2.1, 2.2)
- ``waits``: the waits of a 13-tile position, each scored as a discard win (2.1, 2.2)
- ``scoring``: birds, dealer doubling, ``fan_term``, settlement instructions, escape (2.3)
- ``evaluate_json``: the ``mjctl evaluate`` JSON form of this family (issue 6 item 5)

Importing this package needs ``PyMahjongGB`` (see ``fans``); ``mahjong_rules`` itself does not.
"""
