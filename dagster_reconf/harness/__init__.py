"""The closed control loop, driven end to end through the real Dagster daemon, and the timeline it reports.

What ``make demo``, the benchmarks and the closed-loop tests run; it sits over the Dagster building blocks and
is not needed to use them.
"""
