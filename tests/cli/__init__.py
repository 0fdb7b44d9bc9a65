"""Tests of the `confkv-agent` command line: options, failures as one-line errors, hostile arguments."""
