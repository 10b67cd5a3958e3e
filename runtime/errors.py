"""The one small error hierarchy: the CLI and the app catch `UserError` at the edge."""


class SpecQuantError(Exception):
    """Base of every error SpecQuant raises on purpose."""


class UserError(SpecQuantError):
    """Bad input or environment the user can fix: exit code 2 and one line, never a traceback."""


class Cancelled(SpecQuantError):
    """The user asked to stop; whatever was half-written has been removed."""
