"""Command-line subcommands beyond scan/demo; each module registers itself on `gpuwaste.cli.app`."""
