"""confkv."""
