"""Documented examples of programs aotspec runs: `simple_fsdp.py` (SimpleFSDP on two ranks),
`zoo.py` (the model zoo, one training step each), `transformer.py` (the block FSDP2 shards)."""
