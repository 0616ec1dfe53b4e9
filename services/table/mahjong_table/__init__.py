"""Table engine: live tables of both families, Sichuan Bloody (RULES.md 1) and Formula (RULES.md 2).

The pure aggregate is the kernel `mahjong_table.core` (what both families share: seats, turn
order, draws, kongs, leaving, the end, events, commands, errors, views) and one package per family,
`mahjong_table.sichuan` and `mahjong_table.formula`, holding only what differs;
`mahjong_table.variants` picks the family of a table. The service layers build on it.
"""
