"""Run by mkdocs-gen-files at build time: the generated reference pages (never committed, so
they cannot drift): the configuration from the models, the command line from the CLI."""

from __future__ import annotations

import mkdocs_gen_files
import typer

from priority_pubsub.cli import app
from priority_pubsub.commands.cli_reference import cli_reference
from priority_pubsub.settings.reference import config_reference

with mkdocs_gen_files.open("reference/config.md", "w") as page:
    page.write(config_reference())
with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(cli_reference(typer.main.get_command(app)))
