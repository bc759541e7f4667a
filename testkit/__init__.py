"""Code the tests and the benchmarks share, so that neither imports the other.

``tests/`` asserts floors on what ``bench/`` prints; both need a throwaway PostgreSQL server
(:mod:`testkit.pgembedded`) and the same evaluations (:mod:`testkit.locomo`,
:mod:`testkit.recall_quality`, :mod:`testkit.everyday`, with :mod:`testkit.embedcache` and
:mod:`testkit.fusiondump`), and a bulk fill of a store (:mod:`testkit.bulk`), which agentd itself
never does. A package of its own rather than part of ``agentd``: none of it
belongs in the wheel (pyproject ships ``agentd`` only), and it may import any part of ``agentd``
while nothing in ``agentd`` imports it (tests/test_layers.py checks both, and that ``tests/`` and
``bench/`` never import each other).
"""
