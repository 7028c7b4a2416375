"""dev/cluster's tool as a package that tests/realapps.py and ``sluice bench cluster`` import from a checkout
(with ``dev/`` on ``sys.path``), and that dev/test's ruff and mypy read."""
