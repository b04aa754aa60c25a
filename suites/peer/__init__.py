"""The torchvision peer suite: one table of (DetOps op, torchvision op) pairs (pairs.py), used by the
pytest suite (test_peer.py) and the speed runner (scripts/peer_bench.py). See docs/peers.md."""
