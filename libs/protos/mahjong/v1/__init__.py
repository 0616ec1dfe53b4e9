"""Generated from protos/mahjong/v1 by `make proto`. Never edit by hand."""
