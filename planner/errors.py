"""The one exception type the CLI turns into a one-line message and exit code 2."""


class PlannerInputError(ValueError):
    """Bad user input: the message names the field and the fix, on one line."""
