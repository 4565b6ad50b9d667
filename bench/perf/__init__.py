"""Latency, throughput and load of toolselect on this machine; run as `python -m bench.perf`.

One module per measured section (`inproc`, `http_rank`, `cold`, `intake`, `load`), the
synthetic catalog they share (`catalog`), the server process (`server`; vegeta drives it),
the stores (`stores`), timing and machine accounting (`timing`, `machine`), the targets
(`targets`) and the results files (`report`). The driver and its options are `__main__`;
the hand-written reading of the figures is FINDINGS.md.
"""
