"""ANE engineering harness: checkpoint -> model -> package -> placement -> validation -> evidence.

Each command is a thin wrapper over this library: `python -m experiments.ane_engineering.<command> --help`.
"""
