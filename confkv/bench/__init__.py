"""Benchmarks behind `confkv-agent bench ...`: one module per benchmark; the CLI layer only parses options."""
