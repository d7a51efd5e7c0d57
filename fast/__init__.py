"""aotspec.fast: the fast backend on real torch tensors (built in a later issue)."""
