"""Benchmarks (``make bench``; ``python -m bench.run``): results under bench/results/.

One module per benchmark (``python -m bench.<name> [--quick]``), shared helpers in
``bench.common`` (machine facts, statistics, results files, fixtures) and ``bench.infra``
(Kafka topics per run, topic reader); ``bench.run`` runs them and writes bench/README.md.
"""
