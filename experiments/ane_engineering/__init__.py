"""ANE engineering harness: checkpoint -> model -> package -> placement -> validation -> evidence.

Each command is a thin wrapper over this library: `python -m experiments.ane_engineering.<command> --help`.
A process started that way handles stop signals from here on, before the command's heavy imports (core/stop.py).
"""

from .core.stop import install_for_command_line

install_for_command_line()
