"""The `confkv-agent` command line: one module per command group (`cli.main` assembles them). The top layer:
nothing imports it."""
