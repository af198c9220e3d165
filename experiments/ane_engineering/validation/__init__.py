"""Validation: FP32 golden outputs and the gates a package must pass against them."""
