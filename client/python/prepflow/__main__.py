"""`python -m prepflow ...` is the `prepflow` command."""
from prepflow._commands import prepflow

prepflow()
