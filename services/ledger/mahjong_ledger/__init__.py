"""Ledger service: bean accounts, double-entry postings, settlement exactly once, reconciliation.

Consumes ``mahjong.settlement.v1``, publishes ``mahjong.ledger.v1``, serves ``LedgerService``.
"""
