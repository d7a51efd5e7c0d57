"""Documented examples of programs aotspec runs (`simple_fsdp.py`: SimpleFSDP on two ranks)."""
