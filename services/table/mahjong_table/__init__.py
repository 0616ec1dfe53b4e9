"""Table engine: live Sichuan Bloody tables (RULES.md 1.1-1.6, 1.10).

The pure aggregate lives in `mahjong_table.domain`; the service layers build on it.
"""
