"""The pure Formula (公式) table aggregate (RULES.md 2): commands -> `decide` -> events -> `evolve`.

It plays on the kernel `mahjong_table.core` with the same commands, errors and events as the
Sichuan family (`mahjong_table.sichuan`); what differs is the family's play: a 144-tile wall with
flowers and 补花, the wildcard (财神) shown to all, chow from the previous seat, one win (截和)
that ends the hand, the bird after it, and no exchange three or missing suit.
"""
