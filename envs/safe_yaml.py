"""Read a hand-written YAML file without letting it blow up: regular files only, a size cap, and a cap on alias
expansion.

Why: YAML aliases let a file under 1 KB describe a value of billions of nodes ("billion laughs"). PyYAML composes
such a file cheaply (an alias is the same node object, not a copy), so the danger is everything after it: pydantic
copies the value node by node and error messages print it. We compose the node graph once, count the nodes the
document would have with every alias expanded (memoised, so counting is linear in the file), and refuse the file
above `MAX_NODES` before anything is constructed. Plain anchors and aliases that stay small keep working.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1 << 20  # 1 MiB: our task files are ~1.5 KB
MAX_NODES = 20_000  # scalars + collections after alias expansion; a task has ~50


class YamlLimitError(ValueError):
    """The file is too large, or expands to too many nodes; the message says which limit."""


def expanded_size(node: yaml.Node, limit: int = MAX_NODES) -> int:
    """Nodes of the document with aliases expanded; stops counting once `limit` is passed."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node, depth: int) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if depth > 100:
            raise YamlLimitError("YAML nesting deeper than 100 levels")
        sizes[key] = limit + 1  # a node that contains itself (recursive alias) counts as too big
        total = 1
        if isinstance(n, yaml.SequenceNode):
            for child in n.value:
                total += size(child, depth + 1)
                if total > limit:
                    break
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                total += size(k, depth + 1) + size(v, depth + 1)
                if total > limit:
                    break
        sizes[key] = total
        return total

    return size(node, 0)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def read_capped(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; YamlLimitError for anything else.

    Why not `stat().st_size` then `read_text()`: a FIFO named `x.yaml` blocks the read until a writer comes (never),
    and a device such as `/dev/zero` reports size 0 and then streams bytes until memory runs out. The file is opened
    without blocking, its type checked on the open descriptor (no swap between check and read), and at most
    `limit + 1` bytes are read whatever the size claimed. Raises OSError and UnicodeDecodeError as reading does."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "a special file")
            raise YamlLimitError(f"not a regular file ({kind}); task files must be plain files")
        data = f.read(limit + 1)
    if len(data) > limit:
        size = max(len(data), path.stat().st_size)
        raise YamlLimitError(f"file is {size:,} bytes; task files may be at most {limit:,}")
    return data.decode("utf-8")


def load_limited(path: Path) -> tuple[yaml.Node | None, Any]:
    """(node tree for line numbers, Python value) of one YAML document; raises YamlLimitError, OSError,
    UnicodeDecodeError or yaml.YAMLError."""
    text = read_capped(path)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        count = expanded_size(node)
        if count > MAX_NODES:
            raise YamlLimitError(f"the document expands to more than {MAX_NODES:,} YAML nodes (aliases expanded); "
                                 "is it an alias bomb?")  # fmt: skip
        return node, loader.construct_document(node)
    finally:
        loader.dispose()
