"""Bundled workloads: deterministic generators, their Spark sources, and the queries over them."""
