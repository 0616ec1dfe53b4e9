"""The table kernel: what both families' aggregates share (RULES.md 1 and 2).

Pure: no I/O, no clock, no implicit randomness (the seed and every deadline expiry are inputs).
`events` (every event of a table's stream), `commands`, `errors`, `state`, `tiles`, `views`, the
steps of `decide` and `evolve`, and the `emitter` that builds a command's events (the room rules
are `mahjong_rules.room_rules`); the family packages `mahjong_table.sichuan` and
`mahjong_table.formula` hold only what their rules make different.
"""
