"""`confkv-agent envs serve` through typer's CliRunner (a short --duration stands in for Ctrl-C)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from typer.testing import CliRunner

from cli.envs import parse_site_names
from cli.main import app


def test_serve_prints_urls_and_stops(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["envs", "serve", "--sites", "shopping", "--duration", "0.5",
                                      "--workdir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    urls = re.findall(r"http://127\.0\.0\.1:(\d+)", result.output)
    assert "__SHOPPING__" in result.output and len(urls) == 1
    assert "Sites stopped." in result.output
    try:
        socket.create_connection(("127.0.0.1", int(urls[0])), timeout=2).close()
        still_open = True
    except OSError:
        still_open = False
    assert not still_open


def test_serve_unknown_site_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["envs", "serve", "--sites", "shoping", "--workdir", str(tmp_path)])
    assert result.exit_code == 2 and "unknown site 'shoping'" in result.output


def test_parse_site_names() -> None:
    assert parse_site_names(None) is None and parse_site_names("all") is None
    assert parse_site_names(" shopping, forum ,") == ["shopping", "forum"]
