"""The one root of the harness's own errors.

Every refusal the harness makes on purpose (bad input, a package or golden it cannot trust, an output it will not
overwrite, a backend this machine lacks) is a `HarnessError`. Commands print it as one line and exit 2
(`cli.run_main`); anything else that escapes is a bug and keeps its traceback.
"""


class HarnessError(Exception):
    """A deliberate refusal with a message the user can act on."""
