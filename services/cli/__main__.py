"""``python -m services.cli``: the ``kar`` command."""

from services.cli.main import app

app(prog_name="kar")
